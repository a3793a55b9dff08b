"""Series of pods sharing one GPU as dcgm-exporter 4.8.2 prints them with ``--kubernetes-virtual-gpus=true``,
after gpustack's ServiceMonitor (``honorLabels: false``: the workload's pod/namespace/container arrive as
``exported_*``), for promtool rule tests.

From NVIDIA/dcgm-exporter tag 4.5.3-4.8.2 (the exporter of the pinned chart 4.8.2; PR #594, commit fb5e3dc8),
``internal/pkg/transformation/kubernetes.go`` ``PodMapper.Process`` with ``KubernetesVirtualGPUs``:

- ``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_FB_USED`` (``isPerProcessMetric``, ``process_metrics.go``) on a GPU
  pods hold: the **device series** unchanged (no pod labels: "original device-level metric") plus **one series per
  pod** (``createPerProcessMetrics``) with ``pod``, ``namespace``, ``container``, ``pod_uid`` (always) and ``vgpu``
  (the device plugin's ``::N`` replica), valued with the pod's processes' SM utilisation (``%``) and memory (MiB) from
  NVML, the processes mapped to pods through ``/proc/<pid>/cgroup`` (``pidmapper.go``); a pod none of whose
  processes could be mapped reads 0 (``buildIdlePodValues``): every pod when the exporter lacks ``hostPID``;
- every other field: one copy **per pod**, with the device's value, ``pod``/``namespace``/``container`` and
  ``vgpu`` (``pod_uid`` only with ``--kubernetes-enable-pod-uid``, which gpustack does not set), and no device series;
- a GPU no pod holds: the device series of every field;
- a time-sliced MIG instance (:attr:`SharedGPU.mig`): the same per instance, each series with the instance's
  ``GPU_I_PROFILE`` and ``GPU_I_ID`` (``gpuMetricsFormat``'s MIG labels). Not confirmed against an exporter on a
  shared MIG instance (no recording exists here); gpustack's expressions are proven on this shape *and* on one series
  per instance (tests/prometheus/rules_tests/mig.yaml), so they hold whichever the exporter prints.

Labels in ``rendermetrics/render_metrics.go`` ``gpuMetricsFormat``: gpu, UUID, pci_bus_id, device, modelName,
Hostname (this tag's host label), the counters CSV's label fields (DCGM_FI_DRIVER_VERSION), then the attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DRIVER = "595.91.07"
TARGET = {"job": "dcgm-exporter", "namespace": "gpu-operator", "pod": "dcgm-exporter-7xk2p", "container": "exporter",
          "service": "dcgm-exporter", "endpoint": "metrics"}  # fmt: skip
PER_PROCESS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")


@dataclass(frozen=True)
class SharingPod:
    namespace: str
    name: str
    uid: str
    vgpu: str  # the device plugin's replica (``GPU-<uuid>::<vgpu>``)
    util: float  # its processes' SM utilisation, % (0: unmapped)
    fb_used: float  # its processes' memory, MiB (0: unmapped)


@dataclass(frozen=True)
class SharedGPU:
    node: str
    index: int
    uuid: str
    model: str
    device: dict[str, float]  # field -> the device's value
    pods: tuple[SharingPod, ...] = field(default_factory=tuple)
    mig: tuple[str, str] | tuple[()] = ()  # a MIG GPU instance: (GPU_I_PROFILE, GPU_I_ID), labels after modelName


def _labels(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def gpu_series(gpu: SharedGPU, instance: str, samples: int) -> list[dict[str, str]]:
    """promtool ``input_series`` for one GPU, ``samples`` constant samples one ``interval`` apart."""
    base = {**TARGET, "instance": instance, "node": gpu.node, "gpu": str(gpu.index), "UUID": gpu.uuid,
            "pci_bus_id": f"00000000:{0x18 + gpu.index:02X}:00.0", "device": f"nvidia{gpu.index}",
            "modelName": gpu.model, **dict(zip(("GPU_I_PROFILE", "GPU_I_ID"), gpu.mig, strict=False)),
            "Hostname": gpu.node, "DCGM_FI_DRIVER_VERSION": DRIVER}  # fmt: skip
    out: list[dict[str, str]] = []

    def add(metric: str, labels: dict[str, str], value: float) -> None:
        out.append({"series": metric + _labels(labels), "values": f"{value:g}x{samples}"})

    for metric, value in gpu.device.items():
        if not gpu.pods or metric in PER_PROCESS:
            add(metric, base, value)
        for pod in gpu.pods:
            workload = {"exported_container": "main", "exported_namespace": pod.namespace, "exported_pod": pod.name}
            if metric in PER_PROCESS:
                own = pod.util if metric == "DCGM_FI_DEV_GPU_UTIL" else pod.fb_used
                add(metric, {**base, **workload, "pod_uid": pod.uid, "vgpu": pod.vgpu}, own)
            else:
                add(metric, {**base, **workload, "vgpu": pod.vgpu}, value)
    return out
