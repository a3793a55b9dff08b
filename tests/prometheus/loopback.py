"""One loopback HTTP server for the replayed exporters (tests/prometheus/replay_server.py, fleet.py): a quiet
handler base that answers in Prometheus' text format, and the server's thread lifecycle (start, address, stop).
Only ever binds to loopback, on a free port."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

from .replay_exporter import LOOPBACK


class MetricsHandler(BaseHTTPRequestHandler):
    """A handler whose replies are Prometheus text; logs nothing (scrapes every second would flood the output)."""

    def reply(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


class LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler: type[MetricsHandler]) -> None:
        super().__init__((LOOPBACK, 0), handler)


class Served:
    """A :class:`LoopbackServer` run in a daemon thread: ``start()``, ``address`` (host:port), ``stop()``."""

    def __init__(self, server: LoopbackServer, name: str) -> None:
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
