"""Pure Grafana checks on hand-built snapshots."""

from __future__ import annotations

import pytest

from gpustack.checks.model import Finding
from gpustack.diagnose import checks_grafana, checks_monitoring, registry
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


def gpu_pod(name: str, gpus: object = 1, *, namespace: str = "ml", phase: str = "Running", key: str = "limits") -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": "gpu-node-1", "containers": [
                {"name": "main", "resources": {key: {"nvidia.com/gpu": gpus, "cpu": "1"}}}]},
            "status": {"phase": phase}}  # fmt: skip


PER_POD = "GPU Utilisation per Pod"
BY_NAMESPACE = "GPU capacity and cost: GPU-hours allocated by namespace"


def idle_cluster() -> Snapshot:
    """The state right after `gpustack up`: no pod holds a GPU, so the per-pod and allocation panels are empty."""
    s = healthy()
    s.grafana.panel_results.update(
        {PER_POD: 0, BY_NAMESPACE: 0, "GPU capacity and cost: GPU-hours used by namespace": 0}
    )
    s.kube["Pod"] = [gpu_pod("cpu-only", 0), gpu_pod("done", 2, phase="Succeeded"),
                     gpu_pod("gpustack-cuda-x7", namespace="gpustack-verify")]  # fmt: skip
    return s


def test_per_pod_panels_may_be_empty_while_no_pod_holds_a_gpu() -> None:
    s = idle_cluster()
    assert checks_grafana.gpu_pods(s) == []
    assert [f.status for f in check(s, "R04")] == ["pass"]


def test_per_pod_panels_must_have_data_once_a_pod_holds_a_gpu() -> None:
    for pod in (gpu_pod("train-0", 4), gpu_pod("serve-0", "1", key="requests")):
        s = idle_cluster()
        s.kube["Pod"].append(pod)
        assert checks_grafana.gpu_pods(s) == [f"ml/{pod['metadata']['name']}"]
        findings = check(s, "R04")
        assert [f.status for f in findings] == ["fail", "fail"], findings  # one per dashboard
        dcgm, capacity = findings
        assert dcgm.summary == '1 of 3 panels show "No data"' and dcgm.evidence.startswith(PER_POD)
        assert f"1 do: ml/{pod['metadata']['name']}" in dcgm.evidence and "pod-resources" in dcgm.fix
        assert capacity.evidence.startswith(BY_NAMESPACE + " --"), "used-by-namespace may be empty: GPUs idle"


def test_data_panels_are_never_allowed_empty_and_problem_lists_always_are() -> None:
    s = idle_cluster()
    s.grafana.panel_results.update({"GPU Temperature": 0, "GPU capacity and cost: Idle allocated GPU-hours by pod": 0})
    [f] = check(s, "R04")
    assert f.status == "fail" and f.evidence == "GPU Temperature", f


def test_profiling_panels_may_be_empty_only_on_gpus_dcgm_cannot_profile() -> None:
    for model, status in (("NVIDIA GeForce RTX 4090", "pass"), ("NVIDIA H100 80GB HBM3", "fail")):
        s = healthy()
        s.prometheus.queries["gpu_models"] = [{"metric": {"modelName": model}, "value": [0, "8"]}]
        s.grafana.panel_results.update({"Tensor Core Utilization": 0, "Engine Activity": 0, "PCIe Throughput": 0})
        assert [f.status for f in check(s, "R04")] == [status], model


