"""``gpustack report`` against a real Prometheus holding 30 days of synthetic history with known answers
(tests/prometheus/history_scenarios.py ``ci_history``), once from raw series and once from gpustack's recording rules."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

import pytest

from gpustack.cli.app import main
from gpustack.report import forecast as fc
from gpustack.report import queries as q
from gpustack.report.compute import Request, quantile
from gpustack.report.inputs import iso, parse_prices
from gpustack.report.model import Report
from gpustack.report.source import Prometheus, make_report
from gpustack.runners.http import DirectEndpoint

from .history import DAY, MINUTE, Backfilled
from .history_scenarios import A100, H100
from .releases import Release

REL = 0.01  # GPU-hours within 1 %


def run(pair: Backfilled, server: str = "rules", mode: str = "auto", **kw: Any) -> tuple[Report, int]:
    url = (pair.rules if server == "rules" else pair.raw).url
    prom = Prometheus(DirectEndpoint(url))
    request = Request(end=pair.history.end, seconds=30 * DAY, **kw)
    report, _ = make_report(prom, request, mode)
    return report, prom.requests


def by_key(report: Report) -> dict[str, Any]:
    return {g.key: g for g in report.groups}


@pytest.fixture(scope="module")
def rules_report(usage_history: Backfilled) -> Report:
    return run(usage_history)[0]


@pytest.mark.both_prometheus  # version-sensitive: also on the oldest supported (docs/operations.md)
def test_a_pod_holding_2_gpus_for_3_hours_reports_6_gpu_hours(rules_report: Report) -> None:
    ml = by_key(rules_report)["ml"]  # train-a is the only pod of ml that ran
    assert ml.allocated_h == pytest.approx(6.0, rel=REL)
    assert ml.used_h == pytest.approx(3.0, rel=REL)  # graphics-engine activity 0.5, not GPU_UTIL's 90 %
    assert ml.idle_h == 0


@pytest.mark.both_prometheus  # version-sensitive: also on the oldest supported (docs/operations.md)
def test_every_namespace_allocation_and_usage(usage_history: Backfilled, rules_report: Report) -> None:
    expected = usage_history.expected
    got = {k: g.allocated_h for k, g in by_key(rules_report).items()}
    assert got == pytest.approx(expected.allocated_by_namespace, rel=REL)
    assert rules_report.total.allocated_h == pytest.approx(sum(expected.allocated_by_namespace.values()), rel=REL)
    assert by_key(rules_report)["infra"].used_h == pytest.approx(expected.used["infra", "serve-0"], rel=REL)
    assert rules_report.source == "recording rules"


@pytest.mark.both_prometheus  # version-sensitive: also on the oldest supported (docs/operations.md)
def test_idle_gpus_are_found_with_the_pods_holding_them(usage_history: Backfilled, rules_report: Report) -> None:
    idle = {(i.namespace, i.pod, i.gpu): i for i in rules_report.idle}
    assert set(idle) == set(usage_history.expected.idle)
    for key, hours in usage_history.expected.idle.items():
        assert idle[key].idle_h == pytest.approx(hours, rel=REL), key
    assert idle["infra", "serve-0", "2"].running_now and idle["infra", "serve-0", "2"].node == "node-b"
    assert not idle["vision", "notebook-x", "0"].running_now
    assert [i.pod for i in rules_report.idle] == ["serve-0", "notebook-x"]  # most idle first


@pytest.mark.both_prometheus
def test_a_recorded_minute_on_the_window_start_counts_on_2x_only(
    usage_history: Backfilled, rules_report: Report, prometheus_release: Release
) -> None:
    """Prometheus 3's range selectors are left-open: notebook-x held its GPU, idle, for exactly 600 minutes, and
    3.x counts 600. 2.x's closed ranges also see the last sample at the start of the activity rule's
    ``[1m]`` after the pod ended (this history is minute-aligned): one minute more (docs/operations.md)."""
    extra = 0.0 if prometheus_release.version_tuple >= (3,) else 1 / 60
    idle = {(i.namespace, i.pod, i.gpu): i for i in rules_report.idle}
    assert usage_history.expected.idle["vision", "notebook-x", "0"] == 10.0
    assert idle["vision", "notebook-x", "0"].idle_h == pytest.approx(10.0 + extra, abs=1e-9)
    assert idle["vision", "notebook-x", "0"].held_h == pytest.approx(10.0 + extra, abs=1e-9)
    assert by_key(rules_report)["ml"].allocated_h == pytest.approx(6.0, abs=1e-9), "allocation: the same on both"


def test_the_forecast_on_a_linear_trend_gives_the_right_date(usage_history: Backfilled, rules_report: Report) -> None:
    expected = usage_history.expected
    assert [p.allocated for p in rules_report.trend] == pytest.approx(expected.daily, abs=0.005)
    end = usage_history.history.end
    # the designed line: day i (ending at end - (29 - i) days) averages 1 + 0.1 i GPUs; 12 allocatable
    intercept, slope = fc.least_squares([i - 29 for i in range(30)], expected.daily)
    want = end + (expected.capacity - intercept) / slope * DAY
    assert (intercept, slope) == pytest.approx((3.9, 0.1))
    f = rules_report.forecast
    assert f is not None and f.status == fc.OK and f.capacity == expected.capacity
    assert f.when is not None and abs(f.when - want) < DAY / 4, (iso(f.when), iso(want))
    assert f.describe().startswith("+0.10 GPUs/day; reaches 12 GPUs around ")


def test_grouping_by_team_model_and_node(usage_history: Backfilled) -> None:
    alloc = usage_history.expected.allocated_by_namespace
    teams = {k: g.allocated_h for k, g in by_key(run(usage_history, by="team")[0]).items()}
    # vision was "perception" until day 20: the label it carried last counts
    assert teams == pytest.approx(
        {"research": alloc["ml"] + alloc["vision"], "platform": alloc["infra"], "(none)": alloc["batch"]}, rel=REL
    )
    models = {k: g.allocated_h for k, g in by_key(run(usage_history, by="model")[0]).items()}
    assert models == pytest.approx(
        {H100: alloc["ml"], A100: alloc["vision"] + 96.0, "(unknown)": 720.0 + alloc["batch"]}, rel=REL
    )
    nodes = by_key(run(usage_history, by="node")[0])
    assert nodes["node-b"].idle_h == pytest.approx(58.0, rel=REL)
    assert nodes["node-c"].measured_h == 0  # no dcgm-exporter there


def test_prices_per_model_and_default(usage_history: Backfilled) -> None:
    alloc = usage_history.expected.allocated_by_namespace
    report = run(usage_history, prices=parse_prices(["H100=4,A100=2", "1"]))[0]
    cost = {k: g.cost for k, g in by_key(report).items()}
    assert cost == pytest.approx(
        {"ml": 4 * alloc["ml"], "vision": 2 * alloc["vision"], "infra": 2 * 96 + 720, "batch": alloc["batch"]},
        rel=REL,
    )
    assert not [n for n in report.notes if "no price" in n]
    unpriced = run(usage_history, prices=parse_prices(["H100=4.5"]))[0]
    assert by_key(unpriced)["ml"].cost == pytest.approx(27.0, rel=REL)
    assert by_key(unpriced)["batch"].cost is None
    assert any("have no price" in n and "NVIDIA A100-SXM4-80GB" in n for n in unpriced.notes)


def test_capacity_now_and_pending_demand(usage_history: Backfilled, rules_report: Report) -> None:
    e = usage_history.expected
    r = rules_report
    assert (r.allocatable_now, r.allocated_now, r.starting_now) == (e.allocatable_now, e.allocated_now, e.starting_now)
    assert r.free_now == e.allocatable_now - e.allocated_now - e.starting_now
    assert [(p.namespace, p.pod, p.gpus) for p in r.pending] == [("ml", "wait-0", e.pending_now)]
    assert r.pending_h == pytest.approx(e.pending_h, rel=REL)
    assert {n.node: n.model for n in r.nodes} == {"node-a": H100, "node-b": A100, "node-c": "(unknown)"}


def test_utilisation_percentiles(rules_report: Report) -> None:
    # GPU-minutes held: 3,480 idle (notebook-x 600, serve-0 GPU 2 2,880), 2,880 at 0.3, 360 at 0.5
    minutes = {0.0: 600 + 2880, 0.3: 2880, 0.5: 2 * 180}
    bounds = [0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, math.inf]
    buckets = {b: float(sum(n for v, n in minutes.items() if v <= b)) for b in bounds}
    for name, phi in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        want = quantile(phi, buckets)
        assert want is not None
        assert rules_report.percentiles[name] == pytest.approx(want, abs=0.005), name


@pytest.fixture(scope="module")
def both_paths(usage_history: Backfilled) -> dict[str, tuple[Report, int]]:
    """The 30-day report (at 2 per GPU-hour) from the raw expressions and from the rules, with the requests each
    took (computed once: the raw path re-joins 30 days of raw series)."""
    return {server: run(usage_history, server, prices=parse_prices(["2"])) for server in ("raw", "rules")}


@pytest.mark.both_prometheus  # version-sensitive: also on the oldest supported (docs/operations.md)
def test_raw_expressions_give_the_same_report_as_the_rules(both_paths: dict[str, tuple[Report, int]]) -> None:
    raw, raw_requests = both_paths["raw"]
    rules, rules_requests = both_paths["rules"]
    assert raw.source == "raw expressions" and rules.source == "recording rules"
    assert any("not loaded" in n for n in raw.notes)
    from gpustack.report.render import to_json

    def comparable(r: Report) -> dict[str, Any]:
        data = to_json(r)
        return {k: v for k, v in data.items() if k not in {"source", "queries", "notes"}}

    assert comparable(raw) == comparable(rules)
    assert (raw_requests, rules_requests) == (10, 5)  # rules API, (coverage), window (7 parts raw), now, trend


def test_cli_outputs(
    usage_history: Backfilled, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    until = iso(usage_history.history.end)
    base = ["report", "--prometheus-url", usage_history.rules.url, "--until", until, "--price", "H100=4,A100=2,1"]
    with pytest.raises(SystemExit) as exit_info:
        main([*base, "-o", "json"])
    assert exit_info.value.code in (0, None)
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == "recording rules" and data["window"]["end"] == until
    assert {g["key"] for g in data["groups"]} == {"ml", "vision", "infra", "batch"}
    assert data["forecast"]["status"] == fc.OK

    with pytest.raises(SystemExit) as exit_info:
        main([*base, "-o", "csv", "--by", "team"])
    assert exit_info.value.code in (0, None)
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["key"] for r in rows][-1] == "total" and {r["by"] for r in rows} == {"team"}
    assert float(rows[-1]["allocated_gpu_hours"]) == pytest.approx(data["total"]["allocated_gpu_hours"])

    with pytest.raises(SystemExit) as exit_info:
        main(base)
    assert exit_info.value.code in (0, None)
    out = capsys.readouterr().out
    assert "GPU-hours by namespace" in out and "Idle allocated GPUs" in out and "forecast:" in out
    assert max(len(line) for line in out.splitlines()) <= 80, out


def test_window_shorter_than_a_week_says_not_enough_data(usage_history: Backfilled) -> None:
    prom = Prometheus(DirectEndpoint(usage_history.rules.url))
    report, _ = make_report(prom, Request(end=usage_history.history.end, seconds=3 * DAY))
    assert report.forecast is not None and report.forecast.status == fc.NOT_ENOUGH
    assert len(report.trend) == 3
    assert by_key(report)["infra"].allocated_h == pytest.approx(2 * 48 + 72, rel=REL)
    assert MINUTE == 60


# --- the "GPU capacity and cost" dashboard, every panel against the same history -------------------------

PANEL_VALUES = {"__range": "30d", "team_label": "label_team", "price": "2"}


def panel_results(pair: Backfilled) -> dict[str, list[list[dict[str, Any]]]]:
    """Every panel's targets evaluated as Grafana would over the 30 days: instant targets at the end,
    time-series targets as range queries at a 1 h step."""
    from gpustack.monitoring.dashboard import concretize, data_panels, load_capacity_dashboard

    end = pair.history.end
    out: dict[str, list[list[dict[str, Any]]]] = {}
    for panel in data_panels(load_capacity_dashboard()):
        for target in panel["targets"]:
            expr = concretize(target["expr"], PANEL_VALUES)
            if target.get("instant"):
                result = pair.rules.api("query", {"query": expr, "time": str(end)})["result"]
            else:
                params = {"query": expr, "start": str(end - 30 * DAY), "end": str(end), "step": "3600s"}
                result = pair.rules.api("query_range", params)["result"]
            out.setdefault(panel["title"], []).append(result)
    return out


def scalar(results: list[list[dict[str, Any]]], i: int = 0) -> float:
    [row] = results[i]
    return float(row["value"][1])


def test_every_capacity_panel_returns_the_report_numbers(usage_history: Backfilled, rules_report: Report) -> None:
    panels = panel_results(usage_history)
    empty = [title for title, results in panels.items() if not all(results)]
    assert not empty, f"panels without data over the known history: {empty}"
    r = rules_report
    assert scalar(panels["GPUs allocatable"]) == r.allocatable_now == 12
    assert (scalar(panels["GPUs allocated"]), scalar(panels["GPUs starting"])) == (r.allocated_now, r.starting_now)
    assert scalar(panels["GPUs free"]) == r.free_now and scalar(panels["Pending GPU demand"]) == r.pending_now
    assert scalar(panels["GPU-hours allocated"]) == pytest.approx(r.total.allocated_h, rel=REL)
    assert scalar(panels["GPU-hours used"]) == pytest.approx(r.total.used_h, rel=REL)
    assert scalar(panels["GPU-hours idle (allocated)"]) == pytest.approx(r.total.idle_h, rel=REL)
    for i, name in enumerate(("p50", "p90", "p99")):
        assert scalar(panels["Activity of allocated GPUs (percentiles)"], i) == pytest.approx(
            r.percentiles[name], abs=0.005
        )
    by_ns = {
        row["metric"]["namespace"]: float(row["value"][1]) for row in panels["GPU-hours allocated by namespace"][0]
    }
    assert by_ns == pytest.approx({g.key: g.allocated_h for g in r.groups}, rel=REL)
    cost = {
        row["metric"]["namespace"]: float(row["value"][1])
        for row in panels["Cost by namespace at $price USD per GPU-hour"][0]
    }
    assert cost == pytest.approx({g.key: 2 * g.allocated_h for g in r.groups}, rel=REL)
    teams = {
        row["metric"].get("label_team", ""): float(row["value"][1]) for row in panels["GPU-hours allocated by team"][0]
    }
    alloc = usage_history.expected.allocated_by_namespace
    assert teams == pytest.approx(
        {"research": alloc["ml"] + alloc["vision"], "platform": alloc["infra"], "": alloc["batch"]}, rel=REL
    )
    idle = {(row["metric"]["namespace"], row["metric"]["pod"]): float(row["value"][1])
            for row in panels["Idle allocated GPU-hours by pod"][0]}  # fmt: skip
    assert idle == pytest.approx({("infra", "serve-0"): 48.0, ("vision", "notebook-x"): 10.0}, rel=REL)
    free = {row["metric"]["node"]: float(row["value"][1]) for row in panels["Free GPUs by node"][0]}
    assert free == {n.node: n.free for n in r.nodes}
    [[pending]] = panels["Pending pods"]
    assert pending["metric"]["pod"] == "wait-0" and float(pending["value"][1]) == 4
    series = {row["metric"].get("__name__"): row for rows in panels["Allocation vs capacity"] for row in rows}
    assert set(series) == {"gpustack:cluster_gpu_allocatable:sum", "gpustack:cluster_gpu_allocated:sum",
                           "gpustack:cluster_gpu_pending:sum"}  # fmt: skip
    assert len(series["gpustack:cluster_gpu_allocated:sum"]["values"]) >= 30 * 24
    # 30 days ahead on the minute samples of a line rising 0.1 GPU a day: about 3.9 + 3 = 6.9 GPUs
    assert 5.5 < scalar(panels["Allocated GPUs in 30 days (linear trend)"]) < 8.5


# --- kube-state-metrics rolls out: two targets for an hour (history_scenarios.py ci_history) ------------------------

#: the usage rules' request and allocatable expressions before the dedupe: a plain sum adds both copies
NAIVE_ALLOCATED = (
    'sum by (namespace, pod, node) (kube_pod_container_resource_requests{resource="nvidia_com_gpu", node!=""})'
    ' and on (namespace, pod) (max by (namespace, pod) (kube_pod_status_phase{phase="Running"}) == 1)'
)
NAIVE_ALLOCATABLE = 'sum by (node) (kube_node_status_allocatable{resource="nvidia_com_gpu"})'


def instant(pair: Backfilled, server: str, expr: str, at: int) -> float:
    prom = pair.rules if server == "rules" else pair.raw
    [row] = prom.api("query", {"query": expr, "time": str(at)})["result"]
    return float(row["value"][1])


@pytest.mark.both_prometheus  # version-sensitive: also on the oldest supported (docs/operations.md)
def test_a_kube_state_metrics_rollout_counts_each_gpu_hour_once(
    usage_history: Backfilled, both_paths: dict[str, tuple[Report, int]], prometheus_release: Release
) -> None:
    """For an hour Prometheus scrapes the old and the new kube-state-metrics pod (train-a holds 2 GPUs, base-0
    one, 12 allocatable): every series is there twice, yet each GPU-hour counts once, on both paths."""
    e = usage_history.expected
    lo, hi = e.rollout
    mid = (lo + hi) // 2
    # the data does hold two copies: a plain sum doubles, the rules and the report's expressions do not
    assert instant(usage_history, "raw", f"sum({NAIVE_ALLOCATABLE})", mid) == 24
    assert instant(usage_history, "raw", f"sum({q.rule_expr(q.CLUSTER_ALLOCATABLE)})", mid) == 12
    assert instant(usage_history, "rules", q.CLUSTER_ALLOCATABLE, mid) == 12
    assert instant(usage_history, "rules", q.CLUSTER_ALLOCATED, mid) == 3
    # the dashboard's fallback where the rules are not loaded (the raw server)
    from gpustack.monitoring.dashboard import load_capacity_dashboard, panel_queries

    [allocatable] = [e for t, e in panel_queries(load_capacity_dashboard()) if t == "GPUs allocatable"]
    assert instant(usage_history, "raw", allocatable, mid) == 12
    # over the 60 minutes of overlap, and the minutes the old pod's last sample stays visible after it (a
    # backfilled TSDB has no staleness marker; 5-minute lookback, left-open on 3.x), a plain sum counts
    # 2 (train-a) + 1 (base-0) GPUs and 12 allocatable twice; the rules once
    minutes = 60 + (4 if prometheus_release.version_tuple >= (3,) else 5)
    span, at = 80 * MINUTE, hi + 10 * MINUTE
    for naive, rule, doubled in ((NAIVE_ALLOCATED, q.ALLOCATED, 3), (NAIVE_ALLOCATABLE, q.ALLOCATABLE, 12)):
        plain = instant(usage_history, "raw", f"sum(sum_over_time(({naive})[{span}s:1m]))", at)
        once = instant(usage_history, "raw", f"sum(sum_over_time(({q.rule_expr(rule)})[{span}s:1m]))", at)
        recorded = instant(usage_history, "rules", f"sum(sum_over_time({rule}[{span}s]))", at)
        assert (plain - once, recorded) == (doubled * minutes, once), rule
    # the report: every known figure exact, from the recorded rules and from the raw expressions alike
    alloc = e.allocated_by_namespace
    for server, (report, _) in both_paths.items():
        got = {k: g.allocated_h for k, g in by_key(report).items()}
        assert got == pytest.approx(alloc, abs=1e-9), server
        assert report.capacity_h == pytest.approx(e.capacity * 30 * 24, abs=1e-9), server  # 12.0 GPUs, not 12.4
        unmeasured = report.total.allocated_h - report.total.measured_h
        [note] = [n for n in report.notes if "no DCGM activity" in n]
        assert note.startswith(f"{unmeasured:,.1f} allocated GPU-hours") and unmeasured < 720 + alloc["batch"] + 0.1
