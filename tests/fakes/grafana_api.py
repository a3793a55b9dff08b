"""TEST DOUBLE: a small Grafana HTTP API (not Grafana) whose queries run on a real Prometheus.

Imitates Grafana :data:`GRAFANA_VERSION` (the one the pinned kube-prometheus-stack deploys; tests/contract/
test_pins.py fails when the pin moves past it) with the Prometheus datasource of that release. Every answer
below is taken from upstream (tests/contract/upstream/grafana.yaml names each source; tests/contract/
test_grafana_contract.py checks this double against it):

- ``GET /api/health`` (no auth): 200 ``{"database": "ok", "version", "commit"}``; 503 with ``"database":
  "failing"`` when :attr:`FakeGrafana.database_ok` is False (pkg/api/http_server.go apiHealthHandler);
- ``POST /login`` (JSON ``{"user", "password"}``, pkg/services/authn/clients/form.go): 200 ``{"message": "Logged
  in", "redirectUrl": "/"}`` with ``Set-Cookie: grafana_session=...; Path=/; Max-Age=...; HttpOnly; SameSite=Lax``
  and ``grafana_session_expiry=...`` (not HttpOnly) (pkg/services/authn/authn.go HandleLoginResponse,
  WriteSessionCookie); wrong credentials: 401 ``{"message": "Invalid username or password", "messageId":
  "password-auth.failed", "statusCode": 401, "traceID": ""}`` (clients/password.go, pkg/api/response Err); a
  missing or empty ``user``/``password``: 400 ``"bad login data"`` / ``form-auth.invalid``;
- with basic auth or the ``grafana_session`` cookie of a login (401 otherwise): ``GET /api/datasources``,
  ``GET /api/search?type=dash-db``, ``GET /api/dashboards/uid/{uid}`` (406 for a dashboard stored as v2) and the
  dashboard API ``/apis/dashboard.grafana.app/...`` (tests/fakes/grafana_dashboards.py), ``POST /api/ds/query``. As in Grafana, an
  ``Authorization`` header that is not valid basic auth (a wrong password, someone else's bearer token) is a
  401 whatever the cookie says.

Every request is recorded in ``requests`` as ``(method, path)``, and whether it came with an
``Authorization`` header and with which cookie names in ``auth_seen`` as ``(path, authorization scheme or "",
sorted cookie names)``.

``/api/ds/query`` runs each query's ``expr`` (concurrently) as an instant query on ``prometheus_url`` and answers
as Grafana's Prometheus datasource does (grafana/grafana-prometheus-datasource pkg/promlib: converter/prom.go and
its golden files, querydata/response.go): one data frame per series (``schema.meta`` numeric-multi, fields Time
and Value with the series labels, ``data.values`` [[ms], [value]], NaN/+Inf/-Inf as null with ``entities``); an
empty result is one frame without fields that carries the metadata; a Prometheus error is
``results[refId].error`` ("<errorType>: <error>") with Prometheus' HTTP status; and when any query failed the
whole answer is HTTP 400 (pkg/api/ds_query.go toJsonStreamingResponse). An unknown datasource uid fails the
request: 404 ``Data source not found``. So "do the panels return data" is decided by the real Prometheus.
"""

from __future__ import annotations

import base64
import concurrent.futures as cf
import json
import secrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.fakes import grafana_dashboards as dashboards_api

Obj = dict[str, Any]
#: the Grafana release this double imitates: kube-prometheus-stack 88.5.3's (grafana chart 12.11.1)
GRAFANA_VERSION = "13.2.0"
SESSION_SECONDS = 2592000  # Grafana's login_maximum_lifetime_duration default (30 days)
DATAPROXY_TIMEOUT = 30  # Grafana [dataproxy] timeout default (seconds)


