"""The per-model field table (gpustack/monitoring/gpu_models.py): which DCGM fields each GPU family reports."""

from __future__ import annotations

import pytest

from gpustack.monitoring import gpu_models as gm
from gpustack.monitoring.counters import load_counters
from gpustack.monitoring.panels import panel_fields

H100, H200, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB"
T4, L4, L40S = "Tesla T4", "NVIDIA L4", "NVIDIA L40S"
RTX4090, RTX3090, TITAN = "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090", "NVIDIA TITAN RTX"


def test_every_field_the_table_names_is_one_gpustack_collects() -> None:
    enabled = {c.name for c in load_counters().counters}
    named = {f for fam in gm.FAMILIES for f in fam.lacks} | set(gm.PROFILING) | set(gm.ROW_REMAP)
    assert named <= enabled, named - enabled
    assert {f for f in enabled if f.startswith("DCGM_FI_PROF_")} == set(gm.PROFILING)


@pytest.mark.parametrize("model", [H100, H200, A100, "NVIDIA-H100-80GB-HBM3", L40S])
def test_datacenter_hbm_and_unlisted_models_report_every_field(model: str) -> None:
    assert gm.family(model) is None and gm.lacks(model) == {}
    assert all(gm.reports(model, c.name) for c in load_counters().counters)


def test_geforce_lacks_memory_temperature_row_remapping_and_profiling_and_ada_nvlink() -> None:
    for model in (RTX4090, RTX3090, TITAN, "NVIDIA-GeForce-RTX-4090"):  # modelName or GFD's product label
        missing = set(gm.lacks(model))
        assert {gm.MEMORY_TEMP, *gm.ROW_REMAP, *gm.PROFILING} <= missing, model
        assert "#460" in gm.lacks(model)[gm.MEMORY_TEMP]
    assert not gm.reports(RTX4090, gm.NVLINK) and gm.reports(RTX3090, gm.NVLINK)  # the 3090 has an NVLink bridge
    for model in (
        "NVIDIA GeForce RTX 5090",
        "NVIDIA GeForce RTX 3080",
        "NVIDIA TITAN V",
        "NVIDIA-GeForce-RTX-4090-SHARED",
    ):
        assert not gm.reports(model, gm.NVLINK) and not gm.reports(model, gm.MEMORY_TEMP), model
    for model in ("NVIDIA GeForce RTX 3090 Ti", "NVIDIA GeForce RTX 2080 Ti", "NVIDIA GeForce RTX 2070 SUPER", TITAN):
        assert gm.reports(model, gm.NVLINK) and not gm.reports(model, gm.PROFILING[0]), model
    assert gm.profiling_unsupported([RTX4090, TITAN]) and not gm.profiling_unsupported([RTX4090, H100])
    assert not gm.profiling_unsupported([])


def test_t4_and_l4_report_profiling_but_no_memory_temperature_or_nvlink() -> None:
    for model in (T4, L4, "Tesla-T4", "NVIDIA-L4"):
        assert not gm.reports(model, gm.MEMORY_TEMP) and not gm.reports(model, gm.NVLINK), model
        assert all(gm.reports(model, f) for f in gm.PROFILING), model
    assert not gm.reports(T4, gm.ROW_REMAP[0]) and gm.reports(L4, gm.ROW_REMAP[0])  # Turing has no row remapping
    assert gm.family(L40S) is None, "L4 must not match L40S"


def test_a_panel_is_unreported_only_when_no_model_reports_any_of_its_fields() -> None:
    fields = panel_fields()
    assert fields["GPU Memory Temperature"] == {gm.MEMORY_TEMP} and fields["NVLink Throughput"] == {gm.NVLINK}
    assert fields["Row Remaps"] == set(gm.ROW_REMAP)
    mixed = [T4, L4, RTX4090]
    assert {t for t, f in fields.items() if gm.unreported(f, mixed)} == {"GPU Memory Temperature", "NVLink Throughput"}
    why = gm.unreported(fields["NVLink Throughput"], mixed)
    assert why.startswith(f"{gm.NVLINK} not reported by {RTX4090}, {L4}, {T4}") and "datasheet" in why
    assert {t for t, f in fields.items() if gm.unreported(f, [*mixed, H100])} == set()
    assert {t for t, f in fields.items() if gm.unreported(f, [T4])} == {
        "GPU Memory Temperature", "NVLink Throughput", "Row Remaps"}  # fmt: skip
    assert gm.unreported(fields["GPU Temperature"], [RTX4090]) == "" and gm.unreported({gm.NVLINK}, []) == ""
    assert gm.unreported(set(), [RTX4090]) == "", "a panel reading no DCGM field is never excused by a model"
