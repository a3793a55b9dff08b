"""What ``gpustack node patch`` waits for, through the Kubernetes API (gpustack.runners.kube):

    before the drain: the GPU jobs on the node finish (pods that request a GPU resource, owned by a Job
      or by no controller), up to a timeout -- then the patch is refused, unless --evict-gpu-pods
    after the reboot: the GPU stack back -- the node Ready with the boot id the host reports now (so a
      status the API server kept from before a reboot does not count), its GPU resources allocatable
      again (as many as before the drain), and the GPU Operator's pods on it that were there before the
      drain (driver, device plugin, dcgm-exporter, validator) Running and Ready

The pod filter is the GPU Operator's own (:func:`gpustack.diagnose.objects.requests_gpus`); the
operand labels are those `gpustack doctor`'s GPU checks read (gpustack/diagnose/checks_gpu.py).
Everything but the two wait loops is a pure function of the objects.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpustack.diagnose.checks_gpu import DRIVER_APP, GPU_RESOURCE, OPERATOR_EXPORTER, STANDALONE_EXPORTER, VALIDATOR_APP
from gpustack.diagnose.objects import GPU_RESOURCE_PREFIXES, pod_running_ready, requests_gpus

Obj = dict[str, Any]

#: the GPU Operator's device plugin DaemonSet's pods (app label; gpu-operator assets/state-device-plugin)
DEVICE_PLUGIN_APP = "nvidia-device-plugin-daemonset"
#: label -> value of each GPU stack pod the wait checks, by the name the messages use
OPERANDS: dict[str, tuple[str, str]] = {
    "driver": ("app", DRIVER_APP),
    "device-plugin": ("app", DEVICE_PLUGIN_APP),
    "dcgm-exporter": OPERATOR_EXPORTER,
    "dcgm-exporter (standalone)": STANDALONE_EXPORTER,
    "validator": ("app", VALIDATOR_APP),
}


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _ref(obj: Obj) -> str:
    return f"{_meta(obj).get('namespace')}/{_meta(obj).get('name')}"


def _controller_kind(pod: Obj) -> str:
    for ref in _meta(pod).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind") or "")
    return ""


def gpu_jobs(pods: Sequence[Obj]) -> list[str]:
    """The node's GPU jobs still running (pure): pods that request a GPU resource, owned by a Job or by no
    controller (a bare pod), not finished. A Deployment's or StatefulSet's GPU pod is a service: the drain
    moves it, its budget respected."""
    out = []
    for p in pods:
        if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed") or not requests_gpus(p):
            continue
        if _controller_kind(p) in ("Job", ""):
            out.append(_ref(p))
    return sorted(out)


def gpu_allocatable(node: Obj | None) -> int:
    """The node's allocatable GPU resources (whole, shared and MIG devices) (pure)."""
    alloc = ((node or {}).get("status") or {}).get("allocatable") or {}
    total = 0
    for k, v in alloc.items():
        if str(k).startswith(GPU_RESOURCE_PREFIXES):
            try:
                total += int(str(v))
            except ValueError:
                continue
    return total


def node_ready(node: Obj | None) -> bool:
    conds = ((node or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def boot_id(node: Obj | None) -> str:
    return str((((node or {}).get("status") or {}).get("nodeInfo") or {}).get("bootID") or "")


def operands(pods: Sequence[Obj]) -> dict[str, list[Obj]]:
    """The GPU stack's pods among a node's pods, by operand name (pure)."""
    out: dict[str, list[Obj]] = {}
    for p in pods:
        labels = _meta(p).get("labels") or {}
        for name, (key, value) in OPERANDS.items():
            if labels.get(key) == value:
                out.setdefault(name, []).append(p)
    return out


@dataclass
class GpuBaseline:
    """What the node had before the patch: the GPU stack must be back to it. Kept in the patch record."""

    gpus: int = 0
    operands: list[str] = field(default_factory=list)
    boot_id: str = ""

    @classmethod
    def read(cls, node: Obj | None, pods: Sequence[Obj]) -> GpuBaseline:
        return cls(gpu_allocatable(node), sorted(operands(pods)), boot_id(node))

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> GpuBaseline:
        return cls(
            int(rec.get("gpus") or 0), [str(o) for o in rec.get("operands") or []], str(rec.get("boot_id") or "")
        )

    def as_record(self) -> dict[str, Any]:
        return {"gpus": self.gpus, "operands": self.operands, "boot_id": self.boot_id}


def not_back(base: GpuBaseline, node: Obj | None, pods: Sequence[Obj], *, host_boot: str = "") -> list[str]:
    """What of the GPU stack is not back on the node yet (pure; empty: back). ``host_boot``: the boot id the host
    reported last; the Node must report the same (its kubelet has reported since that boot)."""
    if node is None:
        return ["the Node object is gone"]
    out = []
    if not node_ready(node):
        out.append("the node is not Ready")
    elif host_boot and boot_id(node) != host_boot:
        out.append("the kubelet has not reported since the host booted (the Node's boot id is the old one)")
    have = gpu_allocatable(node)
    if have < base.gpus:
        out.append(f"{have} of {base.gpus} GPU resource(s) allocatable ({GPU_RESOURCE})")
    now = operands(pods)
    for name in base.operands:
        mine = now.get(name) or []
        if not mine:
            out.append(f"no {name} pod on the node")
        elif not all(pod_running_ready(p) for p in mine):
            out.append(f"{name} pod {', '.join(_ref(p) for p in mine if not pod_running_ready(p))} not Ready")
    return out


Clock = Callable[[], float]
Sleep = Callable[[float], None]


def wait_until(
    probe: Callable[[], list[str]],
    *,
    timeout: float,
    interval: float = 10.0,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
    progress: Callable[[str], None] | None = None,
) -> list[str]:
    """Call ``probe`` until it returns nothing or ``timeout`` seconds passed; what it returned last (empty: done)."""
    deadline = clock() + timeout
    last: list[str] = []
    while True:
        left = probe()
        if not left:
            return []
        if left != last and progress is not None:
            progress("waiting: " + "; ".join(left))
        last = left
        if clock() >= deadline:
            return left
        sleep(min(interval, max(0.0, deadline - clock())))
