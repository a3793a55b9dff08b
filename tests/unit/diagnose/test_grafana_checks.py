"""Pure Grafana checks on hand-built snapshots."""

from __future__ import annotations

from gpustack.checks.model import Finding
from gpustack.diagnose import checks_grafana, registry
from gpustack.diagnose.collect_grafana import series_count
from gpustack.diagnose.snapshot import Snapshot

DS = {"uid": "prometheus", "name": "Prometheus", "type": "prometheus", "isDefault": True,
      "url": "http://kube-prometheus-stack-prometheus.monitoring:9090/"}  # fmt: skip
DASH = {"uid": "gpustack-dcgm", "title": "NVIDIA DCGM Exporter (gpustack)"}
CAPACITY = {"uid": "gpustack-capacity", "title": "GPU capacity and cost (gpustack)"}


def check(snap: Snapshot, prefix: str) -> list[Finding]:
    assert checks_grafana.BOTH
    return registry.run([s for s in registry.REGISTRY.values() if s.id.startswith(prefix + "-")], snap)


def healthy() -> Snapshot:
    s = Snapshot()
    s.grafana.reachable = True
    s.grafana.health = {"database": "ok", "version": "13.2.0"}
    s.grafana.datasources = [dict(DS)]
    s.grafana.dashboards = [dict(DASH), dict(CAPACITY)]
    s.grafana.panel_results = {"GPU Utilization": 16, "XID Errors (last XID per GPU)": 0,
                               "GPU capacity and cost: GPUs free": 1, "GPU capacity and cost: Pending pods": 0}  # fmt: skip
    s.grafana.datasource_probes = {"prometheus": {"ok": True, "error": "", "series": 1}}
    s.grafana.panel_errors = {"gpustack-dcgm": {}, "gpustack-capacity": {}}
    return s


def test_healthy_passes() -> None:
    for prefix in ("R01", "R02", "R03", "R04"):
        assert [f.status for f in check(healthy(), prefix)] == ["pass"], prefix


def test_unreachable() -> None:
    s = Snapshot(errors={"grafana": "Grafana via x: connection refused"})
    [f] = check(s, "R01")
    assert f.status == "fail" and "connection refused" in f.evidence
    assert {check(s, p)[0].status for p in ("R02", "R03", "R04")} == {"skip"}


def test_datasource_missing_and_broken() -> None:
    s = healthy()
    s.grafana.datasources = [{"uid": "loki", "name": "Loki", "type": "loki"}]
    [f] = check(s, "R02")
    assert f.status == "fail" and "Loki (loki)" in f.evidence
    s = healthy()
    s.grafana.datasource_probes["prometheus"] = {"ok": False, "error": "dial tcp: i/o timeout", "series": 0}
    [f] = check(s, "R02")
    assert f.status == "fail" and "i/o timeout" in f.evidence


def test_no_data_panels_named_and_problem_tables_allowed() -> None:
    s = healthy()
    s.grafana.panel_results.update({"Tensor Core Utilization": 0, "Engine Activity": -1})
    s.grafana.panel_errors["gpustack-dcgm"] = {"Engine Activity": "bad_data: parse error"}
    findings = check(s, "R04")
    assert {f.status for f in findings} == {"fail"}
    assert "Tensor Core Utilization" in findings[0].evidence and "XID" not in findings[0].evidence
    assert "parse error" in findings[1].evidence


def test_series_count_ignores_empty_frames() -> None:
    assert series_count({"frames": [{"data": {"values": []}}]}) == 0
    assert series_count({"frames": [{"data": {"values": [[1], [2]]}}, {"data": {"values": [[1], [3]]}}]}) == 2
    assert series_count({}) == 0


def test_capacity_dashboard_missing_is_named() -> None:
    s = healthy()
    s.grafana.dashboards = [dict(DASH)]
    [f] = check(s, "R03")
    assert f.status == "fail" and "gpustack-capacity" in f.summary and "gpustack-dcgm" not in f.summary
    assert [f.status for f in check(s, "R04")] == ["pass"]  # the DCGM dashboard's panels still checked


def test_capacity_panels_without_rule_data_warn_and_empty_ones_fail() -> None:
    s = healthy()
    s.grafana.panel_results = {"GPU Utilization": 16}
    s.grafana.panel_errors["gpustack-capacity"] = {
        "(rules)": "count(gpustack:cluster_gpu_allocatable:sum) returned no series"
    }
    [f] = check(s, "R04")
    assert f.status == "warn" and "usage recording rules have no data yet" in f.summary
    s = healthy()
    s.grafana.panel_results["GPU capacity and cost: GPUs allocatable"] = 0
    [f] = check(s, "R04")
    assert f.status == "fail" and f.evidence == "GPU capacity and cost: GPUs allocatable" and "M05" in f.fix
