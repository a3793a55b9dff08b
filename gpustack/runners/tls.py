"""Certificates read for their expiry: a kubeconfig user's client certificate, and the certificate a TLS server
presents, read without trusting or sending anything (``gpustack status``: the certificate each API server serves,
which can be read even when this machine's client certificate has expired)."""

from __future__ import annotations

import base64
import binascii
import socket
import ssl
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography import x509


def pem_expiry(pem: bytes) -> datetime | None:
    """notAfter of the first certificate in ``pem`` (None: not a certificate)."""
    try:
        return x509.load_pem_x509_certificate(pem).not_valid_after_utc
    except ValueError:
        return None


def client_certificate_expiry(config: Mapping[str, Any], user: str) -> datetime | None:
    """notAfter of the client certificate of kubeconfig user ``user`` (``client-certificate-data``, or the
    ``client-certificate`` file, already made absolute by the kubeconfig loader); None: token or exec credentials,
    or nothing readable."""
    entry = next((u.get("user") for u in config.get("users") or [] if isinstance(u, Mapping) and u.get("name") == user),
                 None)  # fmt: skip
    if not isinstance(entry, Mapping):
        return None
    data = entry.get("client-certificate-data")
    if isinstance(data, str) and data:
        try:
            return pem_expiry(base64.b64decode(data, validate=False))
        except (binascii.Error, ValueError):
            return None
    path = entry.get("client-certificate")
    if isinstance(path, str) and path:
        try:
            return pem_expiry(Path(path).read_bytes())
        except OSError:
            return None
    return None


def served_certificate_expiry(host: str, port: int, *, timeout: float = 5.0) -> datetime | None:
    """notAfter of the certificate a TLS server presents (read only: nothing is trusted or sent)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock, context.wrap_socket(sock) as tls:
            der = tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return None
    if not der:
        return None
    try:
        return x509.load_der_x509_certificate(der).not_valid_after_utc
    except ValueError:
        return None
