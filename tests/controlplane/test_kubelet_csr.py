"""Kubelet serving certificates against the real kube-apiserver 1.36.5 and kube-controller-manager (issue 27).

gpustack's kubeadm configuration (the shared fixture renders it) starts the API server with
``--kubelet-certificate-authority``; a node user (a client certificate ``O=system:nodes, CN=system:node:<name>``
signed by the cluster CA, as the kubelet's is) creates ``kubernetes.io/kubelet-serving`` CSRs as a kubelet does,
with a key generated here; the real Node authorizer lets it. gpustack's approver (gpustack/cluster/kubelet_csr.py)
approves the node's own request, and the real controller-manager's ``csrsigning`` controller issues a certificate
that the cluster CA verifies, with the node's names only; a request for a foreign IP stays pending, unsigned."""

from __future__ import annotations

import base64
import datetime
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpustack.cluster.kubelet_csr import CSR_PATH, approve_pending
from gpustack.config.model import Config
from gpustack.render.security import KUBELET_CA
from gpustack.runners.kube import Kube
from gpustack.runners.kubeconfig import kube_from_file
from tests.controlplane import kubeadm_phases as kp
from tests.kubelet_csrs import csr_object, request_pem

from .cluster import NODE, ControlPlane, kubectl

WORKER, ADDRESS, HOSTNAME = "csr-w1", "10.20.30.41", "gpu-csr-w1"


def node_kubeconfig(cp: ControlPlane, name: str) -> Path:
    """A kubeconfig whose user is the node ``name``: a client certificate the cluster CA signed (kubeadm's
    ``ca.crt``/``ca.key`` of the fixture), subject ``O=system:nodes, CN=system:node:<name>``."""
    ca = x509.load_pem_x509_certificate((cp.pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((cp.pki / "ca.key").read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{name}")])  # fmt: skip
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]  # fmt: skip
    admin = yaml.safe_load(cp.admin_kubeconfig.read_text())
    admin["users"] = [{"name": name, "user": {
        "client-certificate-data": base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode(),
        "client-key-data": base64.b64encode(key.private_bytes(serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8, serialization.NoEncryption())).decode()}}]  # fmt: skip
    admin["contexts"] = [{"name": name, "context": {"cluster": admin["clusters"][0]["name"], "user": name}}]
    admin["current-context"] = name
    path = cp.workdir / f"{name}.conf"
    path.write_text(yaml.safe_dump(admin))
    path.chmod(0o600)
    return path


def until(probe: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def admin(control_plane: ControlPlane) -> Iterator[Kube]:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": WORKER}}
    kubectl(control_plane, "create", "-f", "-", stdin=json.dumps(node))
    status = {"status": {"addresses": [{"type": "InternalIP", "address": ADDRESS},
                                       {"type": "Hostname", "address": HOSTNAME}]}}  # fmt: skip
    kubectl(control_plane, "patch", "node", WORKER, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    yield kube_from_file(control_plane.admin_kubeconfig)
    kubectl(control_plane, "delete", "csr", "csr-test-own", "csr-test-foreign", "--ignore-not-found")
    kubectl(control_plane, "delete", "node", WORKER, "--ignore-not-found")


def test_the_api_server_verifies_kubelets_with_the_ca_the_signer_signs_with(control_plane: ControlPlane) -> None:
    """The flag gpustack renders reached the real API server's command (as the fixture runs it, files relocated), on
    the CA the controller-manager signs kubelet serving certificates with."""

    def flags(component: str) -> dict[str, str]:
        manifest = yaml.safe_load((control_plane.pki / f"{component}.yaml").read_text())
        args = kp.relocate(kp.command_of(manifest), root=control_plane.pki, ports=control_plane.ports)
        return dict(a.partition("=")[::2] for a in args if a.startswith("--"))

    assert KUBELET_CA == "/etc/kubernetes/pki/ca.crt"
    verifies = flags("kube-apiserver")["--kubelet-certificate-authority"]
    assert verifies == flags("kube-controller-manager")["--cluster-signing-cert-file"]
    assert Path(verifies) == control_plane.pki / "ca.crt"


def test_the_nodes_own_request_is_approved_and_issued_a_foreign_one_stays_pending(
    control_plane: ControlPlane, admin: Kube
) -> None:
    as_node = node_kubeconfig(control_plane, WORKER)
    own = csr_object("csr-test-own", request_pem(f"system:node:{WORKER}", dns=(HOSTNAME,), ips=(ADDRESS,)))
    foreign = csr_object("csr-test-foreign", request_pem(f"system:node:{WORKER}", dns=(HOSTNAME,), ips=("192.0.2.9",)))
    for csr in (own, foreign):
        kubectl(control_plane, "create", "-f", "-", kubeconfig=as_node, stdin=json.dumps(csr))
    made = admin.get("certificates.k8s.io/v1", "CertificateSigningRequest", "csr-test-own")
    assert made is not None and made["spec"]["username"] == f"system:node:{WORKER}"  # the API server set it
    cfg = Config.model_validate({"nodes": [{"name": NODE, "address": kp.ADVERTISE, "role": "control-plane"},
                                           {"name": WORKER, "address": ADDRESS, "role": "worker"}]})  # fmt: skip
    result = approve_pending(admin, cfg)
    assert [v.csr for v in result.approved] == ["csr-test-own"]
    assert [v.csr for v in result.refused] == ["csr-test-foreign"] and "192.0.2.9" in result.refused[0].reason

    def issued() -> str:
        got = admin.request("GET", f"{CSR_PATH}/csr-test-own")
        return str((got.get("status") or {}).get("certificate") or "")

    pem = base64.b64decode(until(issued, "the controller-manager to sign the approved request"))
    cert = x509.load_pem_x509_certificate(pem)
    ca = x509.load_pem_x509_certificate((control_plane.pki / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [HOSTNAME]
    assert [str(i) for i in sans.get_values_for_type(x509.IPAddress)] == [ADDRESS]
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{WORKER}"

    time.sleep(2)  # the signer had its chance at the foreign one too
    left = admin.request("GET", f"{CSR_PATH}/csr-test-foreign")
    assert not (left.get("status") or {}).get("conditions") and not (left.get("status") or {}).get("certificate")
    assert approve_pending(admin, cfg).approved == []  # a second pass approves nothing new
