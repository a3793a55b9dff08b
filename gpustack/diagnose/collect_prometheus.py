"""Source ``prometheus``: the Prometheus HTTP API and the dcgm-exporter's ``/metrics``.

How it reaches them:

- Prometheus: ``ctx.extra["prometheus_url"]`` (tests) or the API server's service proxy to
  ``monitoring/kube-prometheus-stack-prometheus:http-web``. kube-prometheus-stack names that Service port
  ``{{ .Values.prometheus.prometheusSpec.portName }}`` (default ``http-web``, port 9090:
  templates/prometheus/service.yaml); when the collected Service shows another port name, that one is used.
- the exporter: ``ctx.extra["exporter_url"]`` (tests) or the service proxy to the exporter Service of
  ``gpu.exporter`` (:data:`gpustack.render.manifests.EXPORTER_TARGETS`), first 64 KiB of ``/metrics``.

What it asks -- only what the checks need, so the answers stay small at any cluster size (a 1,000-node
cluster's whole ``/api/v1/targets`` is several MiB, over the body cap):

- ``/api/v1/status/buildinfo``: reachable, and the version (what the filters below need);
- the :data:`QUERIES` (aggregated by node, or only the exporter targets that are down: ``up == 0``);
- ``/api/v1/rules``, filtered to gpustack's rule groups (``rule_group[]``, Prometheus 2.44+);
- only when an exporter target is down: its scrape pool's targets (``/api/v1/scrape_pools`` and
  ``/api/v1/targets?scrapePool=...&state=active``, both Prometheus 2.42+), for the scrape error of the
  down ones. Older Prometheus: no target details (the ``up`` series still name the target).

What it stores: ``snap.prometheus`` (``version``; the down exporter targets' details in ``targets``; rule
groups; the :data:`QUERIES` results in ``queries``, their errors in ``query_errors``: an answer over the
body cap is such an error, naming the cap). The exporter scrape is one record (:func:`scrape_exporter`) in
``snap.prometheus.exporter_scrape``. Prometheus unreachable -> ``snap.errors["prometheus"]``; the exporter
scrape is recorded either way.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gpustack.config.pins import version_tuple
from gpustack.constants import MONITORING_NAMESPACE, PROMETHEUS_PORT, PROMETHEUS_SERVICE
from gpustack.diagnose.collect import CollectContext, source
from gpustack.diagnose.snapshot import Obj, Snapshot
from gpustack.monitoring.rules import rule_group_names
from gpustack.render.manifests import EXPORTER_TARGETS, exporter_target
from gpustack.runners.http import BodyTooLarge, DirectEndpoint, Endpoint, HttpError, KubeProxyEndpoint, Query

METRICS_LIMIT = 64 * 1024
REQUEST_TIMEOUT = 10.0

#: the dcgm-exporter's targets: gpustack's ServiceMonitor sets job="dcgm-exporter"; others keep "dcgm" in the job
EXPORTER_UP = 'up{job=~".*dcgm.*"}'
#: etcd's leader-change counter as kube-prometheus-stack's etcd rules select it (etcd-mixin: ``job=~".*etcd.*"``)
ETCD_LEADER_CHANGES = 'etcd_server_leader_changes_seen_total{job=~".*etcd.*"}'
#: name -> instant query. Checks read these by name. Each answer is bounded by the node count (one series per
#: node at most) or, on a healthy cluster, empty (the down targets): none returns every target.
QUERIES: dict[str, str] = {
    "gpu_util_by_node": "count by (node) (DCGM_FI_DEV_GPU_UTIL)",
    "gr_engine_by_node": "count by (node) (DCGM_FI_PROF_GR_ENGINE_ACTIVE)",
    "tensor_by_node": "count by (node) (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)",
    # the GPU models per node: which fields a node can report (gpustack/monitoring/gpu_models.py; R04, M08)
    "gpu_models": "count by (node, modelName) (DCGM_FI_DEV_GPU_UTIL)",
    "exporter_targets": f"count by (job) ({EXPORTER_UP})",
    "exporter_down": f"{EXPORTER_UP} == 0",
    # the devices the device plugin advertises, deduplicated as the usage rule gpustack:gpu_allocatable:sum reads
    # them (two kube-state-metrics targets export the same series; tests/unit/report/test_queries.py); the rule
    # also weights shared GPUs by their share (docs/gpu-sharing.md#report)
    "gpu_allocatable": 'sum by (node) (max by (node, resource) (kube_node_status_allocatable{resource="nvidia_com_gpu"}))',
    # etcd leader elections (M12, gpustack/diagnose/checks_etcd_metrics.py): every member counts each one it sees, so
    # the most any member saw; one series, or none where etcd is not scraped
    "etcd_leader_changes_15m": f"round(max(increase({ETCD_LEADER_CHANGES}[15m])))",
    "etcd_leader_changes_1h": f"round(max(increase({ETCD_LEADER_CHANGES}[1h])))",
}
#: the Prometheus releases doctor, verify and report support, oldest and newest major (docs/operations.md,
#: "Prometheus versions"): 2.42 is Debian 12's package (the first with the scrape-pool filter below), 3 the
#: major the pinned kube-prometheus-stack deploys; the real-Prometheus tests run both
#: (tests/prometheus/releases.py). Older ones answer without target details (below).
OLDEST_PROMETHEUS = (2, 42)
NEWEST_PROMETHEUS_MAJOR = 3
#: the Prometheus release that added /api/v1/scrape_pools and /api/v1/targets?scrapePool= (prometheus#11142)
SCRAPE_POOL_FILTER = (2, 42)
#: the Prometheus release that added /api/v1/rules?rule_group[]= (prometheus#12270)
RULE_GROUP_FILTER = (2, 44)
_TARGET_KEYS = ("scrapePool", "scrapeUrl", "health", "lastError", "lastScrape", "labels")
_GPU_UTIL_LINE = re.compile(rb"^DCGM_FI_DEV_GPU_UTIL[{ ]", re.M)
#: a series of one MIG GPU instance (dcgm-exporter render_metrics.go: GPU_I_PROFILE, GPU_I_ID after modelName); under
#: MIG GPU_UTIL is not reported (NVIDIA/dcgm-exporter#430): these are what the exporter serves there
_MIG_INSTANCE_LINE = re.compile(rb'^DCGM_\w+\{[^}\n]*\bGPU_I_ID="', re.M)


def kube_client(ctx: CollectContext) -> Any:
    """The Kubernetes client: ``ctx.extra["kube"]`` or one connected to the resolved cluster (cached in extra)."""
    kube = ctx.extra.get("kube")
    if kube is None:
        kube = ctx.kube(REQUEST_TIMEOUT)
        if kube is not None:
            ctx.extra["kube"] = kube
    return kube


def service_port(snap: Snapshot, namespace: str, name: str, default: str) -> str:
    """The first port name of a collected Service (``default`` when the Service was not collected)."""
    for svc in snap.items("Service"):
        meta = svc.get("metadata") or {}
        if meta.get("namespace") == namespace and meta.get("name") == name:
            ports = (svc.get("spec") or {}).get("ports") or []
            names = [str(p.get("name")) for p in ports if isinstance(p, dict) and p.get("name")]
            if default in names or not names:
                return default
            return names[0]
    return default


def prometheus_endpoint(ctx: CollectContext, snap: Snapshot) -> Endpoint | None:
    """Where Prometheus answers (None: no URL and no kubeconfig)."""
    url = ctx.extra.get("prometheus_url")
    if url:
        return DirectEndpoint(str(url))
    kube = kube_client(ctx)
    if kube is None:
        return None
    port = service_port(snap, MONITORING_NAMESPACE, PROMETHEUS_SERVICE, PROMETHEUS_PORT)
    return KubeProxyEndpoint(kube, MONITORING_NAMESPACE, PROMETHEUS_SERVICE, port)


def exporter_endpoint(ctx: CollectContext, snap: Snapshot) -> Endpoint | None:
    url = ctx.extra.get("exporter_url")
    if url:
        return DirectEndpoint(str(url))
    kube = kube_client(ctx)
    if kube is None:
        return None
    target = exporter_target(ctx.cfg) if ctx.cfg.gpu.exporter in EXPORTER_TARGETS else None
    if target is None:
        return None
    return KubeProxyEndpoint(kube, target.namespace, target.service,
                             service_port(snap, target.namespace, target.service, target.port))  # fmt: skip


def api_data(ep: Endpoint, path: str, query: Query | None = None, timeout: float = REQUEST_TIMEOUT) -> Any:
    """GET ``/api/v1/<path>`` and return ``data``; :class:`HttpError` on a transport or API error."""
    try:
        body = ep.request("GET", f"/api/v1/{path}", query=query, timeout=timeout).json()
    except HttpError as exc:
        if exc.body.startswith("{"):  # Prometheus explains 4xx/5xx in JSON
            try:
                err = json.loads(exc.body)
                raise HttpError(f"{path}: {err.get('errorType')}: {err.get('error')}", status=exc.status) from None
            except ValueError:
                pass
        raise
    if not isinstance(body, dict) or body.get("status") != "success":
        err = body if isinstance(body, dict) else {}
        raise HttpError(f"{path}: {err.get('errorType', 'bad response')}: {err.get('error', str(body)[:200])}")
    return body.get("data")


def instant(ep: Endpoint, expr: str, timeout: float = REQUEST_TIMEOUT) -> list[Obj]:
    """An instant query's result vector."""
    data = api_data(ep, "query", {"query": expr}, timeout)
    if not isinstance(data, dict):
        return []
    result = data.get("result")
    return [r for r in result if isinstance(r, dict)] if isinstance(result, list) else []


