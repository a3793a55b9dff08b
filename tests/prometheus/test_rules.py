"""The alert rules: promtool accepts them, promtool unit tests pass for every scenario, and the
rules, dashboard and counters CSV agree on which metrics exist."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from gpustack.health.collect import expressions as policy_expressions
from gpustack.monitoring.counters import load_counters
from gpustack.monitoring.dashboard import load_dashboard, panel_queries
from gpustack.monitoring.rules import EXPORTER_JOB, SEVERITIES, alert_expressions, alert_names, alert_rules, rules_path
from gpustack.monitoring.usage import collect_usage, unjustified_counters, unknown_metrics, unused_labels

RULE_TESTS = sorted((Path(__file__).resolve().parent / "rules_tests").glob("*.yaml"))
SCENARIO_FILES = {
    "healthy.yaml",
    "xid.yaml",
    "overheat.yaml",
    "exporter_down.yaml",
    "row_remap_failure.yaml",
    "fb_full.yaml",
    "gpu_missing.yaml",
}
CLUSTER_LEVEL = {"GPUExporterAbsent"}
NODE_LEVEL = {"GPUExporterDown", "GPUNodeExporterMissing", "GPUsMissingFromMetrics", "GPUAllocatableBelowCapacity"}
# Checked against go-dcgm's field-name map (current names and legacy aliases) and NVIDIA/DCGM's
# dcgm_fields.h, 2026: a typo here would make dcgm-exporter refuse to start.
VERIFIED_DCGM_FIELDS = {
    # field 1523 under the one name go-dcgm's map has for it at the pinned dcgm-exporter 4.5.3 (issue 29)
    "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    # dcgm-exporter's own field (internal/pkg/counters/const.go at the pinned commit d5e5f510)
    "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "DCGM_FI_DRIVER_VERSION",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
}
# dcgm-exporter's etc/default-counters.csv (enabled lines): each is exported or listed as dropped.
UPSTREAM_DEFAULTS = {
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    # dcgm-exporter's own field (internal/pkg/counters/const.go at the pinned commit d5e5f510)
    "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DRIVER_VERSION",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
}


def _promtool(promtool: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False)


def _fired_in_tests() -> set[str]:
    fired = set()
    for path in RULE_TESTS:
        for group in yaml.safe_load(path.read_text())["tests"]:
            fired |= {case["alertname"] for case in group.get("alert_rule_test", []) if case.get("exp_alerts")}
    return fired


@pytest.mark.both_prometheus  # version-sensitive: also on the oldest supported (docs/operations.md)
def test_promtool_check_rules(promtool: str) -> None:
    proc = _promtool(promtool, "check", "rules", str(rules_path()))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in proc.stdout


@pytest.mark.both_prometheus  # version-sensitive: also on the oldest supported (docs/operations.md)
@pytest.mark.parametrize("test_file", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests(promtool: str, test_file: Path) -> None:
    proc = _promtool(promtool, "test", "rules", test_file.name, cwd=test_file.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_required_scenarios_have_unit_tests() -> None:
    assert {p.name for p in RULE_TESTS} >= SCENARIO_FILES


def test_every_alert_fires_in_some_unit_test() -> None:
    assert set(alert_names()) - _fired_in_tests() == set()


def test_healthy_unit_test_checks_every_alert_stays_silent() -> None:
    [group] = yaml.safe_load((RULE_TESTS[0].parent / "healthy.yaml").read_text())["tests"]
    cases = group["alert_rule_test"]
    assert not [c for c in cases if c.get("exp_alerts")]
    assert {c["alertname"] for c in cases} == set(alert_names())


def test_alert_metadata() -> None:
    for rule in alert_rules():
        name, annotations = rule["alert"], rule.get("annotations", {})
        assert rule.get("labels", {}).get("severity") in SEVERITIES, name
        assert {"summary", "description", "runbook"} <= set(annotations), name
        text = annotations["summary"] + annotations["description"]
        if name not in CLUSTER_LEVEL:
            assert "$labels.node" in text, f"{name} does not name the node"
        if name not in CLUSTER_LEVEL | NODE_LEVEL:
            assert "$labels.gpu" in text, f"{name} does not name the GPU"


def test_groups_are_severity_tiers() -> None:
    from gpustack.monitoring.rules import load_rules

    for group in load_rules()["groups"]:
        tier = group["name"].removeprefix("gpu-")
        assert tier in SEVERITIES
        assert {r["labels"]["severity"] for r in group["rules"]} == {tier}


def test_exporter_is_selected_by_its_job() -> None:
    for name, expr in alert_expressions():
        for selector in re.findall(r"\bup\{([^}]*)\}", expr):
            assert f'job="{EXPORTER_JOB}"' in selector, name


def test_rules_panels_and_policy_read_only_exported_metrics() -> None:
    usage = collect_usage(alert_expressions(), panel_queries(load_dashboard()), policy_expressions())
    assert unknown_metrics(usage, load_counters()) == {}


def test_every_exported_metric_is_used_or_kept_deliberately() -> None:
    counters = load_counters()
    exprs = [e for _, e in alert_expressions() + panel_queries(load_dashboard()) + policy_expressions()]
    usage = collect_usage(alert_expressions(), panel_queries(load_dashboard()), policy_expressions())
    assert unjustified_counters(usage, counters) == []
    assert unused_labels(counters.labels, exprs) == []


def test_csv_fields_are_real_dcgm_fields() -> None:
    counters = load_counters()
    assert {c.name for c in counters.counters} <= VERIFIED_DCGM_FIELDS


def test_every_upstream_default_is_exported_or_dropped_with_a_reason() -> None:
    counters = load_counters()
    accounted = {c.name for c in counters.counters} | set(counters.dropped)
    assert UPSTREAM_DEFAULTS - accounted == set()
    assert all(reason for reason in counters.dropped.values())
