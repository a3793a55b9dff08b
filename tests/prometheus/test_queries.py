"""Against a real Prometheus scraping two healthy replayed 8-GPU nodes: every dashboard query and
template variable returns data, every alert expression evaluates, and the ServiceMonitor-style
relabelling produces the labels the rules and panels rely on."""

from __future__ import annotations

from typing import Any

from gpustack.monitoring.dashboard import (
    concretize,
    data_panels,
    load_dashboard,
    panel_queries,
    parse_label_values,
    variable_queries,
)
from gpustack.monitoring.panels import titles
from gpustack.monitoring.rules import alert_expressions, alert_names, load_rules, load_usage_rules, record_rules

from .harness import Stack, exporter_pod

NODES = ["node-a", "node-b"]
# Panels that list problems: empty on healthy GPUs (tests/prometheus/test_scenarios.py fills them).
EMPTY_WHEN_HEALTHY = {"XID Errors (last XID per GPU)"}
# MIG instance panels: these nodes run whole GPUs (test_sharing.py has a MIG node and checks them)
MIG_PANELS = titles("12239.json", {"mig"})


def _label_sets(result: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [r["metric"] for r in result]


def test_every_panel_query_returns_data(stack: Stack) -> None:
    empty, unexpected = [], []
    for title, expr in panel_queries(load_dashboard()):
        result = stack.prometheus.query(concretize(expr))
        if title in EMPTY_WHEN_HEALTHY or title in MIG_PANELS:
            unexpected += [(title, r["metric"]) for r in result]
        elif not result:
            empty.append((title, expr))
    assert not empty, f"panel queries without data: {empty}"
    assert not unexpected, f"problem panels show rows on healthy GPUs: {unexpected}"


def test_timeseries_panels_return_series_over_time(stack: Stack) -> None:
    short = []
    for panel in data_panels(load_dashboard()):
        if panel["type"] != "timeseries" or panel["title"] in MIG_PANELS:
            continue
        for target in panel["targets"]:
            result = stack.prometheus.query_range(concretize(target["expr"]), seconds=10, step="1s")
            if not result or min(len(r["values"]) for r in result) < 3:
                short.append((panel["title"], target["refId"]))
    assert not short, f"timeseries targets with fewer than 3 points in 10s: {short}"


def test_panels_follow_the_node_and_gpu_variables(stack: Stack) -> None:
    """With node-b / GPU 3 selected, every per-GPU panel shows node-b GPU 3 and nothing else."""
    chosen = {"node": "node-b", "gpu": "3", "instance": ".*"}
    for title, expr in panel_queries(load_dashboard()):
        for labels in _label_sets(stack.prometheus.query(concretize(expr, chosen))):
            assert labels.get("node", "node-b") == "node-b", (title, labels)
            assert labels.get("gpu", "3") == "3", (title, labels)


def test_energy_and_allocation_stats_are_plausible(stack: Stack) -> None:
    values = {}
    for title, expr in panel_queries(load_dashboard()):
        if title in ("Energy Used (time range)", "GPUs Requested / Allocatable"):
            values.setdefault(title, []).append(float(stack.prometheus.query(concretize(expr))[0]["value"][1]))
    assert values["Energy Used (time range)"][0] > 0  # Wh from a counter that only grows
    requested, allocatable = values["GPUs Requested / Allocatable"]
    assert (requested, allocatable) == (13.0, 16.0)


def test_variable_queries_return_the_simulated_cluster(stack: Stack) -> None:
    found = {}
    for name, query in variable_queries(load_dashboard()):
        lv = parse_label_values(query)
        values = stack.prometheus.label_values(lv.label, concretize(lv.selector or "", {"node": "node-a"}) or None)
        assert values, f"variable {name} ({query}) has no values"
        found[name] = values
    assert found["node"] == NODES
    assert found["instance"] == [stack.exporters["node-a"].address]
    assert sorted(found["gpu"], key=int) == [str(i) for i in range(8)]


def test_every_alert_expression_evaluates(stack: Stack) -> None:
    for name, expr in alert_expressions():
        stack.prometheus.query(expr)  # raises PrometheusError (with Prometheus' message) on a bad expression
        assert name


def test_rules_are_loaded_and_evaluate_cleanly(stack: Stack) -> None:
    groups = stack.prometheus.rule_groups()
    shipped = load_rules()["groups"] + load_usage_rules()["groups"]
    assert sorted(g["name"] for g in groups) == sorted(g["name"] for g in shipped)
    rules = [r for g in groups for r in g["rules"]]
    assert sorted(r["name"] for r in rules) == sorted(alert_names() + [str(r["record"]) for r in record_rules()])
    assert all(r["health"] == "ok" and not r.get("lastError") for r in rules), [
        (r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"
    ]


def test_healthy_cluster_has_only_the_idle_notebooks_pending(stack: Stack) -> None:
    alerts = stack.prometheus.alerts()
    got = sorted(
        (a["labels"]["alertname"], a["state"], a["labels"]["node"], a["labels"]["gpu"], a["labels"]["exported_pod"])
        for a in alerts
    )
    assert got == [
        ("GPUAllocatedButIdle", "pending", "node-a", "6", "notebook-alice-0"),
        ("GPUAllocatedButIdle", "pending", "node-b", "6", "notebook-bob-0"),
    ]


def test_relabelling_matches_the_servicemonitor(stack: Stack) -> None:
    prom = stack.prometheus
    [series] = _label_sets(prom.query('DCGM_FI_DEV_GPU_UTIL{node="node-a", gpu="0"}'))
    assert series["job"] == "dcgm-exporter" and series["service"] == "dcgm-exporter"
    assert series["pod"] == exporter_pod("node-a") and series["namespace"] == "gpu-monitoring"
    assert (series["exported_pod"], series["exported_namespace"], series["exported_container"]) == (
        "train-llama-0",
        "ml-team",
        "trainer",
    )
    assert series["modelName"] == "NVIDIA H100 80GB HBM3" and series["UUID"].startswith("GPU-")
    assert not [k for k in series if k.startswith("__meta")]
    # one exporter still prints Hostname, the other hostname: node is what stays stable
    hosts = {s.get("Hostname") or s.get("hostname") for s in _label_sets(prom.query("DCGM_FI_DEV_GPU_TEMP"))}
    assert hosts == set(NODES)
    assert prom.query('count(DCGM_FI_DEV_GPU_TEMP{node=~"node-a|node-b"})')[0]["value"][1] == "16"
    # an unallocated GPU has no workload labels at all
    [free] = _label_sets(prom.query('DCGM_FI_DEV_GPU_UTIL{node="node-a", gpu="7"}'))
    assert "exported_pod" not in free and free["pod"] == exporter_pod("node-a")


def test_xid_series_carry_the_code_as_labels(stack: Stack) -> None:
    result = stack.prometheus.query('DCGM_FI_DEV_XID_ERRORS{node="node-a"}')
    assert len(result) == 8
    assert {(r["metric"]["err_code"], r["metric"]["err_msg"], r["value"][1]) for r in result} == {
        ("0", "No Error", "0")
    }
