"""gpustack.report.queries: the report's PromQL comes from the recording rules, inlined for raw mode."""

from __future__ import annotations

import re

import pytest

from gpustack.monitoring.rules import load_usage_rules, record_rules
from gpustack.report import queries as q

WINDOW = q.Window(end=1_800_000_000, seconds=30 * 86400)
RULE_NAME = re.compile(r"gpustack:[a-z_]+:[a-z_]+")


def test_the_group_records_every_minute() -> None:
    [group] = load_usage_rules()["groups"]
    assert group["name"] == q.GROUP and group["interval"] == "1m" and q.STEP_S == 60


def test_every_rule_reads_only_rules_recorded_before_it() -> None:
    """Prometheus evaluates a group's rules in order: a rule reading a later one would see the last minute's."""
    seen: set[str] = set()
    for rule in q.rules():
        assert set(RULE_NAME.findall(rule.expr)) <= seen, rule.record
        seen.add(rule.record)


def test_the_report_reads_rules_that_exist() -> None:
    names = {r["record"] for r in record_rules()}
    for name in (q.ALLOCATED, q.STARTING, q.PENDING, q.ALLOCATABLE, q.CLUSTER_ALLOCATABLE, q.CLUSTER_ALLOCATED,
                 q.CLUSTER_PENDING, q.ACTIVITY, q.IDLE, q.BUCKET):  # fmt: skip
        assert name in names
    assert q.IDLE_BELOW == 0.01 and "< bool 0.01" in next(r.expr for r in q.rules() if r.record == q.IDLE)


def test_every_rule_inlines_to_raw_series() -> None:
    for rule in q.rules():
        raw = q.inline(rule.expr)
        assert not RULE_NAME.search(raw), rule.record
        assert raw.count("(") == raw.count(")")
    assert "kube_pod_status_phase" in q.rule_expr(q.CLUSTER_ALLOCATED)


def test_inline_refuses_what_it_cannot_do() -> None:
    fake = (
        q.RecordRule("a:x:sum", "sum(up)", {}),
        q.RecordRule("b:x:sum", 'a:x:sum{job="x"}', {}),
        q.RecordRule("c:x:sum", "a:x:sum[5m]", {}),
        q.RecordRule("d:x:sum", "d:x:sum + 1", {}),
        q.RecordRule("e:x:sum", "1", {"le": "1"}),
        q.RecordRule("e:x:sum", "2", {"le": "2"}),
    )
    assert q.inline("a:x:sum * 2", fake) == "(sum(up)) * 2"
    assert q.inline("aa:x:sum + a:x:summary", fake) == "aa:x:sum + a:x:summary"  # whole names only
    with pytest.raises(ValueError, match="selector inside the rule"):
        q.inline("b:x:sum", fake)
    with pytest.raises(ValueError, match="selector inside the rule"):
        q.inline("c:x:sum", fake)
    with pytest.raises(ValueError, match="cycle"):
        q.inline("d:x:sum", fake)
    with pytest.raises(ValueError, match="2 label sets"):
        q.inline("e:x:sum", fake)


def test_raw_and_rules_window_queries_ask_the_same_questions() -> None:
    rules = q.window_query(WINDOW, use_rules=True)
    raw = q.window_query(WINDOW, use_rules=False)
    parts = ["allocated", "used", "measured", "idle", "capacity", "pending", "bucket"]
    for expr in (rules, raw):
        assert re.findall(rf'"{q.PART_LABEL}", "(\w+)"', expr) == parts
    assert "[30d]" in rules and "[30d:1m]" not in rules
    assert "[30d:1m]" in raw and not RULE_NAME.search(raw)
    assert f"sum_over_time({q.ALLOCATED}[30d])" in rules
    assert 'count_values("activity_pct"' in raw  # one evaluation of the activity for the histogram


def test_now_coverage_and_trend_queries() -> None:
    now = q.now_query(WINDOW, "label_team")
    assert not RULE_NAME.search(now) and "label_team" in now and "[30d:1h]" in now
    assert q.CLUSTER_ALLOCATABLE in q.coverage_query(WINDOW)
    assert "avg_over_time(gpustack:cluster_gpu_allocated:sum[1d])" in q.trend_query(True)
    raw_trend = q.trend_query(False)
    assert "[1d:1m]" in raw_trend and not RULE_NAME.search(raw_trend)


def test_window() -> None:
    w = q.Window(end=1000 + 86400 * 3, seconds=86400 * 3 + 7200, step_s=30)
    assert (w.range, w.step, w.days, w.start) == ("3d2h", "30s", 3, 1000 - 7200)


def test_union_tags_every_part() -> None:
    assert q.union({"a": "up", "b": "vector(1)"}) == (
        f'label_replace(up, "{q.PART_LABEL}", "a", "", "")\n or label_replace(vector(1), "{q.PART_LABEL}", "b", "", "")'
    )


