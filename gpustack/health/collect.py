"""Read what the policy needs: the GPU Nodes from the Kubernetes API and the signals from Prometheus
(through the API server's service proxy, as verify/doctor reach it). The only I/O of an evaluation.

A fixed set of queries whatever the cluster size (9), plus two per node released within the windows (their
XID and row-growth windows start at the release, see :mod:`gpustack.health.policy`).

One clock: Prometheus evaluates every query at its own time, and a release is dated by the API server's
clock (``gpustack.io/released-at``). So the snapshot's ``now`` is Prometheus' (``time()``), and a release
time is moved onto that clock by the difference between the two (Prometheus' ``time()`` minus the API
server's ``Date``, read back to back). Where one of them is unknown the evaluator's clock stands in for it.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpustack.constants import (
    ANN_QUARANTINED_AT,
    ANN_RELEASED_AT,
    ANN_RELEASED_LAST_XIDS,
    MONITORING_NAMESPACE,
    PROMETHEUS_PORT,
    PROMETHEUS_SERVICE,
    QUARANTINE_LABEL,
)
from gpustack.diag.job import gpu_capacity
from gpustack.diagnose.collect_prometheus import api_data, instant
from gpustack.health.actions import parse_time
from gpustack.health.ledger import server_time
from gpustack.health.policy import GpuSample, NodeState, Settings, Snapshot
from gpustack.runners.http import DirectEndpoint, Endpoint, HttpError, KubeProxyEndpoint
from gpustack.runners.kube import Kube

Obj = dict[str, Any]
#: dcgm-exporter's default --xid-count-window-size (ms), when its series do not say
DEFAULT_XID_WINDOW_MS = 300_000

#: the policy's queries; ``{sel}`` is an extra label matcher (one node), ``{w}`` a window in seconds
QUERIES: dict[str, str] = {
    "xid": 'max by (node, gpu, UUID, xid) (max_over_time(DCGM_EXP_XID_ERRORS_COUNT{{xid!=""{sel}}}[{w}s]))',
    # which nodes have XID counts at all (and the exporter's counting window)
    "xid_sources": "count by (node, window_size_in_ms) (DCGM_EXP_XID_ERRORS_COUNT)",
    # the last XID per GPU: the fallback where counts are missing, and what explains a withdrawn GPU
    "xid_last": "max by (node, gpu, UUID) (DCGM_FI_DEV_XID_ERRORS)",
    "remap_failure": "max by (node, gpu, UUID) (DCGM_FI_DEV_ROW_REMAP_FAILURE) > 0",
    "remap_pending": "max by (node, gpu, UUID) (DCGM_FI_DEV_ROW_REMAP_PENDING) > 0",
    # the driver's recovery verdict (DCGM field 1523), NONE (0) included: which GPUs report it
    "recovery": "max by (node, gpu, UUID) (DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION)",
    "growth": "max by (node, gpu, UUID) (increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{sel}}}[{w}s])) > 0",
    "allocatable": 'max by (node) (max_over_time(kube_node_status_allocatable{{resource="nvidia_com_gpu"}}[{w}s]))',
}


def expressions(settings: Settings | None = None) -> list[tuple[str, str]]:
    """``(name, PromQL)`` of every query with the default windows (the metric-usage proof reads these)."""
    s = settings or Settings()
    windows = {"xid": s.lookback, "growth": s.growth_window, "allocatable": s.hold}
    return [(f"policy {name}", q.format(sel="", w=windows.get(name, 60))) for name, q in QUERIES.items()]


def prometheus_endpoint(kube: Kube, url: str | None = None) -> Endpoint:
    """Prometheus: a direct URL when given, else kube-prometheus-stack's Service through the API server."""
    if url:
        return DirectEndpoint(url)
    return KubeProxyEndpoint(kube, MONITORING_NAMESPACE, PROMETHEUS_SERVICE, PROMETHEUS_PORT)


def node_state(node: Obj) -> NodeState:
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    capacity, allocatable = gpu_capacity(node)
    return NodeState(
        name=str(meta.get("name")),
        capacity=capacity,
        allocatable=allocatable,
        unschedulable=bool(spec.get("unschedulable")),
        quarantined=labels.get(QUARANTINE_LABEL) == "true",
        quarantined_at=str(annotations.get(ANN_QUARANTINED_AT) or ""),
        released_at=parse_time(str(annotations.get(ANN_RELEASED_AT) or "")),
        released_last_xids=_last_xids(annotations.get(ANN_RELEASED_LAST_XIDS)),
        boot_id=str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or ""),
    )


def _last_xids(text: Any) -> dict[str, int]:
    """``{"GPU-…": 48}`` as release wrote it (anything else: nothing recorded)."""
    try:
        data = json.loads(str(text or "{}"))
        return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (ValueError, TypeError, AttributeError):
        return {}


def _samples(rows: list[Obj], *, xid: bool = False) -> list[GpuSample]:
    out = []
    for row in rows:
        labels = row.get("metric") or {}
        try:
            value = float(row["value"][1])
            code = int(labels["xid"]) if xid else None
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        out.append(GpuSample(str(labels.get("node") or ""), str(labels.get("gpu") or ""), str(labels.get("UUID") or ""),
                             value, code))  # fmt: skip
    return out


