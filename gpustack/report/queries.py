"""The report's PromQL, built from the shipped recording rules. Pure.

One source of truth: ``gpu-usage.rules.yaml``. With the rules running in Prometheus (and covering the
window) the report reads the recorded series: GPU-hours = ``sum_over_time(<rule>[window])`` x the group's
interval. Without them (a cluster gpustack did not build, or rules younger than the window) it evaluates
the very same expressions, with the rules they reference inlined, in a subquery at the rules' interval:
``sum_over_time((<expr>)[window:1m])`` -- identical numbers, at the price of re-joining raw series at
every minute of the window (``scripts/bench_report.py`` prints both).

Every kube-state-metrics series is deduplicated (``max by`` its identifying labels) before it is summed, in
the rules and so in every raw expression built from them: two kube-state-metrics targets (a rollout, a
second replica) export the same series (docs/report.md "Counting each GPU-hour once").

Queries that the report sends together are tagged and joined with ``or`` (:func:`union`), so one HTTP
request answers several questions: a window query (GPU-hours per pod and GPU, totals, the activity
histogram), a "now" query (capacity at the end of the window, GPU models, teams, how far back data goes)
and a range query (daily allocation for the trend). Without the rules the window's parts go one request
each (:func:`window_parts`): each re-joins a whole window of raw series, and Prometheus' query timeout
(2 minutes by default) applies per request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from gpustack.monitoring.rules import load_usage_rules
from gpustack.report.inputs import format_duration

GROUP = "gpustack-usage.rules"
PART_LABEL = "gpustack_part"
#: the label ``union`` tags each part with
STEP_S = 60  # the rules' group interval, and the raw subqueries' resolution
COVERAGE_STEP = "1h"
IDLE_BELOW = 0.01  # an allocated GPU below 1 % activity in a minute is idle (the rules' threshold)

ALLOCATED = "gpustack:gpu_allocated:sum"
STARTING = "gpustack:gpu_starting:sum"
PENDING = "gpustack:gpu_pending:sum"
ALLOCATABLE = "gpustack:gpu_allocatable:sum"
CLUSTER_ALLOCATABLE = "gpustack:cluster_gpu_allocatable:sum"
CLUSTER_ALLOCATED = "gpustack:cluster_gpu_allocated:sum"
CLUSTER_PENDING = "gpustack:cluster_gpu_pending:sum"
ACTIVITY = "gpustack:gpu_activity:ratio"
IDLE = "gpustack:gpu_idle:share"  # GPU share held and idle per minute (a MIG instance or time-sliced GPU: < 1)
USED = "gpustack:gpu_used:ratio"  # activity x the share of a GPU the row stands for
SHARE = "gpustack:gpu_share:ratio"  # 1 for a whole GPU, 1/7 for a 1g MIG instance, 1/replicas when time-sliced
BUCKET = "gpustack:gpu_activity:bucket"
#: labels of the per-GPU rows (the activity rule's labels)
GPU_LABELS = ("namespace", "pod", "node", "gpu", "UUID", "modelName")


@dataclass(frozen=True)
class RecordRule:
    record: str
    expr: str
    labels: Mapping[str, str]


@cache
def _rules() -> tuple[RecordRule, ...]:
    data = load_usage_rules()
    [group] = [g for g in data["groups"] if g["name"] == GROUP]
    return tuple(
        RecordRule(str(r["record"]), " ".join(str(r["expr"]).split()), dict(r.get("labels") or {}))
        for r in group["rules"]
        if "record" in r
    )


def rules(data: Mapping[str, Any] | None = None) -> tuple[RecordRule, ...]:
    """The group's recording rules in order (from the shipped file unless ``data`` is given)."""
    if data is None:
        return _rules()
    [group] = [g for g in data["groups"] if g["name"] == GROUP]
    return tuple(
        RecordRule(str(r["record"]), " ".join(str(r["expr"]).split()), dict(r.get("labels") or {}))
        for r in group["rules"]
        if "record" in r
    )


def _reference(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w:]){re.escape(name)}(?![\w:])")


#: how a rule reads another rule of the group: only the sample recorded at this evaluation. A plain reference would
#: see the last sample for 5 minutes after the series ended (the lookback delta) wherever no staleness marker ends
#: it -- a backfill (``promtool tsdb create-blocks-from rules``), a Prometheus restart, a skipped evaluation -- and
#: count a GPU measured, used or allocated for minutes it was not (issue 32, item 10; docs/report.md). 30 s: less
#: than the group's 1 m interval, so never the previous evaluation's sample.
FRESH_RANGE = "30s"


