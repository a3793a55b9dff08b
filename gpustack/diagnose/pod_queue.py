"""A busy GPU cluster's queue (issue 32 item 3): which pods are the normal state of a shared GPU cluster, not a
failure, and how many GPUs are free for verify's test pod. Pure functions of pods and nodes.

The rule K07 applies (docs/checks.md, "A busy cluster's queue"):

- every problem of a pod in gpustack's own namespaces (:data:`SYSTEM_NAMESPACES`) stays a failure: those pods are
  the cluster;
- a workload pod Pending because the scheduler found too few GPUs (``Insufficient nvidia.com/gpu`` or a MIG / shared
  GPU resource) is **queued**, unless it asks for more of that resource than any node has: that one never starts;
- a workload pod that ended ``Failed`` is **finished**: its work failed, not the cluster (the Job controller counts
  it against ``backoffLimit``), unless the kubelet refused to admit it (``UnexpectedAdmissionError``,
  ``OutOf<resource>``: the node advertised a device it could not hand out);
- anything else (Pending for another reason, a crash loop, an image that does not pull) is a failure as before.

The scheduler's reasons are read from the pod's ``PodScheduled`` condition (kube-scheduler writes its FitError there:
``0/3 nodes are available: 1 node(s) had untolerated taint {...}, 2 Insufficient nvidia.com/gpu. preemption: ...``)
or, when the condition carries none, from the pod's last ``FailedScheduling`` event.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from gpustack.constants import FLANNEL_NAMESPACE, GPU_NAMESPACE, MONITORING_NAMESPACE, SYSTEM_NAMESPACE
from gpustack.diagnose.objects import (
    GPU_RESOURCE_PREFIXES,
    as_dict,
    as_list,
    conditions,
    node_of,
    ns_of,
    ref,
)

#: the namespaces whose pods are the cluster itself: any problem there is a failure
SYSTEM_NAMESPACES = ("kube-system", FLANNEL_NAMESPACE, GPU_NAMESPACE, MONITORING_NAMESPACE, SYSTEM_NAMESPACE)
#: the reasons list of kube-scheduler's FitError, before its preemption part
_REASONS = re.compile(r"nodes are available: (?P<reasons>.*?)(?:\. preemption:|\.?$)", re.S)
_INSUFFICIENT = re.compile(r"Insufficient (?P<resource>[A-Za-z0-9./_-]+?)(?=[.,]?(?:\s|$))")
#: a kubelet's refusal to admit a pod (pkg/kubelet/lifecycle: ``OutOf<resource>``, device manager errors)
ADMISSION_REFUSED = re.compile(r"^(?:UnexpectedAdmissionError|OutOf\S+)$")


def is_gpu_resource(name: str) -> bool:
    return name.startswith(GPU_RESOURCE_PREFIXES)


def _quantity(value: Any) -> int:
    """A whole count of an extended resource (``"2"``, 2); anything else 0 (GPU resources take no fractions)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text) if text.isdigit() else 0


def _container_gpus(container: Any) -> dict[str, int]:
    res = as_dict(as_dict(container).get("resources"))
    requests, limits = as_dict(res.get("requests")), as_dict(res.get("limits"))
    out: dict[str, int] = {}
    for name in {*requests, *limits}:  # an extended resource's request defaults to its limit
        if is_gpu_resource(str(name)):
            out[str(name)] = _quantity(requests[name] if name in requests else limits[name])
    return out


def gpu_requests(pod: Any) -> dict[str, int]:
    """The GPU resources a pod takes from its node, as the scheduler counts them: the larger of the sum over its
    containers and any one init container (init containers run one at a time)."""
    spec = as_dict(as_dict(pod).get("spec"))
    out: dict[str, int] = {}
    for c in as_list(spec.get("containers")):
        for name, n in _container_gpus(c).items():
            out[name] = out.get(name, 0) + n
    for c in as_list(spec.get("initContainers")):
        for name, n in _container_gpus(c).items():
            out[name] = max(out.get(name, 0), n)
    return {k: v for k, v in out.items() if v > 0}


