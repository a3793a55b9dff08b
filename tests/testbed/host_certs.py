"""What a test-bed control plane's certificates say, read from the host's files and from its port 6443.

The files are the real kubeadm's (tests/testbed/realkubeadm.py): the PEM files under /etc/kubernetes/pki and the
client certificates embedded in the kubeconfigs kubeadm writes, read with the cryptography package on this machine
(the host root is a directory here). The served certificate is what a TLS handshake with ``address:6443`` presents
(the crictl double's stand-in for the API server's serving side, tests/testbed/doubles/crictl).
"""

from __future__ import annotations

import base64
import ssl
from datetime import datetime

import yaml
from cryptography import x509

from .hosts import Host

PKI = "/etc/kubernetes/pki"
#: the CAs kubeadm signs with (renewed by nothing automatic: ``certificates.ca_validity``)
CAS = ("ca.crt", "front-proxy-ca.crt", "etcd/ca.crt")
#: kubeadm's leaf certificates on a stacked-etcd control plane (kubeadm ``init phase certs all``)
LEAVES = ("apiserver.crt", "apiserver-kubelet-client.crt", "apiserver-etcd-client.crt", "front-proxy-client.crt",
          "etcd/server.crt", "etcd/peer.crt", "etcd/healthcheck-client.crt")  # fmt: skip
#: the kubeconfigs ``kubeadm certs renew all`` renews (the kubelet's own is rotated by the kubelet)
KUBECONFIGS = ("admin.conf", "super-admin.conf", "controller-manager.conf", "scheduler.conf")


def kubeconfig_cert(text: str) -> x509.Certificate:
    """The client certificate embedded in a kubeconfig (``users[0].user.client-certificate-data``)."""
    data = yaml.safe_load(text)["users"][0]["user"]["client-certificate-data"]
    return x509.load_pem_x509_certificate(base64.b64decode(data))


def not_after(host: Host) -> dict[str, datetime]:
    """notAfter of every CA, leaf and kubeconfig certificate on the control plane ``host``, by file."""
    out = {rel: x509.load_pem_x509_certificate(host.path(f"{PKI}/{rel}").read_bytes()).not_valid_after_utc
           for rel in (*CAS, *LEAVES)}  # fmt: skip
    for conf in KUBECONFIGS:
        out[conf] = kubeconfig_cert(host.path(f"/etc/kubernetes/{conf}").read_text()).not_valid_after_utc
    return out


def served(address: str, port: int = 6443) -> bytes:
    """The DER certificate ``address:port`` presents (nothing trusted, nothing sent)."""
    return ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate((address, port), timeout=10))


def file_der(host: Host, rel: str = "apiserver.crt") -> bytes:
    return ssl.PEM_cert_to_DER_cert(host.path(f"{PKI}/{rel}").read_text())
