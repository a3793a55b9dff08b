"""TEST DOUBLE: a small Grafana HTTP API (not Grafana) whose queries run on a real Prometheus.

Serves, on loopback:

- ``GET /api/health`` (no auth);
- ``POST /login`` (JSON ``{"user", "password"}``) -> 200 ``{"message": "Logged in", "redirectUrl": "/"}`` with
  ``Set-Cookie: grafana_session=<token>; Path=/; Max-Age=...; HttpOnly; SameSite=Lax`` and a second
  ``Set-Cookie: grafana_session_expiry=...``, as Grafana answers; 401 ``Invalid username or password`` otherwise;
- with basic auth or the ``grafana_session`` cookie of a login (401 otherwise): ``GET /api/datasources``,
  ``GET /api/search?type=dash-db``, ``GET /api/dashboards/uid/{uid}``, ``POST /api/ds/query``. As in Grafana, an
  ``Authorization`` header that is not valid basic auth (a wrong password, someone else's bearer token) is a
  401 whatever the cookie says.

Every request is recorded in ``requests`` as ``(method, path)``, and whether it came with an
``Authorization`` header and with which cookie names in ``auth_seen`` as ``(path, authorization scheme or "",
sorted cookie names)``.

``/api/ds/query`` runs each query's ``expr`` (concurrently) as an instant query on ``prometheus_url`` and answers
like Grafana's Prometheus datasource: one data frame per series (``schema.fields`` Time/Value with the
series labels, ``data.values`` [[ts], [value]]); an empty result is one frame without values; a
Prometheus error is ``results[refId].error`` with status 400; an unknown datasource uid is a 404
``error``. So "do the panels return data" is decided by the real Prometheus.
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

Obj = dict[str, Any]
SESSION_SECONDS = 2592000  # Grafana's login_maximum_lifetime_duration default (30 days)
DATAPROXY_TIMEOUT = 30  # Grafana [dataproxy] timeout default (seconds)


class FakeGrafana:
    """``datasources`` and ``dashboards`` (uid -> model) are plain attributes tests may change."""

    def __init__(self, prometheus_url: str, *, user: str = "admin", password: str = "secret") -> None:
        self.prometheus_url = prometheus_url
        self.user, self.password = user, password
        self.health: Obj = {"commit": "fake", "database": "ok", "version": "13.2.0"}
        self.datasources: list[Obj] = [
            {"id": 1, "uid": "prometheus", "name": "Prometheus", "type": "prometheus", "isDefault": True,
             "access": "proxy", "url": "http://kube-prometheus-stack-prometheus.monitoring:9090/"}
        ]  # fmt: skip
        self.dashboards: dict[str, Obj] = {}
        self.sessions: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        self.auth_seen: list[tuple[str, str, tuple[str, ...]]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def add_dashboard(self, model: Obj, folder: str = "General") -> None:
        self.dashboards[str(model["uid"])] = {"model": model, "folder": folder}

    # -- serving ---------------------------------------------------------------------------------------

    def start(self) -> FakeGrafana:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, code: int, body: Any, *, set_cookies: list[str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
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
                    return self._reply(200, fake.health)
                if not self._authed():
                    return self._reply(401, {"message": "Unauthorized"})
                if url.path == "/api/datasources":
                    return self._reply(200, fake.datasources)
                if url.path == "/api/search":
                    return self._reply(200, fake.search(parse_qs(url.query)))
                if url.path.startswith("/api/dashboards/uid/"):
                    uid = url.path.rsplit("/", 1)[1]
                    if uid not in fake.dashboards:
                        return self._reply(404, {"message": "Dashboard not found"})
                    return self._reply(200, {"dashboard": fake.dashboards[uid]["model"], "meta": {"slug": uid}})
                return self._reply(404, {"message": "Not found"})

            def do_POST(self) -> None:
                url = urlparse(self.path)
                self._record("POST", url.path)
                body = self._body()
                if url.path == "/login":
                    if body.get("user") == fake.user and body.get("password") == fake.password:
                        token = secrets.token_hex(8)
                        fake.sessions.add(token)
                        expiry = int(time.time()) + SESSION_SECONDS
                        cookies = [f"grafana_session={token}; Path=/; Max-Age={SESSION_SECONDS}; HttpOnly; SameSite=Lax",
                                   f"grafana_session_expiry={expiry}; Path=/; Max-Age={SESSION_SECONDS}; SameSite=Lax"]  # fmt: skip
                        return self._reply(200, {"message": "Logged in", "redirectUrl": "/"}, set_cookies=cookies)
                    return self._reply(401, {"message": "Invalid username or password"})
                if not self._authed():
                    return self._reply(401, {"message": "Unauthorized"})
                if url.path == "/api/ds/query":
                    return self._reply(200, {"results": fake.ds_query(body)})
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
        if query.get("type", ["dash-db"])[0] != "dash-db":
            return []
        return [
            {"uid": uid, "title": d["model"].get("title", uid), "type": "dash-db", "folderTitle": d["folder"],
             "url": f"/d/{uid}", "tags": d["model"].get("tags", [])}
            for uid, d in sorted(self.dashboards.items())
        ]  # fmt: skip

    def ds_query(self, body: Obj) -> Obj:
        """The queries of one request run concurrently, as Grafana's query service runs them."""
        uids = {d["uid"] for d in self.datasources}
        queries = [q for q in body.get("queries") or [] if isinstance(q, dict)]

        def one(q: Obj) -> Obj:
            uid = (q.get("datasource") or {}).get("uid")
            if uid not in uids:
                return {"status": 404, "error": f"data source not found: {uid}", "frames": []}
            return self._prometheus(str(q.get("expr", "")))

        with cf.ThreadPoolExecutor(max_workers=max(1, len(queries))) as pool:
            answers = list(pool.map(one, queries))
        return {str(q.get("refId", "A")): a for q, a in zip(queries, answers, strict=True)}

    def _prometheus(self, expr: str) -> Obj:
        url = f"{self.prometheus_url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        try:
            with urllib.request.urlopen(url, timeout=DATAPROXY_TIMEOUT) as resp:
                data = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            data = json.loads(exc.read() or b"{}")
        except (urllib.error.URLError, OSError) as exc:
            return {"status": 500, "error": f'Post "{self.prometheus_url}/api/v1/query": {exc}', "frames": []}
        if data.get("status") != "success":
            return {"status": 400, "error": f"{data.get('errorType')}: {data.get('error')}", "frames": []}
        result = data["data"]["result"]
        if data["data"]["resultType"] == "scalar":
            result = [{"metric": {}, "value": result}]
        frames = [
            {"schema": {"fields": [{"name": "Time", "type": "time"},
                                   {"name": "Value", "type": "number", "labels": r.get("metric", {})}]},
             "data": {"values": [[float(r["value"][0]) * 1000], [float(r["value"][1])]]}}
            for r in result
        ]  # fmt: skip
        if not frames:
            frames = [{"schema": {"fields": []}, "data": {"values": []}}]
        return {"status": 200, "frames": frames}