def holds_gpus(pod: Any) -> bool:
    """The pod holds its GPUs now: scheduled to a node and not ended (a Succeeded or Failed pod gives them back)."""
    phase = as_dict(as_dict(pod).get("status")).get("phase")
    return bool(node_of(pod)) and phase not in ("Succeeded", "Failed") and bool(gpu_requests(pod))


def scheduler_message(pod: Any, last_event: str = "") -> str:
    """Why the scheduler has not placed the pod: its PodScheduled condition's message, else its last event's."""
    cond = as_dict(conditions(pod).get("PodScheduled"))
    message = str(cond.get("message") or "") if cond.get("status") == "False" else ""
    return message or (last_event if "FailedScheduling" in last_event or "nodes are available" in last_event else "")


def insufficient(message: str) -> set[str]:
    """The resources kube-scheduler found too little of, from its FitError message."""
    m = _REASONS.search(message)
    return {x.group("resource") for x in _INSUFFICIENT.finditer(m.group("reasons") if m else message)}


def largest_allocatable(nodes: Iterable[Any]) -> dict[str, int]:
    """The most of each GPU resource any one node can give (its ``status.allocatable``)."""
    out: dict[str, int] = {}
    for n in nodes:
        for name, value in as_dict(as_dict(as_dict(n).get("status")).get("allocatable")).items():
            if is_gpu_resource(str(name)):
                out[str(name)] = max(out.get(str(name), 0), _quantity(value))
    return out


def queue_state(pod: Any, problem: str, *, last_event: str, largest: dict[str, int]) -> str | None:
    """``"queued"`` or ``"finished"`` when ``pod`` (failing for ``problem``, :func:`objects.pod_problem`) is the normal
    state of a busy GPU cluster (the module docstring's rule); None when it is a failure."""
    if ns_of(pod) in SYSTEM_NAMESPACES:
        return None
    status = as_dict(as_dict(pod).get("status"))
    phase = status.get("phase")
    if phase == "Failed":
        return None if ADMISSION_REFUSED.match(str(status.get("reason") or "")) else "finished"
    if phase != "Pending" or node_of(pod):
        return None  # scheduled: a container problem, not the queue
    short = insufficient(scheduler_message(pod, last_event))
    wants = gpu_requests(pod)
    gpus_short = {r for r in short if is_gpu_resource(r)}
    if not gpus_short or not gpus_short <= set(wants):
        return None
    if any(wants[r] > largest.get(r, 0) for r in gpus_short):
        return None  # more than any node has: it never starts
    return "queued"


def never_fits(pod: Any, largest: dict[str, int]) -> str:
    """Why a GPU pod can never be scheduled (it asks for more than any node has), or ""."""
    too_big = [f"{n} {r} (the largest node has {largest.get(r, 0)})" for r, n in sorted(gpu_requests(pod).items())
               if n > largest.get(r, 0)]  # fmt: skip
    return f"{ref(pod)} requests {', '.join(too_big)}" if too_big else ""


def free_gpus(nodes: Iterable[Any], pods: Iterable[Any], resource: str) -> tuple[int, int, list[str]]:
    """(free, allocatable, the pods holding them) of ``resource`` over ``nodes``: allocatable minus what the pods
    scheduled there and not ended request (the scheduler's own accounting, NodeResourcesFit)."""
    names: dict[str, int] = {}
    for n in nodes:
        name = str(as_dict(as_dict(n).get("metadata")).get("name") or "")
        names[name] = _quantity(as_dict(as_dict(as_dict(n).get("status")).get("allocatable")).get(resource))
    used, holders = 0, []
    for p in pods:
        if node_of(p) in names and holds_gpus(p) and resource in (req := gpu_requests(p)):
            used += req[resource]
            holders.append(f"{ref(p)} ({req[resource]})")
    total = sum(names.values())
    return max(0, total - used), total, sorted(holders)
