"""TEST DOUBLE: a Prometheus HTTP API answering instant queries from recorded series (not Prometheus).

Stands for the Prometheus the pinned kube-prometheus-stack deploys (:attr:`FakePrometheus.version`, from
:data:`gpustack.config.pins.KUBE_PROMETHEUS_STACK_PROMETHEUS`; :data:`IMITATES_MAJOR` is the major whose
answers it reproduces: tests/unit/diagnose/test_collect_prometheus.py fails when the pin moves past it).

Tests that are about what gpustack *does* with signals (the breaker, the node patches, release) use it behind
the fake API server's service proxy; what the queries *mean* is tested against the real Prometheus
(tests/prometheus/test_health_policy.py). Each recorded series is ``(metric selector text, labels, value)``;
``time()`` answers the scalar :attr:`FakePrometheus.now` (Prometheus' clock); any other query is answered with the series whose metric name it reads, filtered by a ``node="..."`` matcher when the
query has one, in Prometheus' JSON (``{"status": "success", "data": {"resultType": "vector", ...}}``).
Unknown metrics give an empty vector, as a Prometheus without such series would.

``/api/v1/status/buildinfo`` answers :attr:`FakePrometheus.version`. ``/api/v1/rules`` answers the loaded
:attr:`FakePrometheus.groups` as Prometheus 3's rules handler does (prometheus/prometheus v3.14.0 and v0.313.5,
web/api/v1/api.go ``func (api *API) rules``): ``rule_group[]``, ``file[]`` and ``rule_name[]`` keep only the
groups/rules named (exact names; each a set, empty = no filter), ``type=alert|record`` keeps one kind (any
other value: 400 ``bad_data``, ``invalid parameter "type"``), and a group left without rules is dropped.
:attr:`FakePrometheus.rule_filters` False answers like 2.42 and older instead (v2.42.0's handler: no
``rule_group[]``/``file[]``/``rule_name[]``, every group kept, emptied ones included). Pagination
(``group_limit``) is not reproduced: gpustack does not send it.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from gpustack.config.pins import KUBE_PROMETHEUS_STACK_PROMETHEUS

#: the Prometheus major whose API answers this double reproduces
IMITATES_MAJOR = 3
Group = dict[str, Any]


@dataclass
class FakePrometheus:
    series: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)  # metric -> rows
    queries: list[str] = field(default_factory=list)
    #: loaded rule groups as the API shows them: ``{"name", "file", "interval", "rules": [{"name", "type"
    #: ("alerting"/"recording"), "health", ...}]}``
    groups: list[Group] = field(default_factory=list)
    version: str = KUBE_PROMETHEUS_STACK_PROMETHEUS[1]
    rule_filters: bool = True  # False: answer /api/v1/rules like Prometheus 2.42 (no filters)
    requests: list[str] = field(default_factory=list)  # every GET path and query string
    #: Prometheus' clock: the evaluation time of every answer, and what ``time()`` returns
    now: float = 1_800_000_000.0
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
        return [{"metric": lbl, "value": [self.now, str(v)]} for lbl, v in rows]

    def rules(self, params: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        """``/api/v1/rules``: (HTTP status, body), filtered as described in the module docstring."""
        typ = params.get("type", [""])[0].lower()
        if typ not in ("", "alert", "record"):
            error = f'invalid parameter "type": not supported value "{typ}"'
            return 400, {"status": "error", "errorType": "bad_data", "error": error}
        kinds = {"": ("alerting", "recording"), "alert": ("alerting",), "record": ("recording",)}[typ]
        names, files, rule_names = (set(params.get(k, [])) for k in ("rule_group[]", "file[]", "rule_name[]"))
        if not self.rule_filters:
            names, files, rule_names = set(), set(), set()
        out = []
        for group in self.groups:
            if (names and group["name"] not in names) or (files and group.get("file") not in files):
                continue
            rules = [r for r in group.get("rules", []) if r.get("type") in kinds
                     and (not rule_names or r.get("name") in rule_names)]  # fmt: skip
            if rules or not self.rule_filters:
                out.append({**group, "rules": rules})
        return 200, {"status": "success", "data": {"groups": out}}

    def start(self) -> FakePrometheus:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlparse(self.path)
                fake.requests.append(f"{url.path}?{url.query}")
                params = parse_qs(url.query)
                status, body = 200, {}
                if url.path == "/api/v1/query":
                    query = params.get("query", [""])[0]
                    fake.queries.append(query)
                    if query.strip() == "time()":  # a scalar, as Prometheus answers it: [t, "t"]
                        body = {"status": "success", "data": {"resultType": "scalar",
                                                              "result": [fake.now, repr(fake.now)]}}  # fmt: skip
                    else:
                        body = {"status": "success", "data": {"resultType": "vector", "result": fake.answer(query)}}
                elif url.path == "/api/v1/status/buildinfo":
                    body = {"status": "success", "data": {"version": fake.version, "revision": "", "branch": "",
                                                          "buildUser": "", "buildDate": "", "goVersion": ""}}  # fmt: skip
                elif url.path == "/api/v1/rules":
                    status, body = fake.rules(params)
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

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
