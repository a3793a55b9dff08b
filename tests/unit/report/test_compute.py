"""gpustack.report.compute on hand-made Prometheus answers: grouping, prices, idle GPUs, percentiles,
capacity, notes, and the choice between recording rules and raw expressions."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gpustack.report import compute
from gpustack.report import queries as q
from gpustack.report.inputs import parse_prices
from gpustack.report.model import GroupRow, Report

END = 1_800_000_000.0
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"


def row(part: str, value: float, **labels: str) -> dict[str, Any]:
    return {"metric": {q.PART_LABEL: part, **labels}, "value": [END, str(value)]}


def gpu(part: str, minutes: float, ns: str, pod: str, node: str, gpu_id: str, model: str) -> dict[str, Any]:
    return row(
        part, minutes, namespace=ns, pod=pod, node=node, gpu=gpu_id, UUID=f"GPU-{node}-{gpu_id}", modelName=model
    )


WINDOW = [
    # 10 h of one GPU in ml/train on n1 (H100), 5 h measured at 40 %; 20 h of 2 GPUs in web/api on n2 (A100)
    row("allocated", 600, namespace="ml", pod="train", node="n1"),
    row("allocated", 1200, namespace="web", pod="api", node="n2"),
    row("allocated", 60, namespace="old", pod="gone", node="n3"),  # a node nobody reports a model for
    gpu("used", 120, "ml", "train", "n1", "0", H100),
    gpu("measured", 300, "ml", "train", "n1", "0", H100),
    gpu("idle", 0, "ml", "train", "n1", "0", H100),
    gpu("used", 0, "web", "api", "n2", "0", A100),
    gpu("measured", 600, "web", "api", "n2", "0", A100),
    gpu("idle", 600, "web", "api", "n2", "0", A100),
    gpu("used", 300, "web", "api", "n2", "1", A100),
    gpu("measured", 600, "web", "api", "n2", "1", A100),
    gpu("idle", 30, "web", "api", "n2", "1", A100),
    row("capacity", 10 * 1440),
    row("pending", 240),
    row("bucket", 630, le="0.01"),
    row("bucket", 1500, le="0.5"),
    row("bucket", 1500, le="+Inf"),
]
NOW = [
    row("allocatable", 4, node="n1"),
    row("allocatable", 8, node="n2"),
    row("allocated", 2, namespace="web", pod="api", node="n2"),
    row("starting", 1, namespace="ml", pod="next", node="n1"),
    row("pending", 4, namespace="ml", pod="wait"),
    row("pending", 0, namespace="ml", pod="zero"),
    row("models", 4, node="n1", modelName=H100),
    row("teams", END - 7200, namespace="ml", label_team="old-team"),
    row("teams", END - 60, namespace="ml", label_team="research"),
    row("teams", END - 60, namespace="web"),
    row("first", END - 2 * 86400),
]
TREND = [
    {"metric": {q.PART_LABEL: "allocated"}, "values": [[END - 86400 * (2 - i), str(1 + i)] for i in range(3)]},
    {"metric": {q.PART_LABEL: "allocatable"}, "values": [[END - 86400 * (2 - i), "12"] for i in range(3)]},
]


def build(**kw: Any) -> Report:
    results = compute.Results(WINDOW, NOW, TREND, use_rules=True)
    return compute.build(compute.Request(end=END, seconds=2 * 86400, **kw), results)


def groups(report: Report) -> dict[str, GroupRow]:
    return {g.key: g for g in report.groups}


def test_gpu_hours_by_namespace() -> None:
    r = build()
    g = groups(r)
    assert (g["ml"].allocated_h, g["ml"].used_h, g["ml"].measured_h, g["ml"].idle_h) == (10, 2, 5, 0)
    assert (g["web"].allocated_h, g["web"].used_h, g["web"].idle_h) == (20, 5, 10.5)
    assert g["ml"].activity_pct == pytest.approx(40.0) and g["old"].activity_pct is None  # nothing measured: no %
    assert [x.key for x in r.groups] == ["web", "ml", "old"]  # most allocated first
    assert (r.total.allocated_h, r.total.used_h, r.total.idle_h, r.total.measured_h) == (31, 7, 10.5, 25)
    assert r.capacity_h == 240 and r.pending_h == 4


def test_hours_follow_the_rules_interval() -> None:
    results = compute.Results(WINDOW, NOW, TREND, use_rules=True, step_s=30)
    r = compute.build(compute.Request(end=END, seconds=2 * 86400), results)
    assert groups(r)["ml"].allocated_h == 5  # 600 samples of 30 s


def test_grouping_by_team_node_and_model() -> None:
    assert {k: g.allocated_h for k, g in groups(build(by="team")).items()} == {
        "research": 10,  # the value ml carried last
        "(none)": 21,  # web has no team label; "old" is not in kube_namespace_labels any more
    }
    assert {k: g.allocated_h for k, g in groups(build(by="node")).items()} == {"n1": 10, "n2": 20, "n3": 1}
    by_model = groups(build(by="model"))
    # n2's model comes from its GPUs' usage rows (no DCGM "now"), n3 has none
    assert {k: g.allocated_h for k, g in by_model.items()} == {H100: 10, A100: 20, "(unknown)": 1}
    assert by_model[A100].idle_h == 10.5


def test_team_label_is_configurable() -> None:
    now = [*NOW, row("teams", END - 30, namespace="web", label_example_com_owner="shop")]
    results = compute.Results(WINDOW, now, TREND, use_rules=True)
    r = compute.build(compute.Request(end=END, seconds=2 * 86400, by="team", team_label="example.com/owner"), results)
    assert set(groups(r)) == {"shop", "(none)"}


def test_prices_and_unpriced_hours() -> None:
    r = build(prices=parse_prices(["H100=4,A100=2"]))
    g = groups(r)
    assert (g["ml"].cost, g["web"].cost) == (40, 40)
    assert g["old"].cost is None and g["old"].unpriced_h == 1
    assert r.total.cost == 80 and r.total.unpriced_h == 1
    assert any("1.0 GPU-hours have no price (models: (unknown))" in n for n in r.notes)
    flat = build(prices=parse_prices(["3"]))
    assert flat.total.cost == 93 and not any("no price" in n for n in flat.notes)
    assert build().total.cost is None  # no --price: no cost column at all


def test_idle_gpus_most_idle_first_with_the_pods_still_running() -> None:
    idle = build().idle
    assert [(i.namespace, i.pod, i.node, i.gpu, i.idle_h, i.held_h, i.running_now) for i in idle] == [
        ("web", "api", "n2", "0", 10.0, 10.0, True),
        ("web", "api", "n2", "1", 0.5, 10.0, True),
    ]


def test_capacity_now_and_pending() -> None:
    r = build()
    assert [(n.node, n.model, n.allocatable, n.allocated, n.starting, n.free) for n in r.nodes] == [
        ("n1", H100, 4, 0, 1, 3),
        ("n2", A100, 8, 2, 0, 6),
    ]
    assert (r.allocatable_now, r.allocated_now, r.starting_now, r.free_now, r.pending_now) == (12, 2, 1, 9, 4)
    assert [(p.namespace, p.pod, p.gpus) for p in r.pending] == [("ml", "wait", 4)]


def test_trend_and_forecast() -> None:
    r = build()
    assert [(p.allocated, p.allocatable) for p in r.trend] == [(1, 12), (2, 12), (3, 12)]
    assert r.forecast is not None and r.forecast.status == "not enough data" and r.forecast.capacity == 12


def test_percentiles_like_histogram_quantile() -> None:
    r = build()
    # 630 of 1,500 GPU-minutes at or below 1 %, all at or below 50 %
    assert r.percentiles["p50"] == pytest.approx(0.01 + 0.49 * (750 - 630) / (1500 - 630))
    # the promtool unit test's buckets (tests/prometheus/rules_tests/usage.yaml): 1 at 0, 2 at 0.5
    buckets = {0.01: 1.0, 0.4: 1.0, 0.5: 3.0, 1.0: 3.0, math.inf: 3.0}
    assert compute.quantile(0.5, buckets) == pytest.approx(0.425)
    assert compute.quantile(0.2, buckets) == pytest.approx(0.006)
    assert compute.quantile(1.0, {0.5: 3.0, math.inf: 4.0}) == 0.5  # the rank lands in +Inf
    assert compute.quantile(0.5, {0.5: 0.0, math.inf: 0.0}) is None
    assert compute.quantile(0.5, {0.5: 2.0}) is None  # no +Inf bucket


def test_raw_percent_counts_fill_the_same_buckets_as_the_rules() -> None:
    raw = [row("bucket", n, activity_pct=p) for p, n in (("-0", 630), ("30", 500), ("50", 370), ("100", 10))]
    bounds = q.bucket_bounds()
    counts = compute.bucket_counts(raw, bounds)
    assert counts[0.01] == 630 and counts[0.3] == 1130 and counts[0.5] == counts[0.9] == 1500
    assert counts[1.0] == counts[math.inf] == 1510
    assert all(le == math.inf or round(le * 100) == le * 100 for le in bounds)  # whole percents


def test_notes() -> None:
    r = build()
    assert not any(n.startswith("GPU data starts at") for n in r.notes)  # the data covers the window
    late = [*NOW[:-1], row("first", END - 86400)]
    notes = compute.build(compute.Request(END, 2 * 86400), compute.Results(WINDOW, late, TREND, True)).notes
    assert any(n.startswith("GPU data starts at") and "1d of the 2d asked for" in n for n in notes)
    none = compute.build(compute.Request(END, 2 * 86400), compute.Results([], [], [], True)).notes
    assert any(n.startswith("no GPU data in the window") for n in none)
    assert any("allocated GPU-hours have no DCGM activity" in n for n in r.notes)  # 6 of 31 unmeasured
    no_team = [*NOW[:7], row("teams", END, namespace="ml"), row("first", END - 2 * 86400)]
    team_notes = compute.build(
        compute.Request(END, 2 * 86400, by="team"), compute.Results(WINDOW, no_team, TREND, True)
    ).notes
    assert any("no namespace carries the label 'team'" in n and "metricLabelsAllowlist" in n for n in team_notes)


RULES = [{"name": q.GROUP, "interval": 30, "rules": [{"name": q.ALLOCATED, "health": "ok"}]}]


@pytest.mark.parametrize(
    ("groups_", "rules_first", "raw_first", "use", "why"),
    [
        ([], END, END, False, "not loaded"),
        ([{"name": q.GROUP, "rules": [{"name": q.ACTIVITY, "health": "err"}]}], END, END, False, "failing"),
        (RULES, None, END, False, "no data in the window yet"),
        (RULES, END - 3600, END - 30 * 86400, False, "recording rules start at"),
        (RULES, END - 30 * 86400 + 3600, END - 30 * 86400, True, ""),
        (RULES, END - 86400, None, True, ""),
    ],
)
def test_recording_rules_or_raw(
    groups_: list[dict[str, Any]], rules_first: float | None, raw_first: float | None, use: bool, why: str
) -> None:
    got, reason = compute.use_recording_rules(groups_, rules_first, raw_first)
    assert got is use and why in reason


def test_rule_interval() -> None:
    assert compute.rule_interval(RULES) == 30
    assert compute.rule_interval([]) == 60
    assert compute.rule_interval([{"name": q.GROUP, "interval": "bogus"}]) == 60
