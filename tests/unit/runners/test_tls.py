"""gpustack/runners/tls.py: the certificate a TLS server presents, read without trusting it."""

from __future__ import annotations

import base64
import datetime as dt
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpustack.runners import tls
from gpustack.runners.tls import served_certificate_expiry


def make_cert(not_after: dt.datetime) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM), self-signed, valid until ``not_after``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(not_after - dt.timedelta(days=400))
        .not_valid_after(not_after).sign(key, hashes.SHA256())
    )  # fmt: skip
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())  # fmt: skip
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def test_client_certificate_from_data_and_from_a_file(tmp_path: Path) -> None:
    when = dt.datetime(2027, 11, 28, 1, 36, 57, tzinfo=dt.timezone.utc)
    pem, _ = make_cert(when)
    data = {"users": [{"name": "admin", "user": {"client-certificate-data": base64.b64encode(pem).decode()}}]}
    assert tls.client_certificate_expiry(data, "admin") == when
    assert tls.client_certificate_expiry(data, "someone-else") is None
    (tmp_path / "admin.crt").write_bytes(pem)
    by_file = {"users": [{"name": "admin", "user": {"client-certificate": str(tmp_path / "admin.crt")}}]}
    assert tls.client_certificate_expiry(by_file, "admin") == when
    token = {"users": [{"name": "admin", "user": {"token": "t"}}]}
    assert tls.client_certificate_expiry(token, "admin") is None
    broken = {"users": [{"name": "admin", "user": {"client-certificate-data": "bm90IGEgY2VydA=="}}]}
    assert tls.client_certificate_expiry(broken, "admin") is None
    gone = {"users": [{"name": "admin", "user": {"client-certificate": str(tmp_path / "gone.crt")}}]}
    assert tls.client_certificate_expiry(gone, "admin") is None


@contextmanager
def tls_server(tmp_path: Path, not_after: dt.datetime) -> Iterator[int]:
    pem, key = make_cert(not_after)
    (tmp_path / "c.pem").write_bytes(pem)
    (tmp_path / "k.pem").write_bytes(key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (OSError, ssl.SSLError):
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        listener.close()
        thread.join(timeout=5)


def test_served_certificate(tmp_path: Path) -> None:
    when = dt.datetime(2027, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    with tls_server(tmp_path, when) as port:
        assert served_certificate_expiry("127.0.0.1", port, timeout=5) == when
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    assert served_certificate_expiry("127.0.0.1", port, timeout=1) is None