def fresh(name: str) -> str:
    """The form in which a rule reads rule ``name`` (``last_over_time(name[30s])``)."""
    return f"last_over_time({name}[{FRESH_RANGE}])"


def _fresh_reference(name: str) -> re.Pattern[str]:
    return re.compile(rf"last_over_time\(\s*{re.escape(name)}\s*\[{FRESH_RANGE}\]\s*\)")


def inline(expr: str, rule_set: tuple[RecordRule, ...] | None = None) -> str:
    """``expr`` with every reference to a recording rule of the group replaced by that rule's expression
    (recursively), so it evaluates against raw series only. A rule recorded under several label sets
    (the buckets) cannot be inlined; a reference with a selector or range (``rule{...}``, ``rule[5m]``) is
    refused -- the rules file never writes one (test_report_queries.py keeps it so) -- except the form in which
    rules read each other, :func:`fresh` (``last_over_time(rule[30s])``: the sample of this evaluation), which is
    the rule's expression evaluated now."""
    table: dict[str, list[RecordRule]] = {}
    for rule in rule_set or rules():
        table.setdefault(rule.record, []).append(rule)
    out = expr
    for _ in range(len(table) + 1):
        changed = False
        for name, defs in table.items():
            replacement = f"({defs[0].expr})" if len(defs) == 1 else ""
            if replacement and _fresh_reference(name).search(out):
                out = _fresh_reference(name).sub(lambda _m: replacement, out)  # noqa: B023 -- used at once
                changed = True
            pattern = _reference(name)
            match = pattern.search(out)
            if not match:
                continue
            if len(defs) != 1:
                raise ValueError(f"{name} is recorded under {len(defs)} label sets: cannot inline it")
            follow = out[match.end() : match.end() + 1]
            if follow in ("{", "["):
                raise ValueError(f"cannot inline {name}{follow}...: write the selector inside the rule")
            out = pattern.sub(lambda _m: replacement, out)  # noqa: B023 -- used at once, in this iteration
            changed = True
        if not changed:
            return out
    raise ValueError(f"recording rules reference each other in a cycle: {expr}")


def rule_expr(name: str, rule_set: tuple[RecordRule, ...] | None = None) -> str:
    """The raw expression of a rule recorded under one label set (references inlined)."""
    defs = [r for r in (rule_set or rules()) if r.record == name]
    if len(defs) != 1:
        raise ValueError(f"{name}: {len(defs)} rules in {GROUP}")
    return inline(defs[0].expr, rule_set)


def buckets(rule_set: tuple[RecordRule, ...] | None = None) -> list[tuple[str, str]]:
    """``(le, raw expression)`` for every activity-histogram bucket rule."""
    return [(r.labels["le"], inline(r.expr, rule_set)) for r in (rule_set or rules()) if r.record == BUCKET]


def tag(expr: str, part: str) -> str:
    return f'label_replace({expr}, "{PART_LABEL}", "{part}", "", "")'


def union(parts: Mapping[str, str]) -> str:
    """One expression answering every part; each result row carries ``gpustack_part="<name>"``."""
    return "\n or ".join(tag(expr, name) for name, expr in parts.items())


@dataclass(frozen=True)
class Window:
    """What the report reads: ``seconds`` back from ``end`` (Unix time), at ``step_s`` per recorded sample."""

    end: float
    seconds: int
    step_s: int = STEP_S

    @property
    def start(self) -> float:
        return self.end - self.seconds

    @property
    def range(self) -> str:
        return format_duration(self.seconds)

    @property
    def step(self) -> str:
        return format_duration(self.step_s)

    @property
    def days(self) -> int:
        return self.seconds // 86400


def over_window(name: str, fn: str, window: Window, use_rules: bool, by: tuple[str, ...] | None = None) -> str:
    """``fn`` (``sum_over_time`` / ``count_over_time`` / ...) of a recorded series over the window: the
    series itself with the rules, the inlined expression in a subquery at the rules' interval without."""
    inner = f"{name}[{window.range}]" if use_rules else f"({rule_expr(name)})[{window.range}:{window.step}]"
    expr = f"{fn}({inner})"
    return f"sum by ({', '.join(by)}) ({expr})" if by else f"sum({expr})"


def bucket_bounds() -> list[float]:
    """The activity histogram's upper bounds (``le`` of the bucket rules; ``inf`` for ``+Inf``)."""
    return sorted(float(r.labels["le"]) for r in rules() if r.record == BUCKET)


