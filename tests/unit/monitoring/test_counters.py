"""The counters CSV parser, the PromQL metric scanner and the series budget."""

from __future__ import annotations

import pytest

from gpustack.monitoring.counters import CounterFileError, load_counters, parse_counters
from gpustack.monitoring.promql import metric_names, selector_metric
from gpustack.monitoring.usage import (
    SERIES_BUDGET_PER_GPU,
    Usage,
    collect_usage,
    estimate_series,
    unjustified_counters,
    unknown_metrics,
    unused_counters,
)

SAMPLE = """\
# Format
# DCGM FIELD, Prometheus metric type, help message
DCGM_FI_DEV_GPU_TEMP,    gauge, GPU temperature (in C).
DCGM_FI_DEV_XID_ERRORS , gauge , Value of the last XID error encountered.
DCGM_FI_DRIVER_VERSION, label, Driver Version
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).

# kept deliberately: DCGM_FI_DEV_MEM_CLOCK — HPA custom metric
# dropped: DCGM_FI_DEV_ENC_UTIL - no video engines in use
"""


def test_parse_sample() -> None:
    parsed = parse_counters(SAMPLE)
    assert parsed.metrics == ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_MEM_CLOCK"]
    assert parsed.labels == ["DCGM_FI_DRIVER_VERSION"]
    assert parsed.kept_deliberately == {"DCGM_FI_DEV_MEM_CLOCK": "HPA custom metric"}
    assert parsed.dropped == {"DCGM_FI_DEV_ENC_UTIL": "no video engines in use"}
    assert parsed.counters[1].help == "Value of the last XID error encountered."
    assert parsed.counters[1].line == 4


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("DCGM_FI_DEV_GPU_TEMP, gauge", "expected 3"),
        ("DCGM_FI_DEV_GPU_TEMP, gauge, temp, in C", "expected 3"),
        ('DCGM_FI_DEV_GPU_TEMP, gauge, "temp"', "double quotes"),
        ("DCGM_FI_DEV_GPU_TEMP, histogram, temp", "unknown Prometheus type"),
        ("GPU_TEMP, gauge, temp", "not a DCGM field"),
        ("DCGM_FI_DEV_GPU_TEMP, gauge, ", "empty help"),
        ("DCGM_FI_DEV_GPU_TEMP, gauge, a\nDCGM_FI_DEV_GPU_TEMP, gauge, b", "already defined on line 1"),
    ],
)
def test_parse_errors(line: str, message: str) -> None:
    with pytest.raises(CounterFileError, match=message):
        parse_counters(line)


def test_shipped_csv() -> None:
    shipped = load_counters()
    assert "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" in shipped.metrics  # current name, not CLOCK_THROTTLE_REASONS
    assert "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" not in shipped.metrics
    assert {"DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS"} == set(shipped.dropped)
    types = {c.name: c.prom_type for c in shipped.counters}
    assert types["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == "gauge"  # an instantaneous rate, whatever upstream says
    assert types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "counter"


def test_series_budget() -> None:
    estimate = estimate_series(load_counters())
    assert estimate.per_gpu == 26  # 25 + the driver's recovery action (issue 29)
    assert estimate.within_budget()
    assert estimate_series(load_counters(), pods_per_gpu=2).per_gpu == 52 > SERIES_BUDGET_PER_GPU


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up", {"up"}),
        ('max by (node, gpu) (DCGM_FI_DEV_GPU_TEMP{node=~"$node"}) >= 87', {"DCGM_FI_DEV_GPU_TEMP"}),
        ("changes(max by (node) (x_total)[15m:30s]) > 0 and on (node) y", {"x_total", "y"}),
        ('absent(up{job="a"}) or vector(1) unless on(node) group_left(team) z', {"up", "z"}),
        ("floor(a / 8) % 2 + rate(b[5m]) * 1e6 offset 5m", {"a", "b"}),
        ('label_replace(c, "dst", "$1", "src", "(.*)")', {"c"}),
        ("sum without (instance) (d) > bool 3", {"d"}),
    ],
)
def test_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_selector_metric() -> None:
    assert selector_metric('DCGM_FI_DEV_GPU_TEMP{node=~"$node"}') == "DCGM_FI_DEV_GPU_TEMP"
    assert selector_metric('{__name__="x"}') is None


def test_usage_checks() -> None:
    parsed = parse_counters(SAMPLE)
    usage = collect_usage([("A", "DCGM_FI_DEV_GPU_TEMP > 1 and up")], [("P", "kube_node_status_allocatable + foo")])
    assert usage.places["DCGM_FI_DEV_GPU_TEMP"] == ["rule A"]
    assert unknown_metrics(usage, parsed) == {"foo": ["panel P"]}
    assert unused_counters(usage, parsed) == ["DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_MEM_CLOCK"]
    assert unjustified_counters(usage, parsed) == ["DCGM_FI_DEV_XID_ERRORS"]
    assert Usage({}).metrics == set()