def test_the_rules_read_only_exported_dcgm_metrics_and_kube_state_metrics() -> None:
    from gpustack.monitoring.counters import load_counters
    from gpustack.monitoring.promql import metric_names

    exported = set(load_counters().metrics)
    read = {m for r in q.rules() for m in metric_names(q.inline(r.expr))}
    # GPU_TEMP: the GPUs and MIG instances DCGM reports (shared GPUs' shares), whatever profiling collects
    dcgm = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP"}
    assert {m for m in read if m.startswith("DCGM_")} == dcgm
    assert {m for m in read if m.startswith("DCGM_")} <= exported
    assert {m for m in read if not m.startswith("DCGM_")} == {
        "kube_node_status_allocatable",
        "kube_node_status_capacity",  # time-sliced nodes: GPUs x replicas
        "kube_node_labels",  # GFD's nvidia.com/gpu.sharing-strategy
        "kube_pod_container_resource_requests",
        "kube_pod_status_phase",
    }


#: kube-state-metrics series the usage rules read, and the labels that identify one object's series: two
#: kube-state-metrics targets (a rollout, a second replica) export the same series, differing only in target
#: labels (instance, and pod/namespace/container where kube-state-metrics writes none)
KSM_IDENTITY = {
    "kube_pod_container_resource_requests": {"namespace", "pod", "container"},
    "kube_node_status_allocatable": {"node", "resource"},
    "kube_pod_status_phase": {"namespace", "pod"},
}
KSM_READ = re.compile(r"(" + "|".join(KSM_IDENTITY) + r")\{[^}]*\}")


def _dedupe_problems(expr: str) -> list[str]:
    """Every read of a kube-state-metrics series not directly inside ``max by (<its identity>) (...)`` or a
    ``group by (...)`` (1 per label set, however many targets export the series: the MIG share's fallback divisor
    reads ``group by (node)``)."""
    problems = []
    for m in KSM_READ.finditer(expr):
        before = re.search(r"(max|group) by \(([^)]*)\) \($", expr[: m.start()])
        if before and before.group(1) == "group":
            continue
        labels = {x.strip() for x in before.group(2).split(",")} if before else set()
        if not KSM_IDENTITY[m.group(1)] <= labels:
            problems.append(f"{m.group(0)} (max by {sorted(labels)})")
    return problems


def test_every_kube_state_metrics_reading_is_deduplicated_before_it_is_summed() -> None:
    from gpustack.diagnose.collect_prometheus import QUERIES
    from gpustack.monitoring.dashboard import load_capacity_dashboard, panel_queries

    exprs = {f"rule {r.record}": q.inline(r.expr) for r in q.rules()}
    exprs |= {"window (raw)": q.window_query(WINDOW, use_rules=False), "now": q.now_query(WINDOW, "label_team"),
              "coverage": q.coverage_query(WINDOW), "trend (raw)": q.trend_query(use_rules=False),
              "doctor gpu_allocatable": QUERIES["gpu_allocatable"]}  # fmt: skip
    exprs |= {f"panel {title}": expr for title, expr in panel_queries(load_capacity_dashboard())}
    reads = sum(len(KSM_READ.findall(e)) for e in exprs.values())
    assert reads > 20  # the check sees the reads: the rules, the raw queries, the dashboard's fallback
    problems = {name: p for name, e in exprs.items() if (p := _dedupe_problems(e))}
    assert not problems
    assert _dedupe_problems('sum by (node) (kube_node_status_allocatable{resource="nvidia_com_gpu"})')  # it can fail
    assert not _dedupe_problems('7 * group by (node) (kube_node_status_allocatable{resource=~"nvidia_com_mig_.+"})')


def test_the_raw_allocatable_reading_is_the_rules_expression_everywhere() -> None:
    """Doctor's query and the dashboard's fallback (without the rules) count the devices the device plugin
    advertises, deduplicated as the rule reads them; the rule weights each by its share of a GPU (MIG instances,
    time-sliced replicas: docs/gpu-sharing.md#report)."""
    from gpustack.diagnose.collect_prometheus import QUERIES
    from gpustack.monitoring.dashboard import load_capacity_dashboard, panel_queries

    devices = 'sum by (node) (max by (node, resource) (kube_node_status_allocatable{resource="nvidia_com_gpu"}))'
    assert QUERIES["gpu_allocatable"] == devices
    rule = q.rule_expr(q.ALLOCATABLE)
    assert rule.startswith(
        'sum by (node) ( max by (node, resource) (kube_node_status_allocatable{resource=~"nvidia_com_gpu(_shared)?|nvidia_com_mig_.+"})'
        " * on (node, resource) group_left () ((max by (node, resource) ( label_replace("
    )
    assert "gpustack" not in rule and "mig_slices" in rule  # inlined: the MIG slice table, no rule reads a rule
    fallbacks = [e for _, e in panel_queries(load_capacity_dashboard()) if "kube_node_status_allocatable" in e]
    assert len(fallbacks) == 2 and all(f"sum({q.ALLOCATABLE}) or sum({devices})" in e for e in fallbacks)
