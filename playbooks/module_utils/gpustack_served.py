"""Does a TLS server serve the certificate in a file? For ``gpustack certs renew``: after ``kubeadm certs renew``
the API server keeps serving the certificate it loaded at its start until it restarts (kubernetes/website
content/en/docs/tasks/administer-cluster/kubeadm/kubeadm-certs.md: "you must restart the control plane Pods").
Standard library only (the target's python3, 3.8 or newer); nothing is trusted or sent but a TLS handshake.

:func:`served_matches` compares the DER bytes of the first certificate of a PEM file with what the server presents;
:func:`wait_served` retries until they match or a deadline passes.
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import time

PEM_BEGIN = "-----BEGIN CERTIFICATE-----"
PEM_END = "-----END CERTIFICATE-----"


def file_der(path: str) -> bytes | None:
    """The DER bytes of the first certificate in the PEM file ``path`` (None: unreadable or no certificate)."""
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    start = text.find(PEM_BEGIN)
    end = text.find(PEM_END, start)
    if start < 0 or end < 0:
        return None
    try:
        return ssl.PEM_cert_to_DER_cert(text[start : end + len(PEM_END)] + "\n")
    except ValueError:
        return None


def served_der(host: str, port: int, timeout: float = 5.0) -> bytes | None:
    """The DER bytes of the certificate ``host:port`` presents (None: no TLS server there)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock, context.wrap_socket(sock) as tls:
            return tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return None


def fingerprint(der: bytes | None) -> str:
    return hashlib.sha256(der).hexdigest() if der else ""


def served_matches(host: str, port: int, path: str, timeout: float = 5.0) -> dict:
    """``{"matches", "file", "served"}``: whether ``host:port`` serves the certificate in ``path`` (sha256 of each,
    "" when absent)."""
    want = file_der(path)
    got = served_der(host, port, timeout)
    return {"matches": bool(want) and want == got, "file": fingerprint(want), "served": fingerprint(got)}


def wait_served(host: str, port: int, path: str, wait: float, delay: float = 2.0) -> dict:
    """:func:`served_matches` until it matches or ``wait`` seconds passed; the last answer, with ``waited``."""
    t0 = time.monotonic()
    while True:
        found = served_matches(host, port, path)
        waited = time.monotonic() - t0
        if found["matches"] or waited >= wait:
            found["waited"] = round(waited, 1)
            return found
        time.sleep(min(delay, max(0.0, wait - waited)))
