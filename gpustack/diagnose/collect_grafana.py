"""Source ``grafana``: health, datasources, dashboards, and every panel query of gpustack's dashboard
run through Grafana itself (``POST /api/ds/query``), so "No data" is seen as the user sees it.

How it reaches Grafana:

- ``ctx.extra["grafana_url"]`` (tests) with basic auth;
- otherwise the API server's service proxy to ``monitoring/kube-prometheus-stack-grafana:http-web`` (kube-prometheus-
  stack sets ``grafana.service.portName: http-web`` for its grafana subchart, port 80). The API server strips
  ``Authorization`` before proxying, so the source logs in with ``POST /login`` and sends Grafana's session cookie.

Health first: ``GET /api/health`` needs no login, so "Grafana answers" never depends on credentials.
Credentials (:func:`grafana_credentials`), first that exists: ``ctx.extra["grafana_password"]`` (tests); the
state file :func:`gpustack.paths.grafana_password_path` that ``gpustack up`` wrote -- only when the cluster looked
at is gpustack's own (a state file of this machine's cluster says nothing about another one); then the
cluster itself: Grafana's Deployment, its ``grafana`` container's ``GF_SECURITY_ADMIN_PASSWORD`` (and
``GF_SECURITY_ADMIN_USER``) followed exactly as the kubelet does -- a ``value``, a ``valueFrom.secretKeyRef``
(one GET of that Secret, never a LIST), an ``envFrom`` Secret, or ``..._FILE`` inside a Secret volume --
never a guessed name. The password is never stored: ``snap.grafana.login`` records where the credentials
came from (or why there are none: ``state`` + ``detail``) for R05.
``gpustack grafana-password`` follows the same rules with the same code (:func:`state_credentials`,
:func:`cluster_credentials`).

Stored: ``snap.grafana`` -- ``health``; ``datasources`` (/api/datasources entries) and ``dashboards`` (/api/search
hits: :mod:`~gpustack.diagnose.grafana_dashboards`), both as Grafana returned them, cut to the fields checks read;
``datasource_probes[uid]`` = ``{"ok", "error", "series"}`` from running ``vector(1)`` through the
Prometheus datasource panels use (keyed by :func:`~gpustack.diagnose.snapshot.datasource_key`: uid, else
name); ``panel_results[title]`` = series returned (-1 = query error) and ``panel_errors[dashboard uid]``
= ``{title: error}`` for gpustack's dashboard (``"(dashboard)"`` when its model could not be read); the
same for the "GPU capacity and cost" dashboard, its titles prefixed with :data:`CAPACITY_PREFIX`
(``"(rules)"`` when gpustack's usage recording rules have no data yet, so its panels were not run).
Unreachable -> ``snap.errors["grafana"]``; no usable credentials, a refused login or a refused API call ->
``snap.errors["grafana:login"]`` (R05; R02-R04 skip pointing at it).
"""

from __future__ import annotations

import base64
import concurrent.futures as cf
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from http.cookies import SimpleCookie
from typing import Any

from gpustack.config.model import Config
from gpustack.constants import GRAFANA_PORT, GRAFANA_SERVICE, MONITORING_NAMESPACE
from gpustack.diagnose.collect import CollectContext, source
from gpustack.diagnose.collect_prometheus import kube_client, service_port
from gpustack.diagnose.grafana_dashboards import DashboardUnreadable, fetch_dashboard, search_dashboards
from gpustack.diagnose.snapshot import Obj, Snapshot, datasource_key
from gpustack.monitoring import dashboard as dash
from gpustack.runners.http import DirectEndpoint, Endpoint, HttpError, KubeProxyEndpoint, Response

DASHBOARD_UID = "gpustack-dcgm"
#: the "GPU capacity and cost" dashboard (dashboards/gpu-capacity.json); its panel results are keyed
#: ``CAPACITY_PREFIX + title`` beside the DCGM dashboard's
CAPACITY_UID = "gpustack-capacity"
CAPACITY_PREFIX = "GPU capacity and cost: "
USAGE_PROBE_EXPR = "count(gpustack:cluster_gpu_allocatable:sum)"
REQUEST_TIMEOUT = 10.0
PROBE_EXPR = "vector(1)"
PANEL_WORKERS = 4  # panel queries in flight at once


def dashboard_uid() -> str:
    """The uid of the dashboard gpustack ships (``dashboards/12239.json``)."""
    try:
        return str(dash.load_dashboard().get("uid") or DASHBOARD_UID)
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


