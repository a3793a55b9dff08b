"""Source ``grafana``: health, datasources, dashboards, and every panel query of gpustack's dashboard
run through Grafana itself (``POST /api/ds/query``), so "No data" is seen as the user sees it.

How it reaches Grafana:

- ``ctx.extra["grafana_url"]`` (tests) with basic auth;
- otherwise the API server's service proxy to ``monitoring/kube-prometheus-stack-grafana:http-web``
  (kube-prometheus-stack sets ``grafana.service.portName: http-web`` for its grafana subchart, port 80).
  The API server strips ``Authorization`` before proxying, so the source logs in with ``POST /login``
  and sends Grafana's session cookie instead.

Credentials: user ``monitoring.grafana_admin_user``; password ``ctx.extra["grafana_password"]`` or the
file :func:`gpustack.cluster.password_path` (written by ``gpustack up``).

Stored: ``snap.grafana`` -- ``health``; ``datasources`` (/api/datasources entries) and ``dashboards``
(/api/search hits), both as Grafana returned them, cut to the fields checks read;
``datasource_probes[uid]`` = ``{"ok", "error", "series"}`` from running ``vector(1)`` through the
Prometheus datasource panels use (keyed by :func:`~gpustack.diagnose.snapshot.datasource_key`: uid, else
name); ``panel_results[title]`` = series returned (-1 = query error) and ``panel_errors[dashboard uid]``
= ``{title: error}`` for gpustack's dashboard (``"(dashboard)"`` when its model could not be read); the
same for the "GPU capacity and cost" dashboard, its titles prefixed with :data:`CAPACITY_PREFIX`
(``"(rules)"`` when gpustack's usage recording rules have no data yet, so its panels were not run).
Unreachable -> ``snap.errors["grafana"]``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any

from gpustack.constants import GRAFANA_PORT, GRAFANA_SERVICE, MONITORING_NAMESPACE
from gpustack.diagnose.collect import CollectContext, source
from gpustack.diagnose.collect_prometheus import kube_client, service_port
from gpustack.diagnose.http import DirectEndpoint, Endpoint, HttpError, KubeProxyEndpoint, Response
from gpustack.diagnose.snapshot import Obj, Snapshot, datasource_key
from gpustack.monitoring.dashboard import concretize, load_dashboard, panel_queries, variable_values

DASHBOARD_UID = "gpustack-dcgm"
#: the "GPU capacity and cost" dashboard (dashboards/gpu-capacity.json); its panel results are keyed
#: ``CAPACITY_PREFIX + title`` beside the DCGM dashboard's
CAPACITY_UID = "gpustack-capacity"
CAPACITY_PREFIX = "GPU capacity and cost: "
USAGE_PROBE_EXPR = "count(gpustack:cluster_gpu_allocatable:sum)"
REQUEST_TIMEOUT = 10.0
PROBE_EXPR = "vector(1)"


def dashboard_uid() -> str:
    """The uid of the dashboard gpustack ships (``dashboards/12239.json``)."""
    try:
        return str(load_dashboard().get("uid") or DASHBOARD_UID)
    except (OSError, ValueError):
        return DASHBOARD_UID


@dataclass
class GrafanaClient:
    """JSON calls to Grafana with either basic auth (direct) or a session cookie (API server proxy)."""

    ep: Endpoint
    user: str
    password: str
    timeout: float = REQUEST_TIMEOUT
    cookie: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    def login(self) -> None:
        """Session login (needed through the API server proxy, which drops ``Authorization``)."""
        resp = self.ep.request("POST", "/login", body={"user": self.user, "password": self.password},
                               timeout=self.timeout)  # fmt: skip
        cookies = _set_cookies(resp)
        if "grafana_session" not in cookies:
            raise HttpError(f"Grafana login as {self.user!r} returned no session cookie", status=resp.status)
        self.headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())

    def get(self, path: str, query: Mapping[str, str] | None = None) -> Any:
        return self.ep.request("GET", path, query=query, headers=self.headers, timeout=self.timeout).json()

    def post(self, path: str, body: Any) -> Any:
        return self.ep.request("POST", path, body=body, headers=self.headers, timeout=self.timeout).json()


def _set_cookies(resp: Response) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in resp.headers.items():
        if key.lower() == "set-cookie":
            for line in value.split("\n"):
                jar: SimpleCookie = SimpleCookie()
                jar.load(line)
                out.update({k: m.value for k, m in jar.items()})
    return out


def grafana_password(ctx: CollectContext) -> str:
    if ctx.extra.get("grafana_password") is not None:
        return str(ctx.extra["grafana_password"])
    from gpustack.cluster import password_path

    path = password_path(ctx.cfg)
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise HttpError(f"cannot read the Grafana admin password from {path}: {exc.strerror}") from None


def grafana_client(ctx: CollectContext, snap: Snapshot, timeout: float) -> GrafanaClient | None:
    user = ctx.cfg.monitoring.grafana_admin_user
    url = ctx.extra.get("grafana_url")
    if url:
        password = grafana_password(ctx)
        return GrafanaClient(DirectEndpoint(str(url), auth=(user, password)), user, password, timeout)
    kube = kube_client(ctx)
    if kube is None:
        return None
    port = service_port(snap, MONITORING_NAMESPACE, GRAFANA_SERVICE, GRAFANA_PORT)
    ep = KubeProxyEndpoint(kube, MONITORING_NAMESPACE, GRAFANA_SERVICE, port)
    return GrafanaClient(ep, user, grafana_password(ctx), timeout)


def series_count(result: Mapping[str, Any]) -> int:
    """Series in one ``/api/ds/query`` result: frames that carry at least one value."""
    frames = result.get("frames") or []
    count = 0
    for frame in frames:
        values = ((frame or {}).get("data") or {}).get("values") or []
        if any(isinstance(col, list) and col for col in values):
            count += 1
    return count


def ds_query(client: GrafanaClient, ds: Obj, exprs: list[str]) -> tuple[int, str]:
    """Run ``exprs`` as one panel through Grafana: (series returned, first error or "")."""
    ref = {"uid": ds.get("uid"), "type": ds.get("type", "prometheus")}
    queries = [
        {"refId": chr(ord("A") + i), "datasource": ref, "expr": e, "instant": True, "range": False,
         "intervalMs": 30000, "maxDataPoints": 100}
        for i, e in enumerate(exprs[:26])
    ]  # fmt: skip
    body = client.post("/api/ds/query", {"queries": queries, "from": "now-5m", "to": "now"})
    results = (body or {}).get("results") or {}
    total, errors = 0, []
    for q in queries:
        res = results.get(q["refId"]) or {}
        if res.get("error") or int(res.get("status") or 200) >= 400:
            errors.append(f"{q['expr']}: {res.get('error') or res.get('status')}")
            continue
        total += series_count(res)
    return total, errors[0] if errors else ""


def _panels(model: Mapping[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    fixed = variable_values(model)  # constants and text boxes keep their value, as Grafana would use it
    for title, expr in panel_queries(model):
        try:
            out.setdefault(title, []).append(concretize(expr, fixed))
        except ValueError:
            out.setdefault(title, []).append(expr)
    return out


def prometheus_datasource(datasources: list[Obj]) -> Obj | None:
    """The Prometheus datasource panels use (the default one first)."""
    proms = [d for d in datasources if d.get("type") == "prometheus"]
    proms.sort(key=lambda d: not d.get("isDefault"))
    return proms[0] if proms else None


@source("grafana", layers=("grafana",), after=("kubernetes",))
def collect_grafana(ctx: CollectContext, snap: Snapshot) -> None:
    """Fill ``snap.grafana``; unreachable or unauthenticated -> ``snap.errors["grafana"]``."""
    timeout = min(REQUEST_TIMEOUT, max(1.0, ctx.timeout / 4))
    deadline = time.monotonic() + max(2.0, ctx.timeout * 0.8)
    try:
        client = grafana_client(ctx, snap, timeout)
    except HttpError as exc:
        snap.errors["grafana"] = str(exc)
        return
    if client is None:
        snap.errors["grafana"] = "no kubeconfig and no Grafana URL: cannot reach Grafana"
        return
    try:
        health = client.get("/api/health")
        snap.grafana.health = health if isinstance(health, dict) else {"raw": str(health)[:200]}
        snap.grafana.reachable = True
        if isinstance(client.ep, KubeProxyEndpoint):
            client.login()
        datasources = client.get("/api/datasources")
        search = client.get("/api/search", {"type": "dash-db"})
    except HttpError as exc:
        snap.errors["grafana"] = f"Grafana via {client.ep.describe()}: {exc}"
        return
    keep_ds = ("uid", "name", "type", "url", "isDefault", "access")
    snap.grafana.datasources = [{k: d.get(k) for k in keep_ds if k in d} for d in datasources or []
                                if isinstance(d, dict)]  # fmt: skip
    keep_dash = ("uid", "title", "folderTitle", "url", "tags")
    snap.grafana.dashboards = [{k: d.get(k) for k in keep_dash if k in d} for d in search or []
                               if isinstance(d, dict)]  # fmt: skip
    ds = prometheus_datasource(snap.grafana.datasources)
    if ds is None:
        return
    try:
        series, err = ds_query(client, ds, [PROBE_EXPR])
        probe: Obj = {"ok": not err and series > 0, "error": err, "series": series}
    except HttpError as exc:
        probe = {"ok": False, "error": str(exc), "series": 0}
    snap.grafana.datasource_probes[datasource_key(ds)] = probe
    _query_dashboard(client, ds, snap, dashboard_uid(), "", deadline)
    _query_dashboard(client, ds, snap, CAPACITY_UID, CAPACITY_PREFIX, deadline, needs=USAGE_PROBE_EXPR)


def _query_dashboard(
    client: GrafanaClient, ds: Obj, snap: Snapshot, uid: str, prefix: str, deadline: float, needs: str = ""
) -> None:
    """Run a loaded dashboard's panels through Grafana into ``panel_results`` (titles after ``prefix``).
    ``needs``: an expression that must return a series first (the capacity dashboard reads recording rules
    that exist only after their first evaluation); if it returns none, ``panel_errors[uid]`` says so under
    ``(rules)`` and no panel is run."""
    hit = next((d for d in snap.grafana.dashboards if d.get("uid") == uid), None)
    if hit is None:
        return
    try:
        model = (client.get(f"/api/dashboards/uid/{uid}") or {}).get("dashboard") or {}
        if needs:
            series, err = ds_query(client, ds, [needs])
            if err:
                snap.grafana.panel_errors[uid] = {"(probe)": err}
                return
            if series <= 0:
                snap.grafana.panel_errors[uid] = {"(rules)": f"{needs} returned no series"}
                return
    except HttpError as exc:
        snap.grafana.panel_errors[uid] = {"(dashboard)": str(exc)}
        return
    errors: dict[str, str] = {}
    for title, exprs in _panels(model).items():
        key = prefix + title
        if time.monotonic() > deadline:
            errors[key] = "not run: the Grafana source ran out of time"
            snap.grafana.panel_results[key] = -1
            continue
        try:
            count, err = ds_query(client, ds, exprs)
        except HttpError as exc:
            count, err = -1, str(exc)
        if err and count <= 0:
            count = -1
            errors[key] = err
        snap.grafana.panel_results[key] = count
    snap.grafana.panel_errors[uid] = errors
