"""The replayed dcgm-exporter's series for pods sharing one time-sliced GPU (:attr:`NodeSpec.shared`), as
dcgm-exporter 4.8.2 prints them with ``--kubernetes-virtual-gpus=true`` (gpustack sets it whenever a node
time-slices; with ``hostPID``, so each process is mapped to its pod).

NVIDIA/dcgm-exporter tag 4.5.3-4.8.2 (the exporter of the pinned chart 4.8.2), PR #594 (commit fb5e3dc8),
``internal/pkg/transformation/kubernetes.go`` ``PodMapper.Process``: for ``DCGM_FI_DEV_GPU_UTIL`` and
``DCGM_FI_DEV_FB_USED`` (``process_metrics.go`` ``isPerProcessMetric``) the device series stays, without pod labels,
and ``createPerProcessMetrics`` adds one series per pod with ``container``, ``namespace``, ``pod``, ``pod_uid`` and
``vgpu`` valued with the pod's processes' SM utilisation / memory in MiB (NVML ``GetDeviceProcessUtilization``,
``GetDeviceProcessMemory``; 0 for a pod none of whose processes was mapped, ``buildIdlePodValues``). Every other
field is copied per pod with the device's value and ``container``, ``namespace``, ``pod``, ``vgpu`` (``pod_uid``
only with ``--kubernetes-enable-pod-uid``), and the device series is dropped. Attributes print in key order
(``rendermetrics/render_metrics.go``: Go templates range over maps sorted).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

PER_PROCESS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")


def _own(name: str, device: float, pods: Sequence[Any], pod: Any) -> float:
    """A pod's per-process value: the working pods split the device's utilisation and memory; an idle pod has a
    context (300 MiB) and no SM time."""
    busy = [p for p in pods if not p.idle]
    if name == "DCGM_FI_DEV_GPU_UTIL":
        return device // len(busy) if pod in busy and busy else 0
    if pod.idle:
        return min(300.0, device)
    return (device - 300 * (len(pods) - len(busy))) // max(len(busy), 1)


def shared_series(
    name: str, value: float, extra: Mapping[str, str], pods: Sequence[Any], uid: Callable[[str], str]
) -> list[tuple[float, dict[str, str]]]:
    """``(value, attributes)`` of every series of field ``name`` (the device's ``value``, its ``extra`` labels) on a
    GPU the ``pods`` (:class:`PodRef`, in the device plugin's replica order) share; ``uid``: a pod name's UID."""
    out: list[tuple[float, dict[str, str]]] = []
    if name in PER_PROCESS:
        out.append((value, dict(sorted(extra.items()))))
    for vgpu, pod in enumerate(pods):
        attrs = {**extra, "container": pod.container, "namespace": pod.namespace, "pod": pod.name, "vgpu": str(vgpu)}
        if name in PER_PROCESS:
            out.append((_own(name, value, pods, pod), dict(sorted({**attrs, "pod_uid": uid(pod.name)}.items()))))
        else:
            out.append((value, dict(sorted(attrs.items()))))
    return out