class CredentialError(Exception):
    """No usable Grafana credentials: ``state`` names the case for R05, ``detail`` what was seen."""

    def __init__(self, state: str, detail: str, **where: str) -> None:
        super().__init__(detail)
        self.state, self.detail, self.where = state, detail, where


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str = field(repr=False)
    source: str = ""  # where they came from, for the report (never the password)
    where: dict[str, str] = field(default_factory=dict)  # deployment / secret + key / file that held the password


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def grafana_deployment(snap: Snapshot) -> Obj | None:
    """Grafana's Deployment: kube-prometheus-stack's (``monitoring/kube-prometheus-stack-grafana``), else the
    one labelled ``app.kubernetes.io/name=grafana`` (the Grafana chart's label), gpustack's namespace first."""
    deployments = [d for d in snap.items("Deployment") if isinstance(d, dict)]
    for d in deployments:
        if _meta(d).get("namespace") == MONITORING_NAMESPACE and _meta(d).get("name") == GRAFANA_SERVICE:
            return d
    labelled = [d for d in deployments if (_meta(d).get("labels") or {}).get("app.kubernetes.io/name") == "grafana"]
    labelled.sort(key=lambda d: (_meta(d).get("namespace") != MONITORING_NAMESPACE, str(_meta(d).get("name"))))
    return labelled[0] if labelled else None


def _grafana_container(deployment: Obj) -> Obj:
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    for c in containers:
        if c.get("name") == "grafana":
            return c
    for c in containers:
        names = {e.get("name") for e in c.get("env") or [] if isinstance(e, dict)}
        if names & {"GF_SECURITY_ADMIN_PASSWORD", "GF_SECURITY_ADMIN_PASSWORD__FILE"}:
            return c
    return containers[0] if containers else {}


