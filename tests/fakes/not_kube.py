"""TEST DOUBLE: servers a kubeconfig can point at that answer HTTP but are not a Kubernetes API server (issue 26),
and one that is a Kubernetes API server refusing the credentials.

Each kind answers every path and method the same way, except ``api-404``, whose ``/version`` is Kubernetes'
(a service that happens to have one) and everything else 404:

- ``404``: every path 404 ``404 page not found`` (text/plain), as Go's net/http answers an unknown path;
- ``html``: every path 200 with a web server's HTML page;
- ``502``: every path 502 with a reverse proxy's HTML error page (its upstream is down);
- ``json``: every path 200 with JSON that has no ``gitVersion``;
- ``api-404``: ``/version`` as kube-apiserver answers it, every other path 404;
- ``refusing``: every path 401 with the ``Status`` a kube-apiserver answers a bad token with (that one *is*
  Kubernetes; gpustack keeps reporting the refusal, not "not Kubernetes").

``tls=True`` serves HTTPS with a throwaway self-signed certificate (the kubeconfig skips verification). The
paths asked are recorded in ``paths``.
"""

from __future__ import annotations

import datetime
import json
import ssl
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.fakes.kube_semantics import version_info

KINDS = ("404", "html", "502", "json", "api-404")
#: what gpustack says gave each kind away
REASONS = {
    "404": "GET /version answered 404 Not Found",
    "html": "GET /version is not JSON (an HTML page)",
    "502": "GET /version answered 502 Bad Gateway (an HTML page)",
    "json": "GET /version has no gitVersion",
    "api-404": "GET /api answered 404 Not Found",
}
HTML = b"<!DOCTYPE html>\n<html><head><title>Welcome</title></head><body><h1>It works!</h1></body></html>\n"
BAD_GATEWAY = b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n</body>\r\n</html>\r\n"  # fmt: skip
VERSION = version_info("v1.36.5")  # kube-apiserver's own /version (checked in tests/controlplane)
UNAUTHORIZED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "Unauthorized",
                "reason": "Unauthorized", "code": 401}  # fmt: skip


def answer(kind: str, path: str) -> tuple[int, str, bytes]:
    """(status, Content-Type, body) of ``kind`` for ``path``."""
    if kind == "404" or (kind == "api-404" and path.split("?")[0] != "/version"):
        return 404, "text/plain; charset=utf-8", b"404 page not found\n"
    if kind == "api-404":
        return 200, "application/json", json.dumps(VERSION).encode()
    if kind == "html":
        return 200, "text/html", HTML
    if kind == "502":
        return 502, "text/html", BAD_GATEWAY
    if kind == "json":
        return 200, "application/json", b'{"status": "ok", "service": "inventory"}'
    if kind == "refusing":
        return 401, "application/json", json.dumps(UNAUTHORIZED).encode()
    raise ValueError(kind)


@dataclass
class NotKube:
    kind: str
    url: str = ""
    paths: list[str] = field(default_factory=list)

    def write_kubeconfig(self, path: Path) -> Path:
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: c, cluster: {{server: '{self.url}', insecure-skip-tls-verify: true}}}}]\n"
            "users: [{name: u, user: {token: t}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
            encoding="utf-8",
        )
        return path


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate and key for 127.0.0.1, valid for a day (``cryptography`` comes with paramiko)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


@contextmanager
def serving(kind: str, *, tls: bool = False) -> Iterator[NotKube]:
    """A :class:`NotKube` of ``kind`` listening on 127.0.0.1 (a free port) while the block runs."""
    server_state = NotKube(kind)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            server_state.paths.append(self.path)
            status, ctype, body = answer(kind, self.path)
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with tempfile.TemporaryDirectory() as tmp:
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*_self_signed(Path(tmp)))
            server.socket = context.wrap_socket(server.socket, server_side=True)
        server_state.url = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_port}"
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield server_state
        finally:
            server.shutdown()
            server.server_close()
