"""Kubelet serving-certificate requests as a kubelet makes them (kubernetes ``pkg/kubelet/certificate/kubelet.go``:
an ECDSA P-256 key, subject ``O=system:nodes, CN=system:node:<name>``, the Node's addresses as DNS and IP SANs),
signed with a generated key: for the approver's unit tests and the real control plane's (tests/controlplane)."""

from __future__ import annotations

import base64
import ipaddress
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

SIGNER = "kubernetes.io/kubelet-serving"


def request_pem(cn: str, *, dns: tuple[str, ...] = (), ips: tuple[str, ...] = (), org: str = "system:nodes") -> bytes:
    """A PEM ``CERTIFICATE REQUEST`` for ``cn`` with those SANs, signed with a fresh P-256 key."""
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org), x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(names))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def csr_object(
    name: str, pem: bytes, *, usages: tuple[str, ...] = ("digital signature", "server auth")
) -> dict[str, Any]:
    """The CertificateSigningRequest a kubelet creates (``spec.username``/``groups`` are the API server's to set)."""
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64.b64encode(pem).decode(), "signerName": SIGNER, "usages": list(usages)},
    }
