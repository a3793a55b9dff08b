"""Draining a node through the Kubernetes API, PodDisruptionBudgets checked before anything moves.

    classify the node's pods (pure) -> preview: a server-side dry-run eviction of each pod
    -> cordon -> evict each pod (the Eviction API; a 429 is retried until the deadline)
    -> wait until they are gone -> (failure: uncordon, unless the node was cordoned before)

Which pods a drain moves follows ``kubectl drain --ignore-daemonsets --delete-emptydir-data``:
DaemonSet pods and static (mirror) pods stay; finished pods are evicted without their budget being
asked; a pod no controller manages would be deleted for good, so it is reported and refused, as
kubectl does without ``--force``. Every request goes through :class:`gpustack.runners.kube.Kube`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpustack.constants import ANN_DRAIN_CORDONED_BY
from gpustack.diagnose.objects import requests_gpus
from gpustack.errors import GpustackError
from gpustack.runners.kube import Eviction, Kube, Obj

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
#: set on a node this drain cordoned (see gpustack/constants.py)
CORDON_ANNOTATION = ANN_DRAIN_CORDONED_BY


__all__ = ["requests_gpus"]  # the GPU pod filter a GPU drain selects with (gpustack.cluster.sharing)


class DrainError(GpustackError):
    """A drain could not finish (or would not: a PodDisruptionBudget blocks); exit 1."""


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    owner: str  # "ReplicaSet/web-6c9f", "" when no controller manages it
    note: str = ""  # e.g. "emptyDir data is lost"

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class Classified:
    """A node's pods, sorted the way a drain treats them."""

    evict: list[Pod] = field(default_factory=list)
    skipped: list[tuple[Pod, str]] = field(default_factory=list)  # stay: DaemonSet, static pods
    unmanaged: list[Pod] = field(default_factory=list)  # refused: nothing would recreate them


@dataclass
class Preview:
    """What a drain of ``node`` would do, from a server-side dry run of every eviction."""

    node: str
    pods: Classified
    blocked: list[tuple[Pod, str]] = field(default_factory=list)  # a PodDisruptionBudget says no

    @property
    def ok(self) -> bool:
        return not self.blocked and not self.pods.unmanaged

    def problems(self) -> list[str]:
        """One line per pod that stops the removal (empty: the drain may go ahead)."""
        out = [f"{p.ref} ({p.owner}): {why}" for p, why in self.blocked]
        out += [
            f"{p.ref}: not managed by a controller: evicting it deletes it for good (delete or move it yourself)"
            for p in self.pods.unmanaged
        ]
        return out


def _controller(pod: Obj) -> tuple[str, str]:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind") or ""), str(ref.get("name") or "")
    return "", ""