class _Secrets:
    """Secrets read by name (one GET each, cached); errors become :class:`CredentialError`."""

    def __init__(self, kube: Any, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.cache: dict[str, Obj] = {}

    def get(self, name: str) -> Obj:
        if name not in self.cache:
            from gpustack.runners.kube import KubeError

            ref = f"{self.namespace}/{name}"
            try:
                secret = self.kube.get("v1", "Secret", name, self.namespace)
            except KubeError as exc:
                state = "secret-forbidden" if exc.status in (401, 403) else "secret-unreadable"
                raise CredentialError(state, f"cannot read Secret {ref}: {exc.message}", secret=ref) from None
            if secret is None:
                raise CredentialError("secret-missing", f"Secret {ref} does not exist", secret=ref)
            self.cache[name] = dict(secret)
        return self.cache[name]

    def value(self, name: str, key: str, *, optional: bool = False) -> str | None:
        data = self.get(name).get("data") or {}
        if key not in data:
            if optional:
                return None
            raise CredentialError("secret-key-missing", f"Secret {self.namespace}/{name} has no key {key!r} "
                                  f"(keys: {', '.join(sorted(data)) or 'none'})", secret=f"{self.namespace}/{name}")  # fmt: skip
        try:
            return base64.b64decode(str(data[key])).decode("utf-8").strip()
        except (ValueError, UnicodeDecodeError):
            raise CredentialError("secret-key-missing", f"Secret {self.namespace}/{name} key {key!r} is not "
                                  "base64 text", secret=f"{self.namespace}/{name}") from None  # fmt: skip


Found = tuple[str, str, dict[str, str]]  # (value, where it came from, {"secret": ns/name, "key": key})


def _env_value(container: Obj, volumes: list[Obj], secrets: _Secrets, var: str) -> Found | None:
    """(value, where, refs) of one Grafana setting, followed as the kubelet would; None when the container does not
    set it."""
    for env in container.get("env") or []:
        if not isinstance(env, dict):
            continue
        if env.get("name") == var:
            if "value" in env:
                return str(env["value"]), f"{var} (a literal value in the Deployment)", {}
            ref = (env.get("valueFrom") or {}).get("secretKeyRef") or {}
            if ref.get("name") and ref.get("key"):
                value = secrets.value(str(ref["name"]), str(ref["key"]))
                refs = {"secret": f"{secrets.namespace}/{ref['name']}", "key": str(ref["key"])}
                return str(value), f"Secret {refs['secret']} key {ref['key']} ({var})", refs
            raise CredentialError("unsupported", f"{var} comes from {sorted(env.get('valueFrom') or {})}, "
                                  "not a Secret gpustack can read")  # fmt: skip
        if env.get("name") == f"{var}__FILE" and env.get("value"):
            return _file_value(str(env["value"]), container, volumes, secrets, var)
    for src in container.get("envFrom") or []:
        ref = (src or {}).get("secretRef") or {}
        if ref.get("name"):
            value = secrets.value(str(ref["name"]), var, optional=True)
            if value is not None:
                refs = {"secret": f"{secrets.namespace}/{ref['name']}", "key": var}
                return value, f"Secret {refs['secret']} key {var} (envFrom)", refs
    return None


def _file_value(path: str, container: Obj, volumes: list[Obj], secrets: _Secrets, var: str) -> Found:
    """``<var>__FILE``: the file must lie in a mounted Secret volume; its key is the path below the mount."""
    for mount in container.get("volumeMounts") or []:
        base = str((mount or {}).get("mountPath") or "").rstrip("/")
        if not base or not path.startswith(base + "/"):
            continue
        rel = path[len(base) + 1 :]
        vol = next((v for v in volumes if v.get("name") == mount.get("name")), {})
        secret = vol.get("secret") or {}
        if not secret.get("secretName"):
            break
        key = next((i.get("key") for i in secret.get("items") or [] if i.get("path") == rel), rel)
        value = secrets.value(str(secret["secretName"]), str(key))
        refs = {"secret": f"{secrets.namespace}/{secret['secretName']}", "key": str(key)}
        return str(value), f"Secret {refs['secret']} key {key} ({var}__FILE={path})", refs
    raise CredentialError("unsupported", f"{var}__FILE={path} is not inside a mounted Secret volume")


def credentials_from_cluster(snap: Snapshot, kube: Any, default_user: str) -> Credentials:
    """Grafana's admin user and password as its Deployment gets them (see the module docstring)."""
    if "Deployment" not in snap.kube:
        why = snap.errors.get("kubernetes:Deployment") or snap.errors.get("kubernetes") or "not collected"
        raise CredentialError("no-deployment", f"Deployments could not be read: {why}")
    deployment = grafana_deployment(snap)
    if deployment is None:
        raise CredentialError("no-deployment", f"no Grafana Deployment ({MONITORING_NAMESPACE}/{GRAFANA_SERVICE}, "
                              "or one labelled app.kubernetes.io/name=grafana)")  # fmt: skip
    ns, name = str(_meta(deployment).get("namespace") or "default"), str(_meta(deployment).get("name"))
    container = _grafana_container(deployment)
    volumes = [v for v in (((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes")
               or [] if isinstance(v, dict)]  # fmt: skip
    secrets = _Secrets(kube, ns)
    try:
        password = _env_value(container, volumes, secrets, "GF_SECURITY_ADMIN_PASSWORD")
        if password is None:
            raise CredentialError("not-set", f"container {container.get('name')!r} sets no GF_SECURITY_ADMIN_PASSWORD "
                                  "(nor _FILE, nor an envFrom Secret with it)")  # fmt: skip
        user = _env_value(container, volumes, secrets, "GF_SECURITY_ADMIN_USER")
    except CredentialError as exc:
        exc.where.setdefault("deployment", f"{ns}/{name}")
        raise
    return Credentials(user[0] if user else default_user, password[0], f"{password[1]} of Deployment {ns}/{name}",
                       {"deployment": f"{ns}/{name}", **password[2]})  # fmt: skip


def state_credentials(cfg: Config, *, own: bool) -> Credentials | None:
    """The password ``gpustack up`` wrote to the state file, only for gpustack's own cluster (``own``); None when
    there is none (or it is empty), :class:`CredentialError` when it cannot be read."""
    from gpustack.paths import grafana_password_path

    path = grafana_password_path(cfg.cluster.name)
    if not own or not path.is_file():
        return None
    try:
        value = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise CredentialError("state-unreadable", f"cannot read {path}: {exc.strerror}", file=str(path)) from None
    if not value:
        return None
    return Credentials(cfg.monitoring.grafana_admin_user, value, f"gpustack's state file {path}", {"file": str(path)})


def cluster_credentials(kube: Any, default_user: str) -> Credentials:
    """:func:`credentials_from_cluster` without a doctor snapshot: one paged LIST of Deployments (all namespaces, as
    the ``kubernetes`` source reads them), then the same rules (``gpustack grafana-password``)."""
    from kubernetes.client.exceptions import ApiException

    snap = Snapshot()
    try:
        snap.kube["Deployment"] = kube.list_all("/apis/apps/v1/deployments")
    except ApiException as exc:
        snap.errors["kubernetes:Deployment"] = f"LIST Deployment: HTTP {exc.status} {exc.reason or ''}".strip()
    return credentials_from_cluster(snap, kube, default_user)


def grafana_credentials(ctx: CollectContext, snap: Snapshot) -> Credentials:
    """The admin credentials (see the module docstring for the order); :class:`CredentialError` when none."""
    user = ctx.cfg.monitoring.grafana_admin_user
    if ctx.extra.get("grafana_password") is not None:
        return Credentials(user, str(ctx.extra["grafana_password"]), "given to the collector")
    found = state_credentials(ctx.cfg, own=ctx.target is None or ctx.target.own)
    if found is not None:
        return found
    kube = kube_client(ctx)
    if kube is None:
        raise CredentialError("no-deployment", "no Kubernetes client to read Grafana's Deployment with")
    return credentials_from_cluster(snap, kube, user)


def grafana_endpoint(ctx: CollectContext, snap: Snapshot) -> Endpoint | None:
    """Where Grafana answers: ``ctx.extra["grafana_url"]`` (tests) or the API server's service proxy."""
    url = ctx.extra.get("grafana_url")
    if url:
        return DirectEndpoint(str(url))
    kube = kube_client(ctx)
    if kube is None:
        return None
    port = service_port(snap, MONITORING_NAMESPACE, GRAFANA_SERVICE, GRAFANA_PORT)
    return KubeProxyEndpoint(kube, MONITORING_NAMESPACE, GRAFANA_SERVICE, port)


def series_count(result: Mapping[str, Any]) -> int:
    """Series in one ``/api/ds/query`` result: frames that carry at least one value."""
    frames = result.get("frames") or []
    count = 0
    for frame in frames:
        values = ((frame or {}).get("data") or {}).get("values") or []
        if any(isinstance(col, list) and col for col in values):
            count += 1
    return count


def counted_series(result: Mapping[str, Any]) -> int:
    """The series a ``count(...)`` query counted: the sum of its frames' last values (0 for an empty result)."""
    total = 0
    for frame in result.get("frames") or []:
        values = ((frame or {}).get("data") or {}).get("values") or []
        column = values[-1] if values and isinstance(values[-1], list) else []
        try:
            total += int(float(column[-1])) if column else 0
        except (TypeError, ValueError):
            continue
    return total


def ds_query(client: GrafanaClient, ds: Obj, exprs: list[str], *, count: bool = False) -> tuple[int, str]:
    """Run ``exprs`` as one panel through Grafana: (series returned, first error or "").

    ``count``: ask Grafana for ``count((expr))`` and read the number, not the series themselves: whether a panel
    has data, and how many series, at the same small answer size on one node or a thousand."""
    ref = {"uid": ds.get("uid"), "type": ds.get("type", "prometheus")}
    queries = [
        {"refId": chr(ord("A") + i), "datasource": ref, "expr": f"count(({e}))" if count else e, "instant": True,
         "range": False, "intervalMs": dash.QUERY_STEP_S * 1000, "maxDataPoints": 100}
        for i, e in enumerate(exprs[:26])
    ]  # fmt: skip
    try:
        body = client.post("/api/ds/query", {"queries": queries, "from": "now-5m", "to": "now"})
    except HttpError as exc:  # a query failed: HTTP 400, every result still in the body (grafana pkg/api/ds_query.go)
        if not isinstance(body := exc.json_body() if exc.status == 400 else None, dict) or "results" not in body:
            raise
    results = (body or {}).get("results") or {}
    total, errors = 0, []
    for q, expr in zip(queries, exprs[: len(queries)], strict=True):
        res = results.get(q["refId"]) or {}
        if res.get("error") or int(res.get("status") or 200) >= 400:
            errors.append(f"{expr}: {res.get('error') or res.get('status')}")
            continue
        total += counted_series(res) if count else series_count(res)
    return total, errors[0] if errors else ""


def _panels(model: Mapping[str, Any], ds: Obj) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    fixed = dash.variable_values(model)  # constants and text boxes keep their value, as Grafana would use it
    for title, expr in dash.panel_queries(model):  # $__rate_interval from the datasource's scrape interval, as Grafana
        try:
            out.setdefault(title, []).append(dash.concretize(expr, fixed, dash.datasource_builtins(ds)))
        except ValueError:
            out.setdefault(title, []).append(expr)
    return out


def prometheus_datasource(datasources: list[Obj]) -> Obj | None:
    """The Prometheus datasource panels use (the default one first)."""
    proms = [d for d in datasources if d.get("type") == "prometheus"]
    proms.sort(key=lambda d: not d.get("isDefault"))
    return proms[0] if proms else None


def _login_failed(snap: Snapshot, login: Obj, detail: str) -> None:
    snap.grafana.login, snap.errors["grafana:login"] = {**login, "detail": detail}, detail


@source("grafana", layers=("grafana",), after=("kubernetes",))
def collect_grafana(ctx: CollectContext, snap: Snapshot) -> None:
    """Fill ``snap.grafana``: health (no login), then credentials, login and the API (see the module docstring)."""
    timeout = min(REQUEST_TIMEOUT, max(1.0, ctx.timeout / 4))
    deadline = time.monotonic() + max(2.0, ctx.timeout * 0.8)
    ep = grafana_endpoint(ctx, snap)
    if ep is None:
        snap.errors["grafana"] = "no kubeconfig and no Grafana URL: cannot reach Grafana"
        return
    try:
        health = ep.request("GET", "/api/health", timeout=timeout).json()
    except HttpError as exc:
        snap.errors["grafana"] = f"Grafana via {ep.describe()}: {exc}"
        return
    snap.grafana.health = health if isinstance(health, dict) else {"raw": str(health)[:200]}
    snap.grafana.reachable = True
    try:
        creds = grafana_credentials(ctx, snap)
    except CredentialError as exc:
        _login_failed(snap, {"state": exc.state, **exc.where}, exc.detail)
        return
    login: Obj = {"state": "ok", "user": creds.user, "source": creds.source, **creds.where}
    snap.grafana.login = dict(login)
    if isinstance(ep, DirectEndpoint):
        ep = DirectEndpoint(ep.base_url, auth=(creds.user, creds.password))
    client = GrafanaClient(ep, creds.user, creds.password, timeout)
    try:
        if isinstance(client.ep, KubeProxyEndpoint):
            client.login()
        datasources = client.get("/api/datasources")
        search = search_dashboards(client)
    except HttpError as exc:
        detail = f"Grafana via {client.ep.describe()}: {exc}"
        if exc.status in (401, 403) or "session cookie" in str(exc):
            _login_failed(snap, {**login, "state": "refused"}, detail)
        else:
            snap.errors["grafana"] = detail
        return
    keep_ds = ("uid", "name", "type", "url", "isDefault", "access", "jsonData")  # jsonData: timeInterval
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
        model = fetch_dashboard(client, uid)  # the legacy path, or the dashboard API for a v2 dashboard
        if needs:
            series, err = ds_query(client, ds, [needs])
            if err:
                snap.grafana.panel_errors[uid] = {"(probe)": err}
                return
            if series <= 0:
                snap.grafana.panel_errors[uid] = {"(rules)": f"{needs} returned no series"}
                return
    except (HttpError, DashboardUnreadable) as exc:
        snap.grafana.panel_errors[uid] = {"(dashboard)": str(exc)}
        return

    # a panel's queries may take seconds on a large cluster: each may use what is left of the source's time
    panel_client = replace(client, timeout=max(client.timeout, deadline - time.monotonic()))

    def panel(item: tuple[str, list[str]]) -> tuple[int, str]:
        if time.monotonic() > deadline:
            return -1, "not run: the Grafana source ran out of time"
        try:
            count, err = ds_query(panel_client, ds, item[1], count=True)
        except HttpError as exc:
            count, err = -1, str(exc)
        return (-1, err) if err and count <= 0 else (count, "")

    # a few panels at a time, as Grafana itself runs a dashboard's queries: the wall time stays a few round trips
    panels = list(_panels(model, ds).items())
    with cf.ThreadPoolExecutor(max_workers=PANEL_WORKERS) as pool:
        results = list(pool.map(panel, panels))
    errors: dict[str, str] = {}
    for (title, _), (count, err) in zip(panels, results, strict=True):
        snap.grafana.panel_results[prefix + title] = count
        if err:
            errors[prefix + title] = err
    snap.grafana.panel_errors[uid] = errors