def test_the_warnings_expected_on_a_new_cluster_are_the_checks_own() -> None:
    """docs/checks.md lists the warnings a freshly built cluster may show (test_golden_paths.py allows only
    those); each row is what its check really says."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "checks.md").read_text(encoding="utf-8")
    rows = set(
        re.findall(r"^\| `([A-Z]\d\d-[\w-]+)` \| warn \| (.+?) \|", text.split("## Expected on a new cluster")[1], re.M)
    )
    s = healthy()
    s.grafana.panel_errors["gpustack-capacity"] = {
        "(rules)": "count(gpustack:cluster_gpu_allocatable:sum) returned no series"
    }
    s.grafana.panel_results = {"GPU Utilization": 16}
    s.prometheus.reachable = True
    s.prometheus.queries.update({"gpu_util_by_node": [{"metric": {"node": "n1"}, "value": [0, "8"]}],
                                 "gpu_models": [{"metric": {"modelName": "NVIDIA GeForce RTX 4090"}, "value": [0, "8"]}]})  # fmt: skip
    assert checks_monitoring.BOTH
    produced = {(f.id, f.summary) for p in ("R04", "M08") for f in check(s, p) if f.status == "warn"}
    # K10's row (the open containerd security release) is checked end to end by tests/prometheus/test_golden_paths.py,
    # whose clusters run the pinned containerd: the rows here are the Grafana and monitoring checks'
    assert produced == {r for r in rows if not r[0].startswith("K10-")}, (produced, rows)


def started(pod: dict, at: str, *, pod_start: str = "") -> dict:
    """``pod`` whose container has been running since ``at`` (the kubelet's containerStatuses), or only the pod's
    ``status.startTime`` when ``at`` is empty."""
    status = pod["status"]
    if at:
        status["containerStatuses"] = [{"name": "main", "state": {"running": {"startedAt": at}}}]
    if pod_start:
        status["startTime"] = pod_start
    return pod


def test_a_gpu_pod_younger_than_three_rule_intervals_may_have_no_per_pod_data_yet() -> None:
    """Issue 32 item 4: the first activity sample of a new pod needs an exporter collection, a scrape and a rule
    evaluation, each up to a minute apart in production (the rules every 1m, the scrape at most 1m)."""
    from gpustack.monitoring.rules import load_usage_rules, usage_rules_interval_s

    assert usage_rules_interval_s() == 60 and checks_grafana.settle_s() == 3 * 60
    assert usage_rules_interval_s({"groups": [{"name": "g", "interval": "30s"}]}) == 30
    for bad in ("1m30s", "", "m"):
        with pytest.raises(ValueError, match="group interval"):
            usage_rules_interval_s({"groups": [{"name": "g", "interval": bad}]})
    assert load_usage_rules()["groups"][0]["interval"] == "1m"
    now = "2026-11-29T05:00:00+00:00"
    cases = [  # (container running since, pod start time) -> R04 statuses (DCGM dashboard, capacity dashboard)
        ("2026-11-29T04:59:00Z", "", ["pass"]),  # one minute: no sample can be recorded yet
        ("2026-11-29T04:57:01Z", "", ["pass"]),  # just under three intervals
        ("2026-11-29T04:57:00Z", "", ["fail", "fail"]),  # three intervals: it must show
        ("", "2026-11-29T04:59:30Z", ["pass"]),  # no container status yet: the pod's start time
        ("2026-11-29T04:59:00Z", "2026-11-29T04:00:00Z", ["pass"]),  # a restarted container: its own start counts
        ("", "", ["fail", "fail"]),  # no start time at all: as before, a pod holding a GPU
    ]
    for since, pod_start, want in cases:
        s = idle_cluster()
        s.collected_at = now
        s.kube["Pod"].append(started(gpu_pod("train-0", 1), since, pod_start=pod_start))
        assert checks_grafana.gpu_pods(s) == ["ml/train-0"]  # still listed as holding a GPU
        assert [f.status for f in check(s, "R04")] == want, (since, pod_start)
    s = idle_cluster()
    s.collected_at = now
    s.kube["Pod"] += [
        started(gpu_pod("old-0"), "2026-11-29T03:00:00Z"),
        started(gpu_pod("new-0"), "2026-11-29T04:59:50Z"),
    ]
    findings = check(s, "R04")
    assert [f.status for f in findings] == ["fail", "fail"]  # one settled pod is enough to expect the panels
    assert "2 do: ml/new-0, ml/old-0" in findings[0].evidence and "3m after it starts" in findings[0].fix


def test_the_grace_follows_the_interval_prometheus_evaluates_the_rules_at() -> None:
    """A Prometheus evaluating the usage group every second (the test harness) expects the panels 3 s after a pod
    starts; the interval comes from /api/v1/rules (seconds), the shipped 1m where the group is not reported."""
    s = idle_cluster()
    s.collected_at = "2026-11-29T05:00:00Z"
    s.kube["Pod"].append(started(gpu_pod("train-0"), "2026-11-29T04:59:50Z"))
    assert checks_grafana.settle_s(s) == 180 and [f.status for f in check(s, "R04")] == ["pass"]
    s.prometheus.rule_groups = [
        {"name": "gpustack-alerts", "interval": 30},
        {"name": "gpustack-usage.rules", "interval": 1},
    ]
    assert checks_grafana.settle_s(s) == 3
    findings = check(s, "R04")
    assert [f.status for f in findings] == ["fail", "fail"] and "3s after it starts" in findings[0].fix