class FakeGrafana:
    """``datasources`` and ``dashboards`` (uid -> model) are plain attributes tests may change."""

    def __init__(self, prometheus_url: str, *, user: str = "admin", password: str = "secret") -> None:
        self.prometheus_url = prometheus_url
        self.user, self.password = user, password
        self.health: Obj = {"database": "ok", "version": GRAFANA_VERSION, "commit": "0123456789"}
        self.database_ok = True  # False: /api/health answers 503 "failing"
        self.datasources: list[Obj] = [
            {"id": 1, "uid": "prometheus", "name": "Prometheus", "type": "prometheus", "isDefault": True,
             "access": "proxy", "url": "http://kube-prometheus-stack-prometheus.monitoring:9090/"}
        ]  # fmt: skip
        self.dashboards: dict[str, Obj] = {}
        self.legacy_gone = False  # True: /api/search and /api/dashboards/uid answer 404, as a Grafana without them
        self.sessions: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        self.auth_seen: list[tuple[str, str, tuple[str, ...]]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def add_dashboard(
        self, model: Obj, folder: str = "General", *, stored: str = "v1beta1", convert_error: str = ""
    ) -> None:
        """``stored``: the schema version Grafana keeps it in (``v2beta1``: the legacy path answers 406);
        ``convert_error``: the dashboard API fails to convert it (tests/fakes/grafana_dashboards.py)."""
        self.dashboards[str(model["uid"])] = {"model": model, "folder": folder, "stored": stored,
                                              "convert_error": convert_error}  # fmt: skip

    # -- serving ---------------------------------------------------------------------------------------

    def start(self) -> FakeGrafana:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(
                self, code: int, body: Any, *, set_cookies: list[str] | None = None, ctype: str = "application/json"
            ) -> None:
                data = json.dumps(body, allow_nan=False).encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for cookie in set_cookies or []:
                    self.send_header("Set-Cookie", cookie)
                self.end_headers()
                self.wfile.write(data)

            def _cookies(self) -> dict[str, str]:
                jar: SimpleCookie = SimpleCookie()
                jar.load(self.headers.get("Cookie") or "")
                return {k: m.value for k, m in jar.items()}

            def _record(self, method: str, path: str) -> None:
                fake.requests.append((method, path))
                scheme = (self.headers.get("Authorization") or "").partition(" ")[0]
                fake.auth_seen.append((path, scheme, tuple(sorted(self._cookies()))))

            def _authed(self) -> bool:
                auth = self.headers.get("Authorization")
                if auth is not None:  # Grafana tries the header first; a bad one is a 401
                    if not auth.startswith("Basic "):
                        return False
                    try:
                        user, _, pw = base64.b64decode(auth[6:], validate=True).decode().partition(":")
                    except (ValueError, UnicodeDecodeError):
                        return False
                    return user == fake.user and pw == fake.password
                return self._cookies().get("grafana_session") in fake.sessions

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"{}") if length else {}

            def do_GET(self) -> None:
                url = urlparse(self.path)
                self._record("GET", url.path)
                if url.path == "/api/health":
                    health = {**fake.health, **({} if fake.database_ok else {"database": "failing"})}
                    code = 200 if fake.database_ok else 503
                    return self._reply(code, health, ctype="application/json; charset=UTF-8")
                if not self._authed():
                    return self._reply(401, {"message": "Unauthorized"})
                if url.path == "/api/datasources":
                    return self._reply(200, fake.datasources)
                if url.path == "/api/search" and not fake.legacy_gone:
                    return self._reply(200, fake.search(parse_qs(url.query)))
                if url.path.startswith("/api/dashboards/uid/") and not fake.legacy_gone:
                    return self._reply(*dashboards_api.legacy_dashboard(fake.dashboards, url.path.rsplit("/", 1)[1]))
                if (answer := dashboards_api.dashboard_api(fake.dashboards, url.path)) is not None:
                    return self._reply(*answer)
                return self._reply(404, {"message": "Not found"})

            def do_POST(self) -> None:
                url = urlparse(self.path)
                self._record("POST", url.path)
                body = self._body()
                if url.path == "/login":
                    if not body.get("user") or not body.get("password"):  # binding:"Required" on both
                        return self._reply(400, error_body(400, "form-auth.invalid", "bad login data"))
                    if body.get("user") == fake.user and body.get("password") == fake.password:
                        token = secrets.token_hex(8)
                        fake.sessions.add(token)
                        expiry = int(time.time()) + SESSION_SECONDS
                        cookies = [f"grafana_session={token}; Path=/; Max-Age={SESSION_SECONDS}; HttpOnly; SameSite=Lax",
                                   f"grafana_session_expiry={expiry}; Path=/; Max-Age={SESSION_SECONDS}; SameSite=Lax"]  # fmt: skip
                        return self._reply(200, {"message": "Logged in", "redirectUrl": "/"}, set_cookies=cookies)
                    return self._reply(401, error_body(401, "password-auth.failed", "Invalid username or password"))
                if not self._authed():
                    return self._reply(401, {"message": "Unauthorized"})
                if url.path == "/api/ds/query":
                    code, answer = fake.ds_query_response(body)
                    return self._reply(code, answer)
                return self._reply(404, {"message": "Not found"})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, name="fake-grafana", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @classmethod
    @contextmanager
    def running(cls, prometheus_url: str, **kwargs: Any) -> Iterator[FakeGrafana]:
        fake = cls(prometheus_url, **kwargs).start()
        try:
            yield fake
        finally:
            fake.stop()

    # -- API -------------------------------------------------------------------------------------------

    def search(self, query: dict[str, list[str]]) -> list[Obj]:
        """``GET /api/search``'s hits (tests/fakes/grafana_dashboards.py)."""
        return dashboards_api.search_hits(self.dashboards, query)

    def ds_query_response(self, body: Obj) -> tuple[int, Obj]:
        """(HTTP status, body) of ``POST /api/ds/query``: 404 for an unknown datasource, 400 when any query
        failed (every result still in the body), else 200."""
        uids = {d["uid"] for d in self.datasources}
        queries = [q for q in body.get("queries") or [] if isinstance(q, dict)]
        if any((q.get("datasource") or {}).get("uid") not in uids for q in queries):
            return 404, {"message": "Data source not found", "traceID": ""}
        results = self.ds_query(body)
        failed = any("error" in r for r in results.values())
        return (400 if failed else 200), {"results": results}

    def ds_query(self, body: Obj) -> Obj:
        """The queries of one request run concurrently, as Grafana's query service runs them."""
        queries = [q for q in body.get("queries") or [] if isinstance(q, dict)]

        def one(q: Obj) -> Obj:
            step_ms = int(q.get("intervalMs") or 15000)
            return self._prometheus(str(q.get("expr", "")), step_ms)

        with cf.ThreadPoolExecutor(max_workers=max(1, len(queries))) as pool:
            answers = list(pool.map(one, queries))
        return {str(q.get("refId", "A")): a for q, a in zip(queries, answers, strict=True)}

    def _prometheus(self, expr: str, step_ms: int) -> Obj:
        url = f"{self.prometheus_url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        status = 200
        try:
            with urllib.request.urlopen(url, timeout=DATAPROXY_TIMEOUT) as resp:
                data = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            status = exc.code
            data = json.loads(exc.read() or b"{}")
        except (urllib.error.URLError, OSError) as exc:
            meta = frame_meta(expr, step_ms, first=True)
            return {"status": 502, "frames": [empty_frame(meta)],
                    "error": f'Post "{self.prometheus_url}/api/v1/query": {exc}'}  # fmt: skip
        return prometheus_result(data, status, expr, step_ms)