def scalar_max(ep: Endpoint, expr: str, timeout: float = REQUEST_TIMEOUT) -> float | None:
    """The largest value of an instant query (None when it returns nothing)."""
    values: list[float] = []
    for row in instant(ep, expr, timeout):
        try:
            values.append(float(row["value"][1]))
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return max(values) if values else None


def _trim_target(t: Obj) -> Obj:
    return {k: t.get(k) for k in _TARGET_KEYS if k in t}


def _trim_group(g: Obj) -> Obj:
    rules = [
        {k: r.get(k) for k in ("name", "type", "health", "lastError", "state") if k in r}
        for r in g.get("rules") or []
        if isinstance(r, dict)
    ]
    return {"name": g.get("name"), "file": g.get("file"), "rules": rules}


def scrape_exporter(ep: Endpoint, timeout: float = REQUEST_TIMEOUT) -> Obj:
    """One GET of the exporter's ``/metrics`` (first 64 KiB): what it serves, or why not."""
    record: Obj = {"endpoint": ep.describe(), "status": None, "bytes": 0, "truncated": False,
                   "gpu_util_series": 0, "mig_instance_series": 0, "dcgm_metrics": [], "error": ""}  # fmt: skip
    try:
        resp = ep.request("GET", "/metrics", limit=METRICS_LIMIT, timeout=timeout)
    except HttpError as exc:
        record.update(status=exc.status, error=str(exc))
        return record
    names = sorted({m.decode() for m in re.findall(rb"^(DCGM_\w+)", resp.body, re.M)})
    record.update(
        status=resp.status, bytes=len(resp.body), truncated=resp.truncated,
        gpu_util_series=len(_GPU_UTIL_LINE.findall(resp.body)), dcgm_metrics=names,
        mig_instance_series=len(_MIG_INSTANCE_LINE.findall(resp.body)),
    )  # fmt: skip
    return record


