"""The ``kubernetes`` source: one paginated LIST per kind, the non-Normal events of failing objects,
and the log tails of failing pods.

Request budget (what the benchmark measures): discovery (one request per API group-version), one
LIST per kind in :data:`~gpustack.diagnose.snapshot.KUBE_KINDS` and
:data:`~gpustack.diagnose.snapshot.NAMESPACED_KINDS` plus one LIST of events, each paged at :data:`PAGE_SIZE`,
plus at most :data:`MAX_LOG_REQUESTS` log tails (failing pods, and the MIG manager of a node whose MIG change
failed or is pending). Nothing is requested per node.

Before anything is read, the server is proven to be a Kubernetes API server (``GET /version``, ``GET /api``:
:meth:`~gpustack.runners.kube.Kube.prove_kubernetes`, two more requests).

Failures are data: no kubeconfig, an unreachable API server or a server that is not one ->
``snap.errors["kubernetes"]`` with an empty ``snap.kube`` (the engine maps that to exit 3); a kind the server
refuses (403, 500) -> ``snap.errors["kubernetes:<Kind>"]``; a kind the proven server does not serve (CRD not
installed) -> an empty list.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpustack.constants import FLANNEL_NAMESPACE, GPU_NAMESPACE, MONITORING_NAMESPACE
from gpustack.diagnose.collect import CollectContext, source
from gpustack.diagnose.objects import (
    as_dict,
    as_list,
    container_problem,
    daemonset_counts,
    failing_nodes,
    involved_key,
    meta,
    pod_problem,
)
from gpustack.diagnose.pod_queue import queue_state
from gpustack.diagnose.snapshot import KUBE_KINDS, NAMESPACED_KINDS, Obj, Snapshot
from gpustack.errors import ClusterUnreachableError
from gpustack.runners.kube import Kube, single_try_client

PAGE_SIZE = 500
LOG_TAIL_LINES = 100
MAX_LOG_PODS = 20
MAX_LOG_REQUESTS = 40
#: Failing pods in these namespaces get their logs read first (gpustack's own components).
PRIORITY_NAMESPACES = ("kube-system", FLANNEL_NAMESPACE, GPU_NAMESPACE, MONITORING_NAMESPACE)
NO_KUBECONFIG = "no kubeconfig for this cluster: run `gpustack up` first (or pass --kubeconfig)"


class CountingKube(Kube):
    """A :class:`Kube` that counts its requests, on a client that does not retry a timed-out read
    (:func:`~gpustack.runners.kube.single_try_client`); it shares ``base``'s verdict on the server."""

    def __init__(self, base: Kube, *, request_timeout: float) -> None:
        super().__init__(single_try_client(base.api), request_timeout=request_timeout, proof=base.proof)
        self.count = 0

    def _send(self, method: str, path: str, **kw: Any) -> Any:
        self.count += 1
        return super()._send(method, path, **kw)


def _kube_for(ctx: CollectContext) -> Kube | None:
    given = ctx.extra.get("kube")
    if given is not None and not isinstance(given, Kube):
        return None
    return ctx.kube()


def _api_error(exc: ApiException) -> str:
    return f"HTTP {exc.status} {exc.reason or ''}".strip()


MIG_MANAGER_APP = "nvidia-mig-manager"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"


def _mig_nodes_in_trouble(nodes: list[Obj]) -> set[str]:
    """Nodes whose MIG manager reports ``failed`` or ``pending``: its log says why (G12-mig-config-state)."""
    return {str(meta(n).get("name") or "") for n in nodes
            if as_dict(meta(n).get("labels")).get(MIG_STATE_LABEL) in ("failed", "pending")}  # fmt: skip


def _log_targets(pods: list[Obj], mig_nodes: Collection[str] = ()) -> list[tuple[str, str, str, bool]]:
    """(namespace, pod, container, previous) for failing pods, gpustack's namespaces first, bounded; and the MIG
    manager of the ``mig_nodes`` (Running, but its log explains the node's MIG state)."""
    chosen: list[tuple[int, str, str, list[tuple[str, bool]]]] = []
    for pod in pods:
        md = meta(pod)
        if (as_dict(md.get("labels")).get("app") == MIG_MANAGER_APP and md.get("name") and md.get("namespace")
                and str(as_dict(pod.get("spec")).get("nodeName") or "") in mig_nodes):  # fmt: skip
            chosen.append((-1, str(md["namespace"]), str(md["name"]), [(MIG_MANAGER_APP, False)]))
            continue
        problem = pod_problem(pod)
        if problem is None or queue_state(pod, problem, last_event="", largest={}) == "finished":
            continue  # a finished workload pod is no failure (K07): its log is not read
        md = meta(pod)
        ns, name = str(md.get("namespace") or ""), str(md.get("name") or "")
        if not ns or not name:
            continue
        status = as_dict(pod.get("status"))
        containers: list[tuple[str, bool]] = []
        for key in ("initContainerStatuses", "containerStatuses"):
            for cs in as_list(status.get(key)):
                cs = as_dict(cs)
                problem = container_problem(cs, init=key == "initContainerStatuses")
                if problem is None or not cs.get("name"):
                    continue
                waiting = as_dict(as_dict(cs.get("state")).get("waiting"))
                previous = waiting.get("reason") == "CrashLoopBackOff"
                containers.append((str(cs["name"]), previous))
        if not containers:  # Running but not Ready (e.g. CoreDNS unable to reach the API): its unready containers
            containers = [(str(cs["name"]), False) for cs in (as_dict(c) for c in as_list(status.get("containerStatuses")))
                          if cs.get("ready") is not True and cs.get("name")]  # fmt: skip
        if containers:
            rank = PRIORITY_NAMESPACES.index(ns) if ns in PRIORITY_NAMESPACES else len(PRIORITY_NAMESPACES)
            chosen.append((rank, ns, name, containers[:2]))
    chosen.sort(key=lambda c: (c[0], c[1], c[2]))
    out = [(ns, name, c, prev) for _, ns, name, cs in chosen[:MAX_LOG_PODS] for c, prev in cs]
    return out[:MAX_LOG_REQUESTS]