def _xid_sources(ep: Endpoint, timeout: float) -> tuple[set[str], int]:
    """(the nodes with XID counts, the exporter's XID counting window in seconds, from its series' label)."""
    nodes, windows = set(), []
    for row in instant(ep, QUERIES["xid_sources"], timeout):
        labels = row.get("metric") or {}
        nodes.add(str(labels.get("node") or ""))
        try:
            windows.append(int(labels["window_size_in_ms"]))
        except (KeyError, TypeError, ValueError):
            continue
    return nodes, (max(windows) if windows else DEFAULT_XID_WINDOW_MS) // 1000


def prometheus_time(ep: Endpoint, timeout: float) -> float | None:
    """Prometheus' clock: ``time()`` evaluated now (a scalar ``[t, "t"]``); None when it says nothing usable."""
    data = api_data(ep, "query", {"query": "time()"}, timeout)
    try:
        t = float(data["result"][0]) if data.get("resultType") == "scalar" else None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None
    return t if t is not None and math.isfinite(t) else None


def api_server_time(kube: Kube) -> float | None:
    """The API server's clock: the ``Date`` of a one-item Node list (None: no usable header)."""
    try:
        return server_time(kube.request_with_headers("GET", "/api/v1/nodes", query={"limit": "1"})[1])
    except ApiException as exc:
        return server_time(exc.headers)


def collect(kube: Kube, settings: Settings, *, prometheus_url: str | None = None, now: float | None = None,
            timeout: float = 10.0, nodes: list[Obj] | None = None,
            server_now: float | None = None) -> tuple[Snapshot, dict[str, Obj]]:  # fmt: skip
    """(the snapshot, the GPU Node objects by name). Kubernetes errors raise; Prometheus errors are recorded.
    ``now``: the evaluator's clock; ``server_now``: the API server's, when the caller has just read it."""
    objs = nodes if nodes is not None else kube.list_all("/api/v1/nodes")
    gpu_objs = {str((n.get("metadata") or {}).get("name")): n for n in objs if gpu_capacity(n)[0] > 0}
    local = time.time() if now is None else now
    snap = Snapshot(now=local, nodes={n: node_state(o) for n, o in gpu_objs.items()})
    ep = prometheus_endpoint(kube, prometheus_url)
    try:
        prom_now = prometheus_time(ep, timeout)
        if server_now is None:
            server_now = api_server_time(kube)
        snap.now = prom_now if prom_now is not None else local
        # a release time (API server's clock) + offset = the same instant on Prometheus' clock
        offset = snap.now - (server_now if server_now is not None else local)
        _collect_prometheus(ep, snap, settings, timeout, offset)
    except HttpError as exc:
        snap.errors["prometheus"] = f"Prometheus unreachable via {ep.describe()}: {exc}"
    return snap, gpu_objs


def _collect_prometheus(ep: Endpoint, snap: Snapshot, s: Settings, timeout: float, offset: float = 0.0) -> None:
    count_nodes, xid_window = _xid_sources(ep, timeout)
    recent = {n: st.released_at + offset for n, st in snap.nodes.items()
              if st.released_at is not None
              and snap.now - (st.released_at + offset) < max(s.lookback + xid_window, s.growth_window)}  # fmt: skip
    xids = _samples(instant(ep, QUERIES["xid"].format(sel="", w=s.lookback), timeout), xid=True)
    growth = _samples(instant(ep, QUERIES["growth"].format(sel="", w=s.growth_window), timeout))
    snap.xids = [x for x in xids if x.node not in recent]
    snap.growth = [g for g in growth if g.node not in recent]
    for node, released in sorted(recent.items()):
        assert released is not None
        sel = f'node="{node}"'
        start = max(snap.now - s.lookback, released + xid_window)
        if snap.now - start >= 1:
            rows = instant(ep, QUERIES["xid"].format(sel="," + sel, w=int(snap.now - start)), timeout)
            snap.xids += _samples(rows, xid=True)
        else:
            resume = time.strftime("%H:%M:%S", time.gmtime(released - offset + xid_window))
            snap.xid_paused[node] = (f"XIDs not evaluated until {resume} UTC (the API server's clock): released at "
                                     f"{time.strftime('%H:%M:%S', time.gmtime(released - offset))}, and the exporter counts XIDs over {xid_window}s")  # fmt: skip
        window = int(snap.now - max(snap.now - s.growth_window, released))
        if window >= 1:
            snap.growth += _samples(instant(ep, QUERIES["growth"].format(sel=sel, w=window), timeout))
    snap.remap_failures = _samples(instant(ep, QUERIES["remap_failure"], timeout))
    snap.remap_pending = _samples(instant(ep, QUERIES["remap_pending"], timeout))
    snap.recovery = _samples(instant(ep, QUERIES["recovery"], timeout))
    snap.xid_last = _samples(instant(ep, QUERIES["xid_last"], timeout))
    snap.xid_count_nodes = count_nodes  # last: set only once every query answered
    for row in instant(ep, QUERIES["allocatable"].format(w=s.hold), timeout):
        node = str((row.get("metric") or {}).get("node") or "")
        try:
            snap.allocatable_max[node] = float(row["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