def _rule_groups(ep: Endpoint, version: tuple[int, ...], timeout: float) -> list[Obj]:
    """gpustack's rule groups (:func:`gpustack.monitoring.rules.rule_group_names`: both rule files), trimmed.
    Prometheus 2.44+ filters them (``rule_group[]``); an older one answers every group and ignores the
    parameter, so the answer is filtered here as well: the snapshot holds the same groups on either."""
    wanted = rule_group_names()
    query: Query | None = {"rule_group[]": wanted} if version >= RULE_GROUP_FILTER else None
    rules = api_data(ep, "rules", query, timeout)
    groups = rules.get("groups") if isinstance(rules, dict) else None
    return [_trim_group(g) for g in groups or [] if isinstance(g, dict) and g.get("name") in wanted]


def down_target_details(ep: Endpoint, version: tuple[int, ...], timeout: float) -> list[Obj]:
    """The exporter targets that are not up, with their scrape error: the targets of the dcgm scrape pools only
    (``scrapePool=``, Prometheus 2.42+); [] on an older Prometheus. :class:`HttpError` (e.g. over the cap)."""
    if version < SCRAPE_POOL_FILTER:
        return []
    pools = api_data(ep, "scrape_pools", None, timeout)
    names = (
        [str(p) for p in (pools or {}).get("scrapePools") or [] if "dcgm" in str(p)] if isinstance(pools, dict) else []
    )
    out: list[Obj] = []
    for pool in names:
        data = api_data(ep, "targets", {"scrapePool": pool, "state": "active"}, timeout)
        active = data.get("activeTargets") if isinstance(data, dict) else None
        out += [_trim_target(t) for t in active or [] if isinstance(t, dict) and t.get("health") != "up"]
    return out