def _tail_logs(kube: CountingKube, snap: Snapshot, pods: list[Obj], deadline: float) -> None:
    failures = 0
    for ns, pod, container, previous in _log_targets(pods, _mig_nodes_in_trouble(snap.items("Node"))):
        if time.monotonic() > deadline:
            snap.errors.setdefault("kubernetes:logs", "log tails skipped: the source ran out of time")
            return
        path = f"/api/v1/namespaces/{ns}/pods/{pod}/log"
        query = {"container": container, "tailLines": str(LOG_TAIL_LINES)}
        try:
            try:
                text = kube.text(path, {**query, "previous": "true"} if previous else query)
            except ApiException as exc:
                if not previous or exc.status != 400:  # 400: no previous instance; read the current one
                    raise
                text = kube.text(path, query)
        except ApiException:
            failures += 1
            continue
        snap.pod_logs[f"{ns}/{pod}/{container}"] = text
    if failures:
        snap.errors.setdefault("kubernetes:logs", f"{failures} log tail(s) could not be read")


def _failing_objects(snap: Snapshot) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of what is failing: events of these are kept."""
    out: set[tuple[str, str, str]] = set()
    for pod in snap.items("Pod"):
        if pod_problem(pod) is not None:
            md = meta(pod)
            out.add(("Pod", str(md.get("namespace") or ""), str(md.get("name") or "")))
    for node in failing_nodes(snap.items("Node")):
        out.add(("Node", "", node))
    for ds in snap.items("DaemonSet"):
        desired, ready, available = daemonset_counts(ds)
        if not desired == ready == available:
            md = meta(ds)
            out.add(("DaemonSet", str(md.get("namespace") or ""), str(md.get("name") or "")))
    return out


@source("kubernetes", layers=("kubernetes", "security", "gpu-operator", "monitoring", "grafana"))
def collect_kubernetes(ctx: CollectContext, snap: Snapshot) -> None:
    """Fill ``snap.kube``, ``snap.events`` and ``snap.pod_logs`` (see the module docstring)."""
    started = time.monotonic()
    deadline = started + ctx.timeout * 0.8
    page_size = int(ctx.extra.get("kube_page_size") or PAGE_SIZE)
    try:
        base = _kube_for(ctx)
    except Exception as exc:  # a broken kubeconfig file
        where = ", ".join(str(f) for f in ctx.target.files) if ctx.target is not None else ctx.kubeconfig
        snap.errors["kubernetes"] = f"cannot load the kubeconfig {where}: {getattr(exc, 'message', exc)}"
        return
    if base is None:
        snap.errors["kubernetes"] = ctx.no_cluster or NO_KUBECONFIG
        return
    kube = CountingKube(base, request_timeout=min(base.request_timeout, max(0.5, ctx.timeout / 4)))
    kube_data: dict[str, list[Obj]] = {}
    unreachable = 0
    try:
        kube.prove_kubernetes()  # a server that is not Kubernetes answers 404: not "no such kind, empty"
        for api_version, kind in KUBE_KINDS:
            try:
                res = kube.resource(api_version, kind)
                if res is None:  # not served: its CRD is not installed
                    kube_data[kind] = []
                    continue
                kube_data[kind] = kube.list_all(f"{res.base}/{res.plural}", page=page_size)
            except ApiException as exc:
                snap.errors[f"kubernetes:{kind}"] = f"LIST {kind}: {_api_error(exc)}"
            except ClusterUnreachableError as exc:
                if not kube_data or unreachable:  # nothing answered yet, or a second time: give up
                    raise
                unreachable += 1
                snap.errors[f"kubernetes:{kind}"] = f"LIST {kind}: {exc}"
        for api_version, kind, namespace in NAMESPACED_KINDS:
            try:
                res = kube.resource(api_version, kind)
                kube_data[kind] = kube.list_all(res.path(None, namespace), page=page_size) if res else []
            except ApiException as exc:
                if exc.status == 404:  # the namespace does not exist (yet): nothing in it
                    kube_data[kind] = []
                else:
                    snap.errors[f"kubernetes:{kind}"] = f"LIST {kind} in {namespace}: {_api_error(exc)}"
    except ClusterUnreachableError as exc:
        snap.errors["kubernetes"] = str(exc)
        snap.requests += kube.count
        return
    snap.kube.update(kube_data)
    try:
        failing = _failing_objects(snap)
        if failing:
            try:
                events = kube.list_all("/api/v1/events", {"fieldSelector": "type!=Normal"}, page=page_size)
                snap.events = [e for e in events if involved_key(e) in failing]
            except (ApiException, ClusterUnreachableError) as exc:
                why = _api_error(exc) if isinstance(exc, ApiException) else str(exc)
                snap.errors["kubernetes:Event"] = f"LIST Event: {why}"
        if failing or _mig_nodes_in_trouble(snap.items("Node")):
            _tail_logs(kube, snap, snap.items("Pod"), deadline)
    except ClusterUnreachableError as exc:
        snap.errors["kubernetes:logs"] = f"log tails stopped: {exc}"
    finally:
        snap.requests += kube.count