def bucket_parts(window: Window, use_rules: bool) -> str:
    """Allocated GPU-minutes by activity over the window. With the rules: the recorded cumulative buckets
    (one row per ``le``). Without: one subquery counting GPU-minutes per activity percent, rounded up
    (``activity_pct="37"``: above 0.36, at most 0.37), which :func:`gpustack.report.compute.build` sums into
    the same buckets -- every bucket bound is a whole percent, so the counts are the rules' exactly, for one
    evaluation of the activity instead of one per bucket."""
    if use_rules:
        return f"sum by (le) (sum_over_time({BUCKET}[{window.range}]))"
    percent = f"ceil(({rule_expr(ACTIVITY)}) * 100 - 1e-9)"
    return (
        f'sum by (activity_pct) (sum_over_time(count_values("activity_pct", {percent})[{window.range}:{window.step}]))'
    )


def window_parts(window: Window, use_rules: bool) -> dict[str, str]:
    """GPU-hours (in recorded samples) per pod and node, per pod and GPU, cluster totals, the histogram."""
    pod = ("namespace", "pod", "node")
    return {
        "allocated": over_window(ALLOCATED, "sum_over_time", window, use_rules, pod),
        "used": over_window(USED, "sum_over_time", window, use_rules, GPU_LABELS),
        "measured": over_window(SHARE, "sum_over_time", window, use_rules, GPU_LABELS),
        "idle": over_window(IDLE, "sum_over_time", window, use_rules, GPU_LABELS),
        "capacity": over_window(CLUSTER_ALLOCATABLE, "sum_over_time", window, use_rules),
        "pending": over_window(CLUSTER_PENDING, "sum_over_time", window, use_rules),
        "bucket": bucket_parts(window, use_rules),
    }


def window_query(window: Window, use_rules: bool) -> str:
    """Every window part in one expression (with the rules: each part reads a few recorded series)."""
    return union(window_parts(window, use_rules))


def team_map_expr(window: Window, team_label: str) -> str:
    """The last time each (namespace, team label value) was seen in the window: a namespace's team is the
    value it carried last (kube-state-metrics' ``kube_namespace_labels``, ``metricLabelsAllowlist``)."""
    return (
        f"max by (namespace, {team_label}) "
        f"(max_over_time(timestamp(kube_namespace_labels)[{window.range}:{COVERAGE_STEP}]))"
    )


def first_data(window: Window) -> str:
    """When the cluster's GPU capacity is first seen in the window, from the raw series (the allocatable rule's
    expression: deduplicated, as every kube-state-metrics reading here)."""
    return f"min_over_time(timestamp({rule_expr(CLUSTER_ALLOCATABLE)})[{window.range}:{COVERAGE_STEP}])"


def now_query(window: Window, team_label: str) -> str:
    """The state at the end of the window (always from raw series: as cheap as the rules, and not a minute
    behind), the GPU model of every node, the team of every namespace, and when GPU data starts."""
    return union(
        {
            "allocatable": rule_expr(ALLOCATABLE),
            "allocated": rule_expr(ALLOCATED),
            "starting": rule_expr(STARTING),
            "pending": rule_expr(PENDING),
            "models": "count by (node, modelName) (DCGM_FI_DEV_GPU_UTIL or DCGM_FI_DEV_GPU_TEMP)",  # GPU_UTIL: not under MIG
            "teams": team_map_expr(window, team_label),
            "first": first_data(window),
        }
    )


def coverage_query(window: Window) -> str:
    """When the recorded cluster capacity starts, against the raw series it is recorded from."""
    return union(
        {
            "rules": f"min_over_time(timestamp({CLUSTER_ALLOCATABLE})[{window.range}:{COVERAGE_STEP}])",
            "raw": first_data(window),
        }
    )


def trend_query(use_rules: bool, step_s: int = STEP_S) -> str:
    """Average GPUs allocated and allocatable over the day before each point (a range query, step 1d)."""
    step = format_duration(step_s)
    if use_rules:
        alloc = f"avg_over_time({CLUSTER_ALLOCATED}[1d])"
        cap = f"avg_over_time({CLUSTER_ALLOCATABLE}[1d])"
    else:
        alloc = f"avg_over_time(({rule_expr(CLUSTER_ALLOCATED)})[1d:{step}])"
        cap = f"avg_over_time(({rule_expr(CLUSTER_ALLOCATABLE)})[1d:{step}])"
    return union({"allocated": alloc, "allocatable": cap})
