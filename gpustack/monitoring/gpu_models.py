"""Which DCGM fields each GPU family reports through dcgm-exporter: one table, read by the replayed exporter in the
tests (the fields a node's model prints), R04 (a panel whose fields no GPU model of the cluster reports may be
empty) and M08 (profiling excused per node, by the node's model). Pure.

Why a field can be missing, not 0: DCGM answers a field the GPU or its driver does not support with a blank
sentinel (``DCGM_FT_INT64_NOT_SUPPORTED``, ``..._BLANK``), and dcgm-exporter drops those values -- no series, and
no ``# HELP`` line when no GPU of the node has one (NVIDIA/dcgm-exporter tag 4.5.3-4.8.2, commit d5e5f510,
``internal/pkg/collector/gpu_collector.go`` ``toMetric``: ``if v == skipDCGMValue { continue }``; ``toString``
turns ``isInt64Blank``/``isFloat64Blank`` values, ``internal/pkg/collector/utils.go``, into ``skipDCGMValue``).
Exporters before 4.x printed the sentinel instead (9223372036854775792 for a T4's memory temperature and NVLink,
NVIDIA/gpu-monitoring-tools#97), or 0 (dcgm-exporter 3.3.5 on GeForce, dcgm-exporter#460).

Only the fields gpustack enables (``values/dcgm-counters.csv``) are listed; a model not in :data:`FAMILIES`
(A100, A30, H100, H200, B200, ...) is taken to report every one of them, so a panel it leaves empty stays a fault.
Profiling fields (``DCGM_FI_PROF_*``) are not blank values but fields dcgm-exporter does not watch on a GPU whose
DCGM reports no profiling metric groups (``pkg/cmd/app.go`` ``queryDCPMetrics``: ``GetSupportedMetricGroups(0)``
fails -> ``CollectDCP = false``, "Not collecting DCP metrics"): "supported for
Datacenter grade Volta and newer GPUs ... The RTX3* and RTX2* gaming series are not supported" (the maintainer,
NVIDIA/dcgm-exporter#5); T4 and L4 are datacenter GPUs and report them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

MEMORY_TEMP = "DCGM_FI_DEV_MEMORY_TEMP"
NVLINK = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
ROW_REMAP = (
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
)
#: the profiling fields gpustack's counters enable (values/dcgm-counters.csv)
PROFILING = (
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
)

#: why each field is missing, by the source that says so
WHY_MEMORY_TEMP_GEFORCE = "no memory temperature on GeForce: blank in dcgm-exporter 4.x (NVIDIA/dcgm-exporter#460)"
WHY_MEMORY_TEMP_GDDR = ("memory temperature blank on GDDR datacenter GPUs (T4: NVIDIA/gpu-monitoring-tools#97; L4: "
                        "0 from older drivers, blank from DCGM)")  # fmt: skip
WHY_NO_NVLINK = "no NVLink on this GPU (NVIDIA datasheet: PCIe only)"
WHY_ROW_REMAP = ("row remapping is NVML's 'For Ampere or newer fully supported devices' (nvmlDeviceGetRemappedRows): "
                 "not Turing, not GeForce")  # fmt: skip
WHY_PROFILING = ("no DCGM profiling on GeForce/TITAN: 'supported for Datacenter grade Volta and newer GPUs' "
                 "(NVIDIA/dcgm-exporter#5)")  # fmt: skip


@dataclass(frozen=True)
class Family:
    """GPUs whose model name matches ``pattern`` (a regular expression searched in the model name with ``-`` and
    ``_`` read as spaces: dcgm-exporter's ``modelName`` is NVML's product name, GPU feature discovery's
    ``nvidia.com/gpu.product`` the same with dashes) and the fields dcgm-exporter prints none of for them."""

    name: str
    pattern: str
    lacks: Mapping[str, str]  # field -> why (the source)

    def matches(self, model: str) -> bool:
        return re.search(self.pattern, normalise(model), re.I) is not None


_GEFORCE = {MEMORY_TEMP: WHY_MEMORY_TEMP_GEFORCE, **dict.fromkeys(ROW_REMAP, WHY_ROW_REMAP),
            **dict.fromkeys(PROFILING, WHY_PROFILING)}  # fmt: skip
_T4 = {MEMORY_TEMP: WHY_MEMORY_TEMP_GDDR, NVLINK: WHY_NO_NVLINK, **dict.fromkeys(ROW_REMAP, WHY_ROW_REMAP)}
#: first match wins: the GeForce cards with an NVLink connector before GeForce in general
FAMILIES: tuple[Family, ...] = (
    # NVIDIA's product specifications ("NVLink (SLI-Ready)") list an NVLink bridge for the RTX 3090 / 3090 Ti, the
    # RTX 2080 / 2080 Ti / 2080 SUPER and 2070 SUPER and the TITAN RTX only: their NVLink panel is not excused;
    # memory temperature, row remapping and profiling as every GeForce
    Family("GeForce / TITAN with NVLink", r"\b(GeForce RTX (3090|2080|2070 SUPER)|TITAN RTX)\b", _GEFORCE),
    # every other GeForce and TITAN (the RTX 40 and 50 series, Ada and Blackwell, have no NVLink at all)
    Family("GeForce / TITAN", r"\b(GeForce|TITAN)\b", {**_GEFORCE, NVLINK: WHY_NO_NVLINK}),
    # Tesla T4 (Turing, GDDR6): datasheet "Interconnect: PCIe Gen3"; Turing predates row remapping (page retirement)
    Family("T4 (Turing)", r"\bT4\b", _T4),
    # NVIDIA L4 (Ada, GDDR6): datasheet "Interconnect: PCIe Gen4 x16"; Ada datacenter: row remapping reported
    Family("L4 (Ada)", r"\bL4\b", {MEMORY_TEMP: WHY_MEMORY_TEMP_GDDR, NVLINK: WHY_NO_NVLINK}),
)


def normalise(model: str) -> str:
    """``NVIDIA-GeForce-RTX-4090`` (a node label) and ``NVIDIA GeForce RTX 4090`` (modelName) read alike."""
    return re.sub(r"[-_\s]+", " ", model).strip()


def family(model: str) -> Family | None:
    """The family ``model`` belongs to, None for one that reports every field."""
    return next((f for f in FAMILIES if f.matches(model)), None)


def lacks(model: str) -> Mapping[str, str]:
    """The fields dcgm-exporter prints no series of for ``model``, each with why."""
    found = family(model)
    return found.lacks if found else {}


def reports(model: str, field: str) -> bool:
    """Whether dcgm-exporter prints ``field`` for a GPU of ``model``."""
    return field not in lacks(model)


def profiling_unsupported(models: Iterable[str]) -> bool:
    """Every one of ``models`` (at least one) lacks every profiling field."""
    seen = [m for m in models if m]
    return bool(seen) and all(not any(reports(m, f) for f in PROFILING) for m in seen)


def unreported(fields: Iterable[str], models: Iterable[str]) -> str:
    """Why no GPU of ``models`` reports any of ``fields`` ("" when one of them does, when ``fields`` names no DCGM
    field, or when no model is known): each field with the models lacking it and the reason."""
    wanted = sorted({f for f in fields if f.startswith("DCGM_")})
    seen = sorted({m for m in models if m})
    if not wanted or not seen or any(reports(m, f) for m in seen for f in wanted):
        return ""
    parts = []
    for f in wanted:
        reasons = sorted({lacks(m)[f] for m in seen})
        parts.append(f"{f} not reported by {', '.join(seen)} ({'; '.join(reasons)})")
    return "; ".join(parts)