@source("prometheus", layers=("monitoring", "grafana"), after=("kubernetes",))
def collect_prometheus(ctx: CollectContext, snap: Snapshot) -> None:
    """Fill ``snap.prometheus``; record unreachability in ``snap.errors`` instead of raising."""
    timeout = min(REQUEST_TIMEOUT, max(1.0, ctx.timeout / 3))
    exp = exporter_endpoint(ctx, snap)
    if exp is not None:
        snap.prometheus.exporter_scrape = scrape_exporter(exp, timeout)
    ep = prometheus_endpoint(ctx, snap)
    if ep is None:
        snap.errors["prometheus"] = "no kubeconfig and no Prometheus URL: cannot reach Prometheus"
        return
    try:
        info = api_data(ep, "status/buildinfo", None, timeout)
        snap.prometheus.version = str((info or {}).get("version") or "") if isinstance(info, dict) else ""
    except HttpError as exc:
        if exc.status != 404:  # 404: older than 2.14 (no buildinfo): the queries below tell whether it answers
            snap.errors["prometheus"] = f"Prometheus unreachable via {ep.describe()}: {exc}"
            return
    version = version_tuple(snap.prometheus.version)
    for name, expr in QUERIES.items():
        try:
            snap.prometheus.queries[name] = instant(ep, expr, timeout)
        except BodyTooLarge as exc:
            snap.prometheus.query_errors[name] = f"query {expr!r}: {exc}"
        except HttpError as exc:
            if exc.status is None and not snap.prometheus.queries:  # nothing answered at all
                snap.errors["prometheus"] = f"Prometheus unreachable via {ep.describe()}: {exc}"
                return
            snap.prometheus.query_errors[name] = str(exc)
    snap.prometheus.reachable = True
    try:
        snap.prometheus.rule_groups = _rule_groups(ep, version, timeout)
    except HttpError as exc:
        snap.prometheus.query_errors["rules"] = str(exc)
    if snap.prometheus.queries.get("exporter_down"):
        try:
            snap.prometheus.targets = down_target_details(ep, version, timeout)
        except HttpError as exc:
            snap.prometheus.query_errors["targets"] = f"the down targets' scrape errors could not be read: {exc}"
