"""The golden path on a cluster of three GPU models (issue 32 item 1): an H100 control plane, a T4 and a GeForce RTX
4090 worker -- and the same without the H100 -- each node's exporter reporting only the fields its model reports
(gpustack/monitoring/gpu_models.py), its node labelled with its product. ``verify`` and ``doctor``, idle then busy:
no ``fail``, only the warnings docs/checks.md lists (tests/prometheus/test_golden_paths.py's rules); M08 warns
for the GeForce node alone, and where no model reports memory temperature or NVLink, R04's pass names those panels
and why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes import scenarios as sc
from tests.fakes.model_scenarios import MIXES, RTX4090

from .releases import Release
from .test_golden_paths import walk_the_golden_paths

NODES = 3


def finding(report: dict[str, Any], check: str) -> dict[str, Any]:
    [found] = [c for c in report["checks"] if c["id"] == check]
    return found


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_a_cluster_of_three_gpu_models_passes_verify_and_doctor(
    mix: str, tmp_path: Path, prometheus_release: Release
) -> None:
    names = [sc.node_name(i, NODES) for i in range(NODES)]
    models = dict(zip(names, MIXES[mix], strict=True))
    geforce = [n for n, m in models.items() if m == RTX4090]
    reports = walk_the_golden_paths(NODES, prometheus_release, tmp_path, models)
    for phase, report in reports.items():
        m08 = finding(report, "M08-profiling-metrics")
        assert m08["status"] == "warn", (phase, m08)  # the RTX 4090 node has no profiling fields; the others do
        assert f"absent on {', '.join(geforce)};" in m08["evidence"] and RTX4090 in m08["evidence"], (phase, m08)
        r04 = finding(report, "R04-panels-have-data")
        if mix.startswith("h100"):  # the H100 reports every field: no panel may be empty
            assert "empty because" not in r04["summary"], (phase, r04)
        else:
            assert r04["summary"].endswith("2 empty because no GPU model of the cluster reports their fields"), r04
            assert r04["evidence"].startswith("GPU Memory Temperature: DCGM_FI_DEV_MEMORY_TEMP not reported by"), r04
            assert "NVLink Throughput: DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" in r04["evidence"], r04
