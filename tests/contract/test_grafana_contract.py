"""Contract: the Grafana double (tests/fakes/grafana_api.py) answers what Grafana 13 answers.

Grafana cannot run here, so the expected answers are upstream facts recorded as data
(tests/contract/upstream/grafana.yaml, each with its source): the form login and its cookies, the error
documents, ``/api/health``, ``/api/ds/query``'s status codes and the Prometheus datasource's data frames (its
converter's golden files). The double's own Prometheus is a stub replaying the upstream golden *inputs*."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.contract.upstream import facts
from tests.fakes import grafana_api
from tests.fakes.grafana_api import FakeGrafana, prometheus_result

G = facts("grafana")
Obj = dict[str, Any]


class _Prometheus:
    """Answers every ``/api/v1/query`` with ``answer`` (status code, JSON body)."""

    def __init__(self) -> None:
        self.answer: tuple[int, Obj] = (200, G["frames"]["vector"]["prometheus"])
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                code, body = outer.answer
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture(scope="module")
def prom() -> Iterator[_Prometheus]:
    p = _Prometheus()
    yield p
    p.server.shutdown()
    p.server.server_close()


@pytest.fixture(scope="module")
def grafana(prom: _Prometheus) -> Iterator[FakeGrafana]:
    with FakeGrafana.running(prom.url) as g:
        yield g


def _call(
    url: str, method: str = "GET", body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json",
                                                                          **(headers or {})})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read()), resp.headers
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers


def test_the_double_declares_the_grafana_it_imitates() -> None:
    assert G["version"] == grafana_api.GRAFANA_VERSION


def test_health(grafana: FakeGrafana) -> None:
    status, body, headers = _call(grafana.url + "/api/health")
    ok = G["health"]["ok"]
    assert status == ok["status"] and headers["Content-Type"] == ok["content_type"]
    assert sorted(body) == sorted(ok["keys"]) and body["database"] == ok["database"]
    assert body["version"] == G["version"]
    grafana.database_ok = False
    try:
        status, body, _ = _call(grafana.url + "/api/health")
    finally:
        grafana.database_ok = True
    assert (status, body["database"]) == (G["health"]["failing"]["status"], G["health"]["failing"]["database"])


def test_form_login_sets_the_session_cookies(grafana: FakeGrafana) -> None:
    status, body, headers = _call(grafana.url + "/login", "POST", {"user": grafana.user, "password": grafana.password})
    want = G["login"]["ok"]
    assert status == want["status"] and body == want["body"]
    for line in headers.get_all("Set-Cookie"):
        jar: SimpleCookie = SimpleCookie()
        jar.load(line)
        ((name, morsel),) = jar.items()
        expect = want["cookies"][name]
        assert morsel["path"] == expect["path"] and int(morsel["max-age"]) == expect["max_age"]
        assert bool(morsel["httponly"]) == expect["httponly"] and morsel["samesite"] == expect["samesite"]
    names = [SimpleCookie(line).popitem()[0] for line in headers.get_all("Set-Cookie")]
    assert sorted(names) == sorted(want["cookies"])


@pytest.mark.parametrize(
    ("body", "case"),
    [({"user": "admin", "password": "wrong"}, "bad_password"), ({"user": "admin"}, "missing_password"),
     ({"user": "admin", "password": ""}, "missing_password")],
)  # fmt: skip
def test_form_login_refusals(grafana: FakeGrafana, body: Obj, case: str) -> None:
    status, answer, headers = _call(grafana.url + "/login", "POST", body)
    assert (status, answer) == (G["login"][case]["status"], G["login"][case]["body"])
    assert not headers.get_all("Set-Cookie")


def _ds_query(grafana: FakeGrafana, uid: str = "prometheus") -> tuple[int, Any, Any]:
    query = {"refId": "A", "datasource": {"uid": uid, "type": "prometheus"}, "expr": "up", "instant": True,
             "range": False, "intervalMs": 30000}  # fmt: skip
    auth = {"Authorization": "Basic " + __import__("base64").b64encode(b"admin:secret").decode()}
    return _call(grafana.url + "/api/ds/query", "POST", {"queries": [query], "from": "now-5m", "to": "now"}, auth)


def test_ds_query_status_codes(grafana: FakeGrafana, prom: _Prometheus) -> None:
    status, body, _ = _ds_query(grafana, uid="no-such-uid")
    assert (status, body["message"]) == (G["ds_query"]["unknown_datasource"]["status"],
                                         G["ds_query"]["unknown_datasource"]["message"])  # fmt: skip
    prom.answer = (400, G["frames"]["error"]["prometheus"])
    try:
        status, body, _ = _ds_query(grafana)
    finally:
        prom.answer = (200, G["frames"]["vector"]["prometheus"])
    assert status == G["ds_query"]["any_query_failed"]["status"]
    assert body["results"]["A"]["error"] == G["frames"]["error"]["error"] and body["results"]["A"]["status"] == 400
    status, body, _ = _ds_query(grafana)
    assert status == 200 and len(body["results"]["A"]["frames"]) == 3


def _converter_view(frame: Obj) -> Obj:
    """The double's frame without what querydata/response.go adds after the converter (checked separately)."""
    meta = {k: v for k, v in frame["schema"]["meta"].items() if k != "executedQueryString"}
    custom = {k: v for k, v in (meta.get("custom") or {}).items() if k != "calculatedMinStep"}
    meta = {**{k: v for k, v in meta.items() if k != "custom"}, **({"custom": custom} if custom else {})}
    fields = [{k: v for k, v in f.items() if k != "config"} for f in frame["schema"]["fields"]]
    fields[1]["name"] = "Value"  # querydata renames it to the __name__ label (asserted below)
    out = {"meta": meta, "fields": fields, "values": frame["data"]["values"]}
    if "entities" in frame["data"]:
        out["entities"] = frame["data"]["entities"]
    return out


@pytest.mark.parametrize("case", ["vector", "scalar"])
def test_frames_are_the_converters(case: str) -> None:
    expected = G["frames"][case]
    got = prometheus_result(expected["prometheus"], 200, "up", 30000)
    assert got["status"] == 200
    assert [_converter_view(f) for f in got["frames"]] == expected["frames"]
    for frame in got["frames"]:
        labels = frame["schema"]["fields"][1]["labels"]
        assert frame["schema"]["fields"][1]["name"] == labels.get("__name__", "Value")
        assert frame["schema"]["fields"][0]["config"] == {"interval": 30000}
    first = got["frames"][0]["schema"]["meta"]
    assert first["executedQueryString"] == G["frames"]["executed_query_string"].format(expr="up", step="30s")
    assert first["custom"]["calculatedMinStep"] == 30000
    assert all("executedQueryString" not in f["schema"]["meta"] for f in got["frames"][1:])


def test_empty_and_error_results_carry_one_frame_of_metadata() -> None:
    empty = prometheus_result({"status": "success", "data": {"resultType": "vector", "result": []}}, 200, "up", 30000)
    ((frame,),) = [empty["frames"]]
    assert sorted(frame["schema"]["meta"]) == sorted(G["frames"]["empty"]["meta_keys"])
    assert frame["schema"]["fields"] == G["frames"]["empty"]["fields"] and frame["data"]["values"] == []
    error = prometheus_result(G["frames"]["error"]["prometheus"], 400, "up", 30000)
    assert error["error"] == G["frames"]["error"]["error"] and error["status"] == 400 and len(error["frames"]) == 1
