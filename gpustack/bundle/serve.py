"""The HTTP server ``up --bundle`` runs for the nodes, for the run's lifetime.

It serves exactly the files bundle.json lists (GET and HEAD; no listing, nothing else under the
directory), read-only, from a thread of the gpustack process, bound to one address: the one this
machine uses to reach the nodes (the kernel's route to the first SSH node), or what
``--bundle-listen`` names. Plain HTTP: every file a node fetches is checked on the node against a
checksum that reached it over SSH (get_url checksums for files, keys and image archives; apt's
signed index for packages), so the transport needs no trust of its own (docs/decisions.md).
"""

from __future__ import annotations

import ipaddress
import shutil
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from gpustack.config.model import Config
from gpustack.constants import BUNDLE_PORT
from gpustack.errors import UsageError


def route_address(target: str, port: int = 22) -> str:
    """The local address the kernel would use to reach ``target`` (no packet is sent)."""
    family = socket.AF_INET6 if ":" in target else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((target, port))
        return str(s.getsockname()[0])


def listen_address(cfg: Config, listen: str | None) -> tuple[str, int]:
    """(address, port) to serve on: ``--bundle-listen ADDR[:PORT]``, else the route to the first
    SSH node (loopback when every node is this machine), on :data:`BUNDLE_PORT`."""
    if listen:
        if listen.startswith("["):  # [IPv6]:PORT or [IPv6]
            host, _, rest = listen[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else (rest or str(BUNDLE_PORT))
        elif listen.count(":") == 1:  # IPv4:PORT
            host, _, port_text = listen.partition(":")
        else:  # an address alone (IPv4, or IPv6 without brackets)
            host, port_text = listen, str(BUNDLE_PORT)
        try:
            ipaddress.ip_address(host)
            port = int(port_text)
        except ValueError:
            raise UsageError(f"--bundle-listen {listen}: use ADDRESS or ADDRESS:PORT (an IP address)") from None
        if not 0 <= port < 65536:  # 0: any free port (tests; the URLs then change every run)
            raise UsageError(f"--bundle-listen {listen}: {port} is not a port")
        return host, port
    remote = [n for n in cfg.nodes if n.connection == "ssh"]
    if not remote:
        return "127.0.0.1", BUNDLE_PORT
    try:
        return route_address(remote[0].address, remote[0].port), BUNDLE_PORT
    except OSError as exc:
        raise UsageError(
            f"no route from this machine to {remote[0].address} to serve the bundle on ({exc})",
            hint="pass --bundle-listen ADDRESS[:PORT] with an address the nodes reach",
        ) from None


def base_url(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"


@dataclass(frozen=True)
class Served:
    client: str
    path: str
    status: int
    size: int


class BundleServer:
    """Serve ``paths`` (relative to ``root``) on ``address:port`` until :meth:`close`."""

    def __init__(self, root: Path, paths: Iterable[str], address: str, port: int) -> None:
        self.root = root.resolve()
        self.paths = frozenset(paths)
        self.requests: list[Served] = []
        self._lock = threading.Lock()
        handler = _handler(self)
        server_class = _V6Server if ":" in address else ThreadingHTTPServer
        try:
            self._server = server_class((address, port), handler)
        except OSError as exc:
            raise UsageError(
                f"cannot serve the bundle on {address}:{port}: {exc.strerror or exc}",
                hint="another process holds the port, or the address is not this machine's: "
                "pass --bundle-listen ADDRESS[:PORT]",
            ) from None
        self._server.daemon_threads = True
        self.address, self.port = address, int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="gpustack-bundle", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return base_url(self.address, self.port)

    def record(self, served: Served) -> None:
        with self._lock:
            self.requests.append(served)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> BundleServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _V6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _handler(owner: BundleServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "gpustack-bundle"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _answer(self, status: int, length: int = 0, content_type: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(length))
            self.send_header("Content-Type", content_type)
            self.end_headers()

        def do_GET(self) -> None:
            rel = unquote(urlsplit(self.path).path).lstrip("/")
            path = owner.root / rel
            if rel not in owner.paths or not path.is_file():
                owner.record(Served(self.client_address[0], rel, 404, 0))
                self._answer(404)
                return
            size = path.stat().st_size
            owner.record(Served(self.client_address[0], rel, 200, size))
            self._answer(200, size, "application/octet-stream")
            if self.command == "GET":
                with path.open("rb") as fh:
                    shutil.copyfileobj(fh, self.wfile, 1 << 20)

        do_HEAD = do_GET

    return Handler
