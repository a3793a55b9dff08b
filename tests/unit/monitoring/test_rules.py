"""gpustack.monitoring.rules: the shipped rule file loads and has the alerts and tiers gpustack promises."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpustack.monitoring.rules import (
    alert_expressions,
    alert_names,
    iter_rules,
    load_rules,
    prometheus_rule,
    rules_path,
    severities,
)

EXPECTED = {
    "GPUExporterDown": "critical",
    "GPUExporterAbsent": "critical",
    "GPUNodeExporterMissing": "critical",
    "GPUsMissingFromMetrics": "critical",
    "GPUXidCritical": "critical",
    "GPURowRemapFailure": "critical",
    "GPUTemperatureCritical": "critical",
    "GPUMemoryTemperatureCritical": "critical",
    "GPUXidErrorNew": "warning",
    "GPUUncorrectableRemappedRowsIncreased": "warning",
    "GPURowRemapPending": "warning",
    "GPUTemperatureHigh": "warning",
    "GPUMemoryTemperatureHigh": "warning",
    "GPUFramebufferNearlyFull": "warning",
    "GPUPCIeReplayRateHigh": "warning",
    "GPUClockThrottledUnderLoad": "warning",
    "GPUAllocatableBelowCapacity": "warning",
    "GPUAllocatedButIdle": "info",
}


def test_rule_file_ships_inside_the_package() -> None:
    assert rules_path().is_file()
    assert rules_path().parent.parent.name == "templates"


def test_alerts_and_severities() -> None:
    assert severities() == EXPECTED
    assert alert_names() == list(EXPECTED)


def test_groups_in_tier_order() -> None:
    assert [g["name"] for g in load_rules()["groups"]] == ["gpu-critical", "gpu-warning", "gpu-info"]
    assert len(iter_rules()) == len(EXPECTED)


def test_xid_alerts_treat_the_value_as_the_last_code() -> None:
    exprs = dict(alert_expressions())
    assert "changes(" in exprs["GPUXidErrorNew"] and "[15m:30s]" in exprs["GPUXidErrorNew"]
    assert "increase(" not in exprs["GPUXidErrorNew"] and "rate(" not in exprs["GPUXidCritical"]
    # the codes come from gpustack's XID policy by action (tests/unit/health/test_xid_policy.py compares the lists)
    codes = set(re.findall(r"\d+", " ".join(re.findall(r'err_code=~"([0-9|]+)"', exprs["GPUXidCritical"]))))
    assert {"48", "79", "95", "119", "120", "140"} <= codes
    assert not codes & {"13", "63", "92", "94"}  # application errors and alert-only XIDs do not page


def test_framebuffer_ratio_excludes_reserved_memory_and_reads_the_device_once() -> None:
    expr = " ".join(dict(alert_expressions())["GPUFramebufferNearlyFull"].split())
    used = ('( max by (node, gpu, UUID, GPU_I_PROFILE, GPU_I_ID) (DCGM_FI_DEV_FB_USED{exported_pod=""}) or '
            "max by (node, gpu, UUID, GPU_I_PROFILE, GPU_I_ID) (DCGM_FI_DEV_FB_USED) )")  # fmt: skip
    free = "max by (node, gpu, UUID, GPU_I_PROFILE, GPU_I_ID) (DCGM_FI_DEV_FB_FREE)"
    assert f"{used} / ( {used} + {free} )" in expr and expr.endswith("> 0.95"), expr
    assert "RESERVED" not in expr  # used / (used + free): reserved memory is no pod's to fill


def test_idle_rule_uses_the_workload_labels() -> None:
    expr = dict(alert_expressions())["GPUAllocatedButIdle"]
    assert 'exported_pod!=""' in expr


def test_load_rules_rejects_non_rule_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\n")
    with pytest.raises(ValueError, match="groups"):
        load_rules(bad)


def test_helpers_accept_an_explicit_rule_dict() -> None:
    rules = {
        "groups": [
            {
                "name": "g",
                "rules": [
                    {"record": "r", "expr": "1"},
                    {"alert": "A", "expr": "up == 0", "labels": {"severity": "info"}},
                ],
            }
        ]
    }
    assert alert_names(rules) == ["A"]
    assert alert_expressions(rules) == [("A", "up == 0")]
    assert severities(rules) == {"A": "info"}
    assert len(iter_rules(rules)) == 2


def test_prometheus_rule_wraps_the_groups_for_kube_prometheus_stack() -> None:
    cr = prometheus_rule(namespace="observability", labels={"release": "kps"})
    assert (cr["apiVersion"], cr["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert cr["metadata"]["namespace"] == "observability"
    assert cr["metadata"]["labels"] == {"app.kubernetes.io/part-of": "gpustack", "release": "kps"}
    assert cr["spec"]["groups"] == load_rules()["groups"]


def test_rule_file_is_not_a_jinja_template() -> None:
    """Prometheus' {{ $labels.x }} must reach Prometheus untouched; Jinja would reject it."""
    import jinja2

    with pytest.raises(jinja2.TemplateSyntaxError):
        jinja2.Environment().parse(rules_path().read_text())
