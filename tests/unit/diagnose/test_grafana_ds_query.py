"""``ds_query`` when one query of a panel fails: Grafana 13 answers the whole request with HTTP 400 and every
query's result in the body (pkg/api/ds_query.go; the Grafana double does: tests/contract). The failing query keeps
its own error, the others their series."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpustack.diagnose.collect_grafana import GrafanaClient, ds_query
from gpustack.runners.http import DirectEndpoint, HttpError
from tests.fakes.grafana_api import FakeGrafana

DS = {"uid": "prometheus", "type": "prometheus"}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        expr = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["query"][0]
        if "bad(" in expr:
            code, body = 400, {"status": "error", "errorType": "bad_data", "error": 'unknown function "bad"'}
        else:
            code, body = 200, {"status": "success", "data": {"resultType": "vector", "result": [
                {"metric": {"gpu": str(i)}, "value": [1.0, "1"]} for i in range(3)]}}  # fmt: skip
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def client() -> Iterator[GrafanaClient]:
    prom = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=prom.serve_forever, daemon=True).start()
    try:
        with FakeGrafana.running(f"http://127.0.0.1:{prom.server_address[1]}") as grafana:
            yield GrafanaClient(DirectEndpoint(grafana.url, auth=("admin", "secret")), "admin", "secret")
    finally:
        prom.shutdown()
        prom.server_close()


def test_one_failing_query_keeps_its_own_error_and_the_others_their_series(client: GrafanaClient) -> None:
    series, err = ds_query(client, DS, ["up", "bad(up)"])
    assert series == 3
    assert err == 'bad(up): bad_data: unknown function "bad"'


def test_a_failing_panel_reads_as_the_prometheus_error(client: GrafanaClient) -> None:
    assert ds_query(client, DS, ["bad(up)"], count=True) == (0, 'bad(up): bad_data: unknown function "bad"')


def test_other_http_errors_still_raise(client: GrafanaClient) -> None:
    with pytest.raises(HttpError) as exc:
        ds_query(client, {"uid": "nope", "type": "prometheus"}, ["up"])
    assert exc.value.status == 404
