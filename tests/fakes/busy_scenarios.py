"""TEST DOUBLE DATA: a busy GPU cluster (issue 32 item 3) as the API server holds it: every worker GPU allocated, jobs
queued for GPUs and finished jobs that failed. Shared by the unit tests of K07/G10 (tests/unit/diagnose/
test_busy_queue.py) and the busy golden path (tests/prometheus/test_golden_busy.py); kept out of
tests/fakes/scenarios.py (capped).

Shapes: a pod the scheduler found no GPU for carries kube-scheduler's FitError in its ``PodScheduled`` condition
(``Unschedulable``; kubernetes ``pkg/scheduler/framework/types.go`` ``FitError.Error``: ``0/N nodes are available:
..., preemption: ...``) or only in its ``FailedScheduling`` event; a job pod whose container exited non-zero ends
``Failed`` with its container ``terminated``; an evicted pod ends ``Failed`` with reason ``Evicted``.
"""

from __future__ import annotations

from typing import Any

from tests.fakes import scenarios as sc

Obj = dict[str, Any]
#: what kube-scheduler writes into the PodScheduled condition of a pod no GPU is free for (3 nodes: the tainted
#: control plane and two full GPU workers)
QUEUED = ("0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
          "2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for "
          "scheduling, 2 No preemption victims found for incoming pod.")  # fmt: skip


def gpu_pod(name: str, ns: str, gpus: int, *, node: str = "", owner: tuple[str, str] = ("Job", "")) -> Obj:
    """A pod with one container limiting ``gpus`` ``nvidia.com/gpu``; Running on ``node``, or unscheduled ("")."""
    p = sc.pod(name, ns, node, labels={"job-name": owner[1] or name}, owner=(owner[0], owner[1] or name))
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if not node:
        del p["spec"]["nodeName"]
    return p


def pending(p: Obj, message: str = QUEUED, *, in_condition: bool = True) -> Obj:
    """``p`` Pending, unschedulable for ``message`` (in its PodScheduled condition, or -- ``in_condition=False`` --
    in no condition: only a FailedScheduling event says why)."""
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    p["status"] = {"phase": "Pending", "conditions": [{**cond, "message": message} if in_condition else cond]}
    return p


def failed(p: Obj, reason: str = "") -> Obj:
    """Ended Failed: its container exited 1, or (``reason``) the kubelet ended it without starting it."""
    p["status"] = {"phase": "Failed", "reason": reason, "message": "Allocate failed due to requested number of "
                   "devices unavailable for nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected"} if reason \
        else {"phase": "Failed", "containerStatuses": [{"name": "main", "ready": False, "restartCount": 0,
              "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}  # fmt: skip
    return p


def evicted(p: Obj) -> Obj:
    p["status"] = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}
    return p


def fillers(nodes: int) -> list[tuple[str, str, int]]:
    """``(pod, node, GPUs)`` of the jobs that take each worker's GPUs the workloads leave free."""
    held: dict[str, int] = {}
    for _, _, _, node, gpus in sc.gpu_workload_pods(nodes):
        held[node] = held.get(node, 0) + gpus
    return [(f"fill-{node}", node, sc.GPUS - n) for node, n in held.items()]


def busy_objects(nodes: int) -> list[Obj]:
    """What a busy cluster adds to ``healthy(nodes)``: the GPU workloads, topped up to 8 GPUs per worker by one more
    job each; two jobs queued for GPUs (``research/sweep-7`` for 2, ``ml-team/finetune-3`` for 8, whose reason is
    only in its FailedScheduling event); two finished jobs that failed (one evicted)."""
    out = sc.gpu_workloads(nodes)
    out += [
        gpu_pod(name, "ml-team", gpus, node=node, owner=("StatefulSet", "fill")) for name, node, gpus in fillers(nodes)
    ]
    event_only = pending(gpu_pod("finetune-3", "ml-team", 8), in_condition=False)
    out += [pending(gpu_pod("sweep-7", "research", 2)), event_only, sc._event(event_only, "FailedScheduling", QUEUED)]
    out += [failed(gpu_pod("train-old", "ml-team", 4, node=sc.node_name(1, nodes))),
            evicted(gpu_pod("eval-9", "inference", 1, node=sc.node_name(1, nodes)))]  # fmt: skip
    return out


def busy(nodes: int = 3) -> sc.Scenario:
    """``healthy(nodes)`` with :func:`busy_objects`."""
    s = sc.healthy(nodes)
    s.objects += busy_objects(nodes)
    return s
