"""A stand-in for dcgm-exporter (and kube-state-metrics) serving realistic exposition text.

One :class:`ReplayServer` plays one GPU node: 8 x "NVIDIA H100 80GB HBM3" with dcgm-exporter 4.x's
label set (gpu, UUID, pci_bus_id, device, modelName, the host label, DCGM_FI_DRIVER_VERSION, and
container/namespace/pod/pod_uid on GPUs allocated to pods), the metrics ``values/dcgm-counters.csv``
enables, and values that move with time: utilisation waves, an energy counter that only grows,
temperatures following load, a PCIe replay counter creeping on one GPU.

Scenarios (switch at start or later with ``GET /-/scenario?name=...``): ``healthy``, ``xid79``
(GPU 3 fell off the bus), ``overheat`` (GPU 5), ``row_remap_failure`` (GPU 1), ``fb_full`` (GPU 0),
``gpu_missing`` (GPU 7 absent: 7 GPUs instead of 8), ``xid48_app13`` (GPU 2: a double-bit ECC XID 48,
then application XID 13s: the last-XID gauge shows 13, the per-code count both), ``xid48`` (GPU 2: XID 48
alone, gauge and count), ``remap_growth`` (GPU 6: rows remapped after uncorrectable errors, one more every
5 seconds, each pending until a GPU reset: the uncorrectable count holds InfoROM entries, pending included).
:attr:`NodeSpec.unhealthy_gpus` makes kube-state-metrics report fewer GPUs allocatable than installed;
:attr:`NodeSpec.counters_without` leaves fields out of the counters list (an older exporter, or a list
without ``DCGM_EXP_XID_ERRORS_COUNT``, as both lists dcgm-exporter ships).

Pods come and go: :meth:`DcgmReplay.assign` gives a GPU to a pod (or frees it), as dcgm-exporter learns
from the kubelet's pod-resources API. A :class:`PodRef` with ``load=True`` is ``gpustack verify --load``'s
dcgmproftester (``-t 1004``, FP16 GEMMs): its GPU at full utilisation with the Tensor Cores near saturation.

MIG (:attr:`NodeSpec.mig`, a GI profile such as ``1g.10gb``): every GPU of the node is partitioned as the MIG
manager's ``all-<profile>`` does it, and dcgm-exporter prints one series per GPU instance, in its MIG label layout
(``GPU_I_PROFILE``, ``GPU_I_ID`` after modelName; ``gpu``/UUID the parent's): GPU-level fields repeated on every
instance (DCGM answers them with the parent's value), the instance-level ones per instance (engine, tensor and DRAM
activity, framebuffer, XID), ``DCGM_FI_DEV_GPU_UTIL`` and ``MEM_COPY_UTIL`` left out (not reported under MIG); a
pod's labels only on the instance it holds (:attr:`NodeSpec.mig_pods`, keyed by (gpu, GI id)). The shape is checked
against the exporter sample tests/fixtures/mig/dcgm-exporter-h100-all-1g.10gb-one-pod.prom by
tests/contract/test_replayed_and_recorded_contract.py.

What this module renders is served over loopback HTTP by tests/prometheus/replay_server.py (:class:`DcgmReplay`,
:class:`KsmReplay`; run by hand: ``python -m tests.prometheus.replay_server --node node-a --scenario xid79``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpustack.config import mig as mig_table
from gpustack.monitoring import gpu_models
from gpustack.monitoring.counters import CounterFile

from .replay_shared import shared_series

SCENARIOS = (
    "healthy",
    "xid79",
    "overheat",
    "row_remap_failure",
    "fb_full",
    "gpu_missing",
    "xid48_app13",
    "xid48",
    "remap_growth",
)
LOOPBACK = "127.0.0.1"
MODEL = "NVIDIA H100 80GB HBM3"
DRIVER = "595.91.07"
FB_TOTAL_MIB = 81559
#: framebuffer of the other models a node may have (NodeSpec.model; nvidia-smi's FB Memory Usage Total, illustrative)
MODEL_FB_MIB = {"NVIDIA GeForce RTX 4090": 24564, "Tesla T4": 15360, "NVIDIA L4": 23034}
FB_RESERVED_MIB = 594
SM_CLOCK_MAX_MHZ = 1980
SM_CLOCK_IDLE_MHZ = 345
MEM_CLOCK_MHZ = 2619
TENSOR_UNDER_LOAD = 0.93  # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE under dcgmproftester -t 1004 on an H100
PCI_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")  # HGX H100 8-GPU board layout
XID_TEXT = {
    0: "No Error",
    13: "Graphics Engine Exception",
    48: "Double Bit ECC Error",
    79: "GPU has fallen off the bus",
}
XID_WINDOW_MS = "300000"  # dcgm-exporter's default --xid-count-window-size
# DCGM fields dcgm-exporter prints with %f (doubles); everything else is an int64 printed with %d.
DOUBLE_FIELDS = frozenset(
    {
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    }
)
KSM_HELP = {
    "kube_node_status_allocatable": "The allocatable for different resources of a node that are available for scheduling.",
    "kube_pod_container_resource_requests": "The number of requested request resource by a container.",
    "kube_node_status_capacity": "The capacity for different resources of a node.",
    "kube_pod_status_phase": "The pods current phase.",
    "kube_namespace_labels": "Kubernetes labels converted to Prometheus labels.",
    "kube_node_labels": "Kubernetes labels converted to Prometheus labels.",
}
#: namespaces every cluster has (kube-state-metrics exports kube_namespace_labels for each namespace, STABLE,
#: docs/metrics/cluster/namespace-metrics.md; ``label_*`` only for labels in metricLabelsAllowlist)
SYSTEM_NAMESPACES = ("default", "kube-system")


@dataclass(frozen=True)
class PodRef:
    """A workload pod holding GPUs (what dcgm-exporter learns from the kubelet pod-resources API)."""

    namespace: str
    name: str
    container: str
    idle: bool = False  # holds the GPU but does not use it
    load: bool = False  # dcgmproftester -t 1004: Tensor Core activity ~0.93, utilisation 100%


@dataclass
class NodeSpec:
    """One simulated GPU node."""

    node: str
    pods: Mapping[int, PodRef]
    host_label: str = "hostname"  # dcgm-exporter before the 2026 rename printed "Hostname"
    gpus: int = 8
    scenario: str = "healthy"
    unhealthy_gpus: int = 0  # GPUs the device plugin withdrew: allocatable = gpus - unhealthy_gpus
    mig: str = ""  # a GI profile (1g.10gb): every GPU at all-<profile>; "" = whole GPUs
    mig_pods: Mapping[tuple[int, int], PodRef] = field(default_factory=dict)  # (gpu, GI id) -> pod holding it
    replicas: int = 1  # time-slicing: allocatable = GPUs x replicas (kube-state-metrics)
    counters_without: tuple[str, ...] = ()  # fields this node's exporter does not emit
    model: str = MODEL  # its GPUs' model: the fields it lacks are left out (gpustack/monitoring/gpu_models.py)
    shared: Mapping[int, tuple[PodRef, ...]] = field(default_factory=dict)  # time-sliced GPU -> pods (replay_shared)


@dataclass(frozen=True)
class Sample:
    """One value for one GPU, with labels beyond the standard set (XID's err_code/err_msg)."""

    value: float
    extra: Mapping[str, str] = field(default_factory=dict)


def gpu_uuid(node: str, gpu: int) -> str:
    """A stable, realistic-looking GPU UUID for ``node``/``gpu``."""
    h = hashlib.sha256(f"{node}/{gpu}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def default_nodes() -> list[NodeSpec]:
    """The two nodes the harness runs: a mix of training, inference, idle and free GPUs."""
    train_a = PodRef("ml-team", "train-llama-0", "trainer")
    train_b = PodRef("ml-team", "train-mixtral-0", "trainer")
    return [
        NodeSpec(
            node="node-a",
            host_label="Hostname",
            pods={
                **dict.fromkeys(range(4), train_a),
                4: PodRef("inference", "vllm-0", "vllm"),
                5: PodRef("inference", "vllm-1", "vllm"),
                6: PodRef("research", "notebook-alice-0", "notebook", idle=True),
            },
        ),
        NodeSpec(
            node="node-b",
            pods={
                **dict.fromkeys(range(4), train_b),
                6: PodRef("research", "notebook-bob-0", "notebook", idle=True),
                7: PodRef("inference", "embed-0", "server"),
            },
        ),
    ]


class GpuState:
    """Values of one GPU at time ``t`` (seconds since the exporter started) under a scenario."""

    def __init__(self, spec: NodeSpec, gpu: int, t: float) -> None:
        self.spec, self.gpu, self.t = spec, gpu, t
        self.pod = spec.pods.get(gpu)
        self.busy = self.pod is not None and not self.pod.idle
        if spec.mig:  # the parent GPU works when a pod works on one of its instances
            self.busy = any(g == gpu and not p.idle for (g, _), p in spec.mig_pods.items())
        if spec.shared.get(gpu):  # time-sliced: the GPU works when one of the pods sharing it does
            self.busy = any(not p.idle for p in spec.shared[gpu])
        self.loaded = self.busy and self.pod is not None and self.pod.load
        self.hot = spec.scenario == "overheat" and gpu == 5

    def _is(self, scenario: str, gpu: int) -> bool:
        return self.spec.scenario == scenario and self.gpu == gpu

    @property
    def util(self) -> float:
        if self.hot:
            return 95.0
        if self.loaded:
            return 100.0
        if not self.busy:
            return 0.0
        return round(70 + 25 * math.sin(2 * math.pi * self.t / 40 + self.gpu))

    @property
    def temp(self) -> float:
        if self.hot:
            return 91.0
        return round(34 + 0.45 * self.util + math.sin(self.t / 300 + self.gpu))

    @property
    def power(self) -> float:
        return 72.5 + 6.0 * self.util + 0.37 * self.gpu

    @property
    def fb_total(self) -> int:
        return MODEL_FB_MIB.get(self.spec.model, FB_TOTAL_MIB)

    @property
    def fb_used(self) -> float:
        usable = self.fb_total - FB_RESERVED_MIB
        if self._is("fb_full", 0):
            return usable - 1210
        if self.busy:
            return min(61234, 0.75 * usable) + 200 * math.sin(self.t / 30)
        return 1530.0 if self.pod else 0.0

    @property
    def clock_reasons(self) -> int:
        if self.hot:
            return 0x20 | 0x40  # SW + HW thermal slowdown
        if not self.busy:
            return 0x1  # GPU idle
        return 0x4 if self.util > 90 else 0  # SW power cap at full load is normal

    def xid_counts(self) -> list[Sample]:
        """DCGM_EXP_XID_ERRORS_COUNT: one series per XID code in the window, or one zero series."""
        window = {"window_size_in_ms": XID_WINDOW_MS}
        if self._is("xid79", 3):
            return [Sample(1, {**window, "xid": "79"})]
        if self._is("xid48_app13", 2):
            return [Sample(1, {**window, "xid": "48"}), Sample(3, {**window, "xid": "13"})]
        if self._is("xid48", 2):
            return [Sample(1, {**window, "xid": "48"})]
        return [Sample(0, window)]

    def values(self) -> dict[str, Sample | list[Sample]]:
        """Every metric gpustack's CSV may enable, for this GPU (a list: several series for it)."""
        util, gr = self.util, self.util / 100 * 0.97
        xid = 79 if self._is("xid79", 3) else 13 if self._is("xid48_app13", 2) else 48 if self._is("xid48", 2) else 0
        failed = self._is("row_remap_failure", 1)
        pending = failed or self._is("remap_growth", 6)
        uncorrectable = 9 if failed else 2 + int(self.t // 5) if self._is("remap_growth", 6) else 0
        fb_used = int(self.fb_used)
        return {
            "DCGM_FI_DEV_SM_CLOCK": Sample(1275 if self.hot else SM_CLOCK_MAX_MHZ if util > 5 else SM_CLOCK_IDLE_MHZ),
            "DCGM_FI_DEV_MEM_CLOCK": Sample(MEM_CLOCK_MHZ),
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": Sample(self.clock_reasons),
            "DCGM_FI_DEV_MEMORY_TEMP": Sample(97 if self.hot else self.temp + 4),
            "DCGM_FI_DEV_GPU_TEMP": Sample(self.temp),
            "DCGM_FI_DEV_POWER_USAGE": Sample(self.power),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": Sample(int(4.1e10 + 1000 * self.power * self.t)),
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": Sample(3 + int(self.t // 20) if self.gpu == 2 else 0),
            "DCGM_FI_PROF_PCIE_TX_BYTES": Sample(int(2.4e9 * gr + 1.2e6)),
            "DCGM_FI_PROF_PCIE_RX_BYTES": Sample(int(6.1e9 * gr + 2.3e6)),
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": Sample(int(118000 * gr)),
            "DCGM_FI_DEV_GPU_UTIL": Sample(util),
            "DCGM_FI_DEV_MEM_COPY_UTIL": Sample(round(util * 0.45)),
            "DCGM_FI_DEV_XID_ERRORS": Sample(xid, {"err_code": str(xid), "err_msg": XID_TEXT[xid]}),
            "DCGM_EXP_XID_ERRORS_COUNT": self.xid_counts(),
            "DCGM_FI_DEV_FB_FREE": Sample(self.fb_total - FB_RESERVED_MIB - fb_used),
            "DCGM_FI_DEV_FB_USED": Sample(fb_used),
            "DCGM_FI_DEV_FB_RESERVED": Sample(FB_RESERVED_MIB),
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": Sample(uncorrectable),
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": Sample(2 if self.gpu == 4 else 0),
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": Sample(1 if failed else 0),
            "DCGM_FI_DEV_ROW_REMAP_PENDING": Sample(1 if pending else 0),
            "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION": Sample(0),  # NONE: no scenario has the driver ask for recovery
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": Sample(gr),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": Sample(TENSOR_UNDER_LOAD if self.loaded else gr * 0.62),
            "DCGM_FI_PROF_DRAM_ACTIVE": Sample(gr * 0.41),
        }


def _label_text(labels: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def gpu_labels(spec: NodeSpec, gpu: int, label_fields: Mapping[str, str]) -> dict[str, str]:
    """dcgm-exporter's labels in its own order: identity, host, CSV ``label`` fields, pod attributes."""
    labels = {
        "gpu": str(gpu),
        "UUID": gpu_uuid(spec.node, gpu),
        "pci_bus_id": f"00000000:{PCI_BUSES[gpu % len(PCI_BUSES)]}:00.0",
        "device": f"nvidia{gpu}",
        "modelName": spec.model,
        spec.host_label: spec.node,
        **label_fields,
    }
    return labels


def _attributes(pod: PodRef | None, extra: Mapping[str, str]) -> dict[str, str]:
    attrs = dict(extra)
    if pod:
        attrs.update(container=pod.container, namespace=pod.namespace, pod=pod.name, pod_uid="")
    return dict(sorted(attrs.items()))  # Go templates range over maps in key order


def _format(name: str, value: float) -> str:
    return f"{value:f}" if name in DOUBLE_FIELDS else str(int(value))


def visible_gpus(spec: NodeSpec) -> list[int]:
    """GPUs the exporter reports (``gpu_missing`` drops the last one)."""
    count = spec.gpus - 1 if spec.scenario == "gpu_missing" else spec.gpus
    return list(range(count))


#: GPU-instance fields (DCGM entity GPU_I / GPU_CI: dcgm_fields.cpp); every other field is GPU-level and repeated
INSTANCE_FIELDS = frozenset({"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
                             "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
                             "DCGM_FI_DEV_XID_ERRORS"})  # fmt: skip
#: not reported for MIG instances (blank values, which dcgm-exporter skips; dcgm-exporter#430)
NOT_UNDER_MIG = frozenset({"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"})
#: the first GI id of a profile's instances (illustrative: the exporter sample's 1g.10gb instances are 7-13)
FIRST_GI = {1: 7, 2: 3, 3: 1, 4: 5, 7: 0}
INSTANCE_FB_RESERVED_MIB = 0
INSTANCE_MIB = {"1g.10gb": 9984, "2g.20gb": 20096, "3g.40gb": 40320}


def mig_instances(spec: NodeSpec) -> list[int]:
    """The GI ids of one GPU of ``spec`` (all-<profile> on an H100 80GB)."""
    count = (mig_table.layout("0x2330", f"all-{spec.mig}") or {}).get(spec.mig, 0)
    first = FIRST_GI.get(mig_table.compute_slices(spec.mig), 1)
    return list(range(first, first + count))


def instance_values(spec: NodeSpec, gpu: int, gi: int, t: float) -> dict[str, Sample]:
    """The instance-level fields of GPU instance ``gi``: busy when a working pod holds it."""
    pod = spec.mig_pods.get((gpu, gi))
    busy = pod is not None and not pod.idle
    gr = 0.978 if busy else 0.0
    # an instance's framebuffer in MiB: GFD's nvidia.com/mig-<profile>.memory on an H100 80GB (NVIDIA docs
    # mig-mixed-node-labels.json), else its share of the GPU's eight memory slices
    total = INSTANCE_MIB.get(spec.mig) or FB_TOTAL_MIB * int(spec.mig.split("g.")[1].removesuffix("gb")) // 80
    used = 7813 + int(50 * math.sin(t / 30)) if busy else (1530 if pod else 13)
    return {
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": Sample(gr),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": Sample(gr * 0.62),
        "DCGM_FI_PROF_DRAM_ACTIVE": Sample(gr * 0.41),
        "DCGM_FI_DEV_FB_USED": Sample(used),
        "DCGM_FI_DEV_FB_FREE": Sample(total - used - INSTANCE_FB_RESERVED_MIB),
        "DCGM_FI_DEV_FB_RESERVED": Sample(INSTANCE_FB_RESERVED_MIB),
        "DCGM_FI_DEV_XID_ERRORS": Sample(0, {"err_code": "0", "err_msg": XID_TEXT[0]}),
    }


def render_dcgm(spec: NodeSpec, counters: CounterFile, t: float) -> str:
    """Exposition text for every metric in ``counters``, as dcgm-exporter would print it."""
    label_fields = {name: DRIVER for name in counters.labels}
    states = {gpu: GpuState(spec, gpu, t) for gpu in visible_gpus(spec)}
    values = {gpu: state.values() for gpu, state in states.items()}
    lines: list[str] = []
    for counter in counters.counters:
        if counter.is_label or not gpu_models.reports(spec.model, counter.name):
            continue  # blank for this model: dcgm-exporter prints no series and no HELP (gpu_collector.go toMetric)
        lines += [f"# HELP {counter.name} {counter.help}", f"# TYPE {counter.name} {counter.prom_type}"]
        for gpu, state in states.items():
            if counter.name not in values[gpu]:
                raise KeyError(f"replay exporter has no simulation for {counter.name}: add it to GpuState.values()")
            if spec.mig:
                lines += _mig_lines(spec, gpu, counter.name, values[gpu][counter.name], label_fields, t)
                continue
            found = values[gpu][counter.name]
            for sample in found if isinstance(found, list) else [found]:
                if spec.shared.get(gpu):  # dcgm-exporter 4.8.2 --kubernetes-virtual-gpus (replay_shared.py)
                    for value, attrs in shared_series(counter.name, sample.value, sample.extra, spec.shared[gpu],
                                                      lambda name: gpu_uuid(name, 0)[4:]):  # fmt: skip
                        labels = {**gpu_labels(spec, gpu, label_fields), **attrs}
                        lines.append(f"{counter.name}{{{_label_text(labels)}}} {_format(counter.name, value)}")
                    continue
                labels = {**gpu_labels(spec, gpu, label_fields), **_attributes(state.pod, sample.extra)}
                lines.append(f"{counter.name}{{{_label_text(labels)}}} {_format(counter.name, sample.value)}")
    return "\n".join(lines) + "\n"


def _mig_lines(spec: NodeSpec, gpu: int, name: str, parent: Sample | list[Sample], label_fields: Mapping[str, str],
               t: float) -> list[str]:  # fmt: skip
    """One GPU's series of ``name`` under MIG: one per GPU instance (render_metrics.go gpuMetricsFormat: the
    GPU_I_PROFILE and GPU_I_ID labels after modelName)."""
    if name in NOT_UNDER_MIG:
        return []
    out = []
    for gi in mig_instances(spec):
        found = instance_values(spec, gpu, gi, t)[name] if name in INSTANCE_FIELDS else parent
        base = gpu_labels(spec, gpu, label_fields)
        host = {k: base.pop(k) for k in list(base) if k == spec.host_label}
        rest = {k: base.pop(k) for k in list(base) if k not in ("gpu", "UUID", "pci_bus_id", "device", "modelName")}
        for sample in found if isinstance(found, list) else [found]:
            labels = {**base, "GPU_I_PROFILE": spec.mig, "GPU_I_ID": str(gi), **host, **rest,
                      **_attributes(spec.mig_pods.get((gpu, gi)), sample.extra)}  # fmt: skip
            out.append(f"{name}{{{_label_text(labels)}}} {_format(name, sample.value)}")
    return out


def _ksm_header(name: str) -> list[str]:
    return [f"# HELP {name} {KSM_HELP[name]}", f"# TYPE {name} gauge"]


def _gpus_per_pod(spec: NodeSpec) -> dict[PodRef, int]:
    counts: dict[PodRef, int] = {}
    for pod in [*spec.pods.values(), *(p for pods in spec.shared.values() for p in pods)]:
        counts[pod] = counts.get(pod, 0) + 1
    return counts


def mig_resource(profile: str) -> str:
    """kube-state-metrics' name of a MIG device resource: nvidia.com/mig-1g.10gb -> nvidia_com_mig_1g_10gb."""
    return "nvidia_com_mig_" + profile.replace(".", "_").replace("+", "_")


def _instances_per_pod(spec: NodeSpec) -> dict[PodRef, int]:
    counts: dict[PodRef, int] = {}
    for pod in spec.mig_pods.values():
        counts[pod] = counts.get(pod, 0) + 1
    return counts


def render_ksm(specs: list[NodeSpec]) -> str:
    """kube-state-metrics series for the GPU resources: allocatable per node, requests per container, the
    phase of the pods holding GPUs (Running), and ``kube_namespace_labels`` for the system namespaces and those
    pods' (no labels allowlisted: the capacity dashboard's team panel groups them under an empty team)."""
    alloc = _ksm_header("kube_node_status_allocatable")
    capacity = _ksm_header("kube_node_status_capacity")
    requests = _ksm_header("kube_pod_container_resource_requests")
    phases = _ksm_header("kube_pod_status_phase")  # every pod holding GPUs runs
    namespaces = set(SYSTEM_NAMESPACES)
    node_labels = _ksm_header("kube_node_labels") if any(s.replicas > 1 for s in specs) else []
    for spec in specs:
        gpus = 0 if spec.mig else spec.gpus * spec.replicas  # mixed MIG: the node advertises MIG devices instead
        resources = [("nvidia_com_gpu", "integer", gpus), ("cpu", "core", 224)]
        if spec.mig:
            resources.append((mig_resource(spec.mig), "integer", spec.gpus * len(mig_instances(spec))))
        for resource, unit, amount in resources:
            labels = _label_text({"node": spec.node, "resource": resource, "unit": unit})
            allocatable = amount - spec.unhealthy_gpus if resource == "nvidia_com_gpu" and amount else amount
            alloc.append(f"kube_node_status_allocatable{{{labels}}} {allocatable}")
            capacity.append(f"kube_node_status_capacity{{{labels}}} {amount}")
        if spec.replicas > 1:  # GFD's label, allowlisted when gpustack configures time-slicing
            labels = _label_text({"node": spec.node, "label_nvidia_com_gpu_sharing_strategy": "time-slicing"})
            node_labels.append(f"kube_node_labels{{{labels}}} 1")
        held = [(p, "nvidia_com_gpu", n) for p, n in _gpus_per_pod(spec).items()]
        held += [(p, mig_resource(spec.mig), n) for p, n in _instances_per_pod(spec).items()]
        for pod, resource, count in held:
            labels = _label_text(
                {
                    "namespace": pod.namespace,
                    "pod": pod.name,
                    "uid": gpu_uuid(pod.name, 0)[4:],
                    "container": pod.container,
                    "node": spec.node,
                    "resource": resource,
                    "unit": "integer",
                }
            )
            requests.append(f"kube_pod_container_resource_requests{{{labels}}} {count}")
            namespaces.add(pod.namespace)
            for phase in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
                pod_labels = {
                    "namespace": pod.namespace,
                    "pod": pod.name,
                    "uid": gpu_uuid(pod.name, 0)[4:],
                    "phase": phase,
                }
                phases.append(f"kube_pod_status_phase{{{_label_text(pod_labels)}}} {int(phase == 'Running')}")
    ns_labels = _ksm_header("kube_namespace_labels")
    ns_labels += [f"kube_namespace_labels{{{_label_text({'namespace': ns})}}} 1" for ns in sorted(namespaces)]
    return "\n".join(alloc + capacity + requests + phases + ns_labels + node_labels) + "\n"