def classify(pods: Sequence[Obj], select: Callable[[Obj], bool] | None = None) -> Classified:
    """Sort a node's pods into evicted, left alone and refused (pure); ``select``: only the pods it accepts
    are considered (a GPU drain: :func:`~gpustack.diagnose.objects.requests_gpus`), the others stay untouched."""
    out = Classified()
    for obj in pods:
        if select is not None and not select(obj):
            continue
        meta = obj.get("metadata") or {}
        kind, name = _controller(obj)
        volumes = (obj.get("spec") or {}).get("volumes") or []
        note = "emptyDir data is lost" if any("emptyDir" in v for v in volumes) else ""
        pod = Pod(str(meta.get("namespace") or ""), str(meta.get("name") or ""), f"{kind}/{name}" if kind else "", note)
        if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            out.skipped.append((pod, "static pod: the kubelet runs it until the host is reset"))
        elif kind == "DaemonSet":
            out.skipped.append((pod, "DaemonSet pod: it runs on every node"))
        elif (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            out.evict.append(pod)  # finished: removed without asking its budget
        elif not kind:
            out.unmanaged.append(pod)
        else:
            out.evict.append(pod)
    return out


def node_pods(kube: Kube, node: str) -> list[Obj]:
    return kube.list_objects("v1", "Pod", field_selector=f"spec.nodeName={node}")


def preview(kube: Kube, node: str) -> Preview:
    """Ask the API server, without changing anything, whether each pod on ``node`` may be evicted now."""
    pods = classify(node_pods(kube, node))
    out = Preview(node, pods)
    for pod in pods.evict:
        answer = kube.evict(pod.name, pod.namespace, dry_run=True)
        if answer.outcome == "blocked":
            out.blocked.append((pod, answer.message))
    return out


def ours_to_uncordon(node: Obj) -> bool:
    """Whether a failed drain should uncordon ``node``: it was schedulable, or gpustack cordoned it."""
    meta = node.get("metadata") or {}
    return not (node.get("spec") or {}).get("unschedulable") or CORDON_ANNOTATION in (meta.get("annotations") or {})


def cordon(kube: Kube, node: str, *, on: bool = True, why: str = "gpustack node remove") -> None:
    """Mark the node (un)schedulable: ``spec.unschedulable`` and gpustack's annotation (``why``) by server-side
    apply (field manager gpustack); uncordoning applies without the annotation, which removes it."""
    meta: Obj = {"name": node}
    if on:
        meta["annotations"] = {CORDON_ANNOTATION: why}
    kube.apply_one({"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": {"unschedulable": on}})


@dataclass
class DrainResult:
    node: str
    evicted: list[str] = field(default_factory=list)
    cordoned: bool = False  # gpustack's cordon (the node was schedulable before): undone on failure


def drain(
    kube: Kube,
    node: str,
    *,
    timeout: float,
    wait_gone: bool = True,
    interval: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[str], None] | None = None,
    select: Callable[[Obj], bool] | None = None,
    why: str = "gpustack node remove",
) -> DrainResult:
    """Cordon ``node`` and evict its pods within ``timeout`` seconds; on failure uncordon it (when
    this drain cordoned it) and raise :class:`DrainError` naming what blocked. ``wait_gone=False``
    (a dead host): the evictions are accepted but nobody is left to stop the pods; they are removed
    with the Node object. ``select``: only these pods (:func:`classify`); ``why``: the cordon annotation."""
    obj = kube.get("v1", "Node", node)
    if obj is None:
        return DrainResult(node)  # not a node of the cluster (any more): nothing to drain
    result = DrainResult(node, cordoned=ours_to_uncordon(obj))
    if result.cordoned:
        cordon(kube, node, why=why)
    deadline = clock() + timeout
    try:
        pods = classify(node_pods(kube, node), select)
        if pods.unmanaged:
            raise DrainError(
                f"{node}: pods no controller manages: {', '.join(p.ref for p in pods.unmanaged)}",
                hint="evicting them would delete them for good: delete or move them, then run the removal again",
            )
        _evict_all(kube, pods.evict, deadline, interval, clock, sleep, result, progress)
        if wait_gone:
            _wait_gone(kube, node, [p.ref for p in pods.evict], deadline, interval, clock, sleep)
    except Exception as exc:  # a failed drain never leaves gpustack's cordon behind
        if result.cordoned:
            cordon(kube, node, on=False)
        if isinstance(exc, DrainError):
            exc.hint = (exc.hint or "") + (f"; {node} is uncordoned again" if result.cordoned else "")
        raise
    return result


def _evict_all(
    kube: Kube,
    pods: list[Pod],
    deadline: float,
    interval: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    result: DrainResult,
    progress: Callable[[str], None] | None,
) -> None:
    pending = list(pods)
    last: dict[str, Eviction] = {}
    while True:
        for pod in list(pending):
            answer = kube.evict(pod.name, pod.namespace)
            last[pod.ref] = answer
            if answer.outcome != "blocked":
                pending.remove(pod)
                result.evicted.append(pod.ref)
                if progress is not None:
                    progress(f"evicted {pod.ref}")
        if not pending:
            return
        if clock() >= deadline:
            blocked = "; ".join(f"{p.ref}: {last[p.ref].message}" for p in pending)
            raise DrainError(
                f"drain of {result.node} timed out: {blocked}",
                hint="a PodDisruptionBudget allows no eviction: scale the workload up or relax the budget",
            )
        sleep(min(interval, max(0.0, deadline - clock())))


def _wait_gone(
    kube: Kube,
    node: str,
    refs: list[str],
    deadline: float,
    interval: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    wanted = set(refs)
    while True:
        left = sorted(wanted & {_ref(p) for p in node_pods(kube, node)})
        if not left:
            return
        if clock() >= deadline:
            raise DrainError(
                f"drain of {node} timed out: still terminating: {', '.join(left)}",
                hint="a pod with a long termination grace period, or a kubelet that stopped answering",
            )
        sleep(min(interval, max(0.0, deadline - clock())))


def _ref(pod: Any) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"
