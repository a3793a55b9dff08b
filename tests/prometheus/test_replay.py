"""The replayed dcgm-exporter output: dcgm-exporter's format, the CSV's metrics, and the series
count that scripts/bench_series.py predicts."""

from __future__ import annotations

import re
from collections import Counter

from gpustack.monitoring.counters import load_counters
from gpustack.monitoring.usage import estimate_series

from .replay_exporter import DOUBLE_FIELDS, default_nodes, render_dcgm

LINE = re.compile(r'^(?P<name>[A-Z_]+)\{(?P<labels>(?:[A-Za-z_]+="[^"]*",?)+)\} (?P<value>-?\d+(?:\.\d{6})?)$')


def _series(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = LINE.match(line)
        assert match, f"not dcgm-exporter's format: {line!r}"
        labels = dict(re.findall(r'([A-Za-z_]+)="([^"]*)"', match.group("labels")))
        out.append((match.group("name"), labels, float(match.group("value"))))
    return out


def test_exposition_has_help_and_type_for_every_csv_metric() -> None:
    counters = load_counters()
    text = render_dcgm(default_nodes()[0], counters, t=12.0)
    for counter in counters.counters:
        if counter.is_label:
            assert f'{counter.name}="595.91.07"' in text
        else:
            assert f"# HELP {counter.name} {counter.help}\n# TYPE {counter.name} {counter.prom_type}\n" in text


def test_series_per_gpu_match_the_bench_estimate() -> None:
    counters = load_counters()
    per_gpu = Counter(labels["UUID"] for _, labels, _ in _series(render_dcgm(default_nodes()[1], counters, t=30.0)))
    assert len(per_gpu) == 8
    assert set(per_gpu.values()) == {estimate_series(counters).per_gpu}


def test_value_formats_and_label_order_follow_dcgm_exporter() -> None:
    text = render_dcgm(default_nodes()[0], load_counters(), t=5.0)
    first = next(line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{"))
    assert re.match(
        r'DCGM_FI_DEV_GPU_TEMP\{gpu="0",UUID="GPU-[0-9a-f-]{36}",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",DCGM_FI_DRIVER_VERSION="595.91.07",container="trainer",namespace="ml-team",pod="train-llama-0",pod_uid=""\} \d+$',
        first,
    )
    for name, _, value in _series(text):
        assert (name in DOUBLE_FIELDS) or value == int(value), name


def test_counters_only_grow_and_values_move() -> None:
    counters, spec = load_counters(), default_nodes()[0]
    before = {(n, lb["gpu"]): v for n, lb, v in _series(render_dcgm(spec, counters, t=10.0))}
    after = {(n, lb["gpu"]): v for n, lb, v in _series(render_dcgm(spec, counters, t=70.0))}
    for c in counters.counters:
        if c.prom_type == "counter":
            assert all(after[(c.name, g)] >= before[(c.name, g)] for n, g in before if n == c.name), c.name
    assert after[("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "0")] > before[("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "0")]
    assert after[("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "2")] > before[("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "2")]
    assert after[("DCGM_FI_DEV_GPU_UTIL", "0")] != before[("DCGM_FI_DEV_GPU_UTIL", "0")]


def test_scenarios_change_what_the_exporter_reports() -> None:
    counters = load_counters()
    spec = default_nodes()[0]
    spec.scenario = "gpu_missing"
    assert {lb["gpu"] for _, lb, _ in _series(render_dcgm(spec, counters, 1.0))} == {str(i) for i in range(7)}
    spec.scenario = "xid79"
    xids = {
        lb["gpu"]: (v, lb["err_code"], lb["err_msg"])
        for n, lb, v in _series(render_dcgm(spec, counters, 1.0))
        if n == "DCGM_FI_DEV_XID_ERRORS"
    }
    assert xids["3"] == (79.0, "79", "GPU has fallen off the bus") and xids["2"] == (0.0, "0", "No Error")