def error_body(code: int, message_id: str, message: str) -> Obj:
    """An errutil error as Grafana's API writes it (pkg/api/response Err + WriteTo adds the traceID)."""
    return {"message": message, "messageId": message_id, "statusCode": code, "traceID": ""}


def frame_meta(expr: str, step_ms: int, *, first: bool, result_type: str = "") -> Obj:
    """A frame's ``schema.meta``: the converter's (numeric-multi, typeVersion, resultType) and, on the first
    frame, what querydata/response.go adds (executedQueryString, calculatedMinStep)."""
    meta: Obj = {"typeVersion": [0, 0]}
    custom: Obj = {}
    if result_type:
        meta = {"type": "numeric-multi", "typeVersion": [0, 1]}
        custom["resultType"] = result_type
    if first:
        meta["executedQueryString"] = f"Expr: {expr}\nStep: {_go_duration(step_ms)}"
        custom["calculatedMinStep"] = step_ms
    if custom:
        meta["custom"] = custom
    return meta


def empty_frame(meta: Obj) -> Obj:
    return {"schema": {"meta": meta, "fields": []}, "data": {"values": []}}


def _go_duration(ms: int) -> str:
    """Go's time.Duration.String() for whole milliseconds (30000 -> "30s", 90000 -> "1m30s")."""
    if ms % 1000:
        return f"{ms / 1000:g}s"
    secs = ms // 1000
    h, rest = divmod(secs, 3600)
    m, s = divmod(rest, 60)
    return (f"{h}h" if h else "") + (f"{m}m" if h or m else "") + f"{s}s"


def _legend(labels: dict[str, str], expr: str) -> str:
    """getName with no legend format: the series as Prometheus prints it, the expression for ``{}``."""
    name = labels.get("__name__", "")
    rest = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    legend = f"{name}{{{rest}}}" if rest else (name or "{}")
    return expr if legend == "{}" else legend


def prometheus_result(data: Obj, status: int, expr: str, step_ms: int) -> Obj:
    """One query's result as Grafana's Prometheus datasource builds it from Prometheus' answer."""
    if data.get("status") != "success":
        meta = frame_meta(expr, step_ms, first=True)
        return {"status": status, "frames": [empty_frame(meta)],
                "error": f"{data.get('errorType')}: {data.get('error')}"}  # fmt: skip
    result, result_type = data["data"]["result"], data["data"]["resultType"]
    if result_type == "scalar":
        result = [{"metric": {}, "value": result}]
    frames = []
    for i, r in enumerate(result):
        labels = dict(r.get("metric") or {})
        ts, raw = r["value"]
        value: float | None = float(raw)
        entities: list[Obj | None] | None = None
        special = {"NaN": "NaN", "+Inf": "Inf", "Inf": "Inf", "-Inf": "NegInf"}.get(str(raw))
        if special:
            value, entities = None, [None, {special: [0]}]
        value_field: Obj = {"name": labels.get("__name__", "Value"), "type": "number",
                            "typeInfo": {"frame": "float64"}, "labels": labels,
                            "config": {"displayNameFromDS": _legend(labels, expr)}}  # fmt: skip
        fields = [{"name": "Time", "type": "time", "typeInfo": {"frame": "time.Time"}, "config": {"interval": step_ms}},
                  value_field]  # fmt: skip
        meta = frame_meta(expr, step_ms, first=i == 0, result_type=result_type)
        frame: Obj = {"schema": {"meta": meta, "fields": fields},
                      "data": {"values": [[round(float(ts) * 1000)], [value]]}}  # fmt: skip
        if entities:
            frame["data"]["entities"] = entities
        frames.append(frame)
    if not frames:
        frames = [empty_frame(frame_meta(expr, step_ms, first=True))]
    return {"status": status, "frames": frames}
