"""TEST DOUBLE: a Prometheus HTTP API answering instant queries from recorded series (not Prometheus).

Tests that are about what gpustack *does* with signals (the breaker, the node patches, release) use it behind
the fake API server's service proxy; what the queries *mean* is tested against the real Prometheus
(tests/prometheus/test_health_policy.py). Each recorded series is ``(metric selector text, labels, value)``;
a query is answered with the series whose metric name it reads, filtered by a ``node="..."`` matcher when the
query has one, in Prometheus' JSON (``{"status": "success", "data": {"resultType": "vector", ...}}``).
Unknown metrics give an empty vector, as a Prometheus without such series would.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


@dataclass
class FakePrometheus:
    series: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)  # metric -> rows
    queries: list[str] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    def add(self, metric: str, labels: dict[str, str], value: float) -> None:
        self.series.setdefault(metric, []).append((labels, value))

    def answer(self, query: str) -> list[dict[str, Any]]:
        metric = next((m for m in self.series if re.search(rf"\b{re.escape(m)}\b", query)), None)
        if metric is None:
            return []
        node = re.search(r'node="([^"]+)"', query)
        rows = [(lbl, v) for lbl, v in self.series[metric] if node is None or lbl.get("node") == node.group(1)]
        if "> 0" in query:
            rows = [(lbl, v) for lbl, v in rows if v > 0]
        return [{"metric": lbl, "value": [1_800_000_000, str(v)]} for lbl, v in rows]

    def start(self) -> FakePrometheus:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path != "/api/v1/query":
                    self.send_response(404)
                    self.end_headers()
                    return
                query = parse_qs(url.query).get("query", [""])[0]
                fake.queries.append(query)
                body = json.dumps(
                    {"status": "success", "data": {"resultType": "vector", "result": fake.answer(query)}}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
