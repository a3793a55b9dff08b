"""Query results -> :class:`~gpustack.report.model.Report`. Pure: every number is checked against hand-made
results in tests/unit/report and against a real Prometheus holding known history in tests/prometheus.

Allocation rows are per (namespace, pod, node), usage rows per (namespace, pod, node, GPU); both are
grouped here (``--by``), so one query serves every grouping. A node's GPU model is what DCGM reports for
its GPUs (its most common model when it has several); a namespace's team is the value of the team label it
carried last in the window.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpustack.monitoring.ksm import label_name
from gpustack.report import queries as q
from gpustack.report.forecast import forecast
from gpustack.report.inputs import Prices, format_duration, iso
from gpustack.report.model import GroupRow, IdleGpu, NodeCapacity, PendingPod, Report, TrendPoint

Row = Mapping[str, Any]
NO_TEAM = "(none)"
UNKNOWN_MODEL = "(unknown)"
PERCENTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
COVERAGE_SLACK_S = 2 * 3600  # rules starting this long after the raw data still "cover" the window
MEASURED_NOTE_SHARE = 0.01  # mention unmeasured GPU-hours above 1 % of the allocated ones


@dataclass(frozen=True)
class Results:
    """What Prometheus answered: the window, "now" and trend queries (see :mod:`.queries`)."""

    window: Sequence[Row]
    now: Sequence[Row]
    trend: Sequence[Row]
    use_rules: bool
    step_s: int = q.STEP_S
    notes: tuple[str, ...] = ()
    queries: int = 0


@dataclass(frozen=True)
class Request:
    """What the user asked for."""

    end: float
    seconds: int
    by: str = "namespace"
    team_label: str = "team"  # the Kubernetes label key
    prices: Prices = field(default_factory=Prices)


def value(row: Row) -> float:
    """An instant row's value (NaN/Inf -> 0)."""
    try:
        v = float(row["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) else 0.0


def parts(rows: Iterable[Row]) -> dict[str, list[Row]]:
    """Rows of a :func:`~gpustack.report.queries.union` split by their ``gpustack_part`` tag."""
    out: dict[str, list[Row]] = {}
    for row in rows:
        metric = row.get("metric") or {}
        out.setdefault(str(metric.get(q.PART_LABEL, "")), []).append(row)
    return out


def _labels(row: Row) -> dict[str, str]:
    return {k: str(v) for k, v in (row.get("metric") or {}).items() if k != q.PART_LABEL}


def use_recording_rules(groups: Sequence[Row], rules_first: float | None, raw_first: float | None) -> tuple[bool, str]:
    """Read the recorded series? Only when gpustack's usage group is loaded and healthy and its data reaches
    back as far as the raw data does (rules deployed later than the window's start would under-count)."""
    group = next((g for g in groups if g.get("name") == q.GROUP), None)
    if group is None:
        return False, f"recording rules ({q.GROUP}) not loaded in Prometheus: raw expressions used"
    broken = [str(r.get("name")) for r in group.get("rules") or [] if r.get("health") == "err"]
    if broken:
        return False, f"recording rules failing ({', '.join(sorted(set(broken)))}): raw expressions used"
    if rules_first is None:
        return False, "recording rules have no data in the window yet: raw expressions used"
    if raw_first is not None and rules_first > raw_first + COVERAGE_SLACK_S:
        return False, (
            f"recording rules start at {iso(rules_first)}, the GPU data at {iso(raw_first)}: raw expressions used"
        )
    return True, ""


def rule_interval(groups: Sequence[Row], default: int = q.STEP_S) -> int:
    """The usage group's evaluation interval in seconds (what one recorded sample stands for)."""
    group = next((g for g in groups if g.get("name") == q.GROUP), None)
    try:
        seconds = float((group or {}).get("interval") or default)
    except (TypeError, ValueError):
        return default
    return int(seconds) if seconds > 0 else default


def quantile(phi: float, buckets: Mapping[float, float]) -> float | None:
    """Prometheus' ``histogram_quantile`` over cumulative ``{upper bound: count}`` (``+Inf`` included):
    linear interpolation inside the bucket holding the rank, 0 as the first bucket's lower bound."""
    if not buckets or math.inf not in buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[math.inf]
    if total <= 0:
        return None
    rank = phi * total
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == math.inf:
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def bucket_counts(rows: Sequence[Row], bounds: Sequence[float] | None = None) -> dict[float, float]:
    """Cumulative ``{le: GPU-minutes}`` from the recorded buckets (``le`` rows) or from GPU-minutes per
    activity percent (``activity_pct`` rows, the raw query), summed into the rules' bounds."""
    counts: dict[float, float] = {}
    per_pct: list[tuple[float, float]] = []
    for row in rows:
        labels = _labels(row)
        try:
            if "le" in labels:
                counts[float(labels["le"])] = counts.get(float(labels["le"]), 0.0) + value(row)
            elif "activity_pct" in labels:
                per_pct.append((float(labels["activity_pct"]) / 100, value(row)))
        except ValueError:
            continue
    if per_pct:
        for le in bounds if bounds is not None else q.bucket_bounds():
            counts[le] = sum(n for v, n in per_pct if v <= le + 1e-9)
    return counts


def node_models(now_models: Sequence[Row], gpu_rows: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """node -> GPU model: what DCGM reports for its GPUs now, else in the window (the most common one)."""
    counts: dict[str, dict[str, float]] = {}
    for row in now_models:
        now_labels = _labels(row)
        node, model = now_labels.get("node", ""), now_labels.get("modelName", "")
        if node and model:
            per = counts.setdefault(node, {})
            per[model] = per.get(model, 0.0) + value(row)
    seen_now = set(counts)
    for labels in gpu_rows:
        node, model = labels.get("node", ""), labels.get("modelName", "")
        if node and model and node not in seen_now:
            per = counts.setdefault(node, {})
            per[model] = per.get(model, 0.0) + 1.0
    return {node: sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] for node, c in counts.items()}


def team_map(rows: Sequence[Row], team_label: str) -> dict[str, str]:
    """namespace -> team: the label value the namespace carried last in the window (NO_TEAM if none)."""
    label = label_name(team_label)
    best: dict[str, tuple[float, str]] = {}
    for row in rows:
        labels = _labels(row)
        ns = labels.get("namespace")
        if not ns:
            continue
        seen, team = value(row), labels.get(label) or NO_TEAM
        if ns not in best or seen > best[ns][0] or (seen == best[ns][0] and team != NO_TEAM):
            best[ns] = (seen, team)
    return {ns: team for ns, (_, team) in best.items()}


def _key_fn(by: str, teams: Mapping[str, str], models: Mapping[str, str]) -> Callable[[Mapping[str, str]], str]:
    def key(labels: Mapping[str, str]) -> str:
        if by == "namespace":
            return labels.get("namespace") or "(no namespace)"
        if by == "team":
            return teams.get(labels.get("namespace", ""), NO_TEAM)
        if by == "node":
            return labels.get("node") or "(no node)"
        return labels.get("modelName") or models.get(labels.get("node", ""), UNKNOWN_MODEL)

    return key


def _add_cost(row: GroupRow, hours: float, price: float | None) -> None:
    if price is None:
        row.unpriced_h += hours
        return
    row.cost = (row.cost or 0.0) + hours * price


def build(request: Request, results: Results) -> Report:
    """The report: grouped GPU-hours and costs, idle GPUs, percentiles, capacity now, trend and forecast."""
    hours = results.step_s / 3600.0
    window = parts(results.window)
    now = parts(results.now)
    report = Report(
        start=request.end - request.seconds,
        end=request.end,
        source="recording rules" if results.use_rules else "raw expressions",
        by=request.by,
        team_label=request.team_label,
        prices=request.prices,
        notes=list(results.notes),
        queries=results.queries,
    )

    alloc_rows = [(_labels(r), value(r) * hours) for r in window.get("allocated", [])]
    gpu: dict[tuple[str, ...], dict[str, float]] = {}
    gpu_labels: dict[tuple[str, ...], dict[str, str]] = {}
    for part in ("used", "measured", "idle"):
        for row in window.get(part, []):
            labels = _labels(row)
            ident = tuple(labels.get(k, "") for k in q.GPU_LABELS)
            gpu_labels[ident] = labels
            gpu.setdefault(ident, {"used": 0.0, "measured": 0.0, "idle": 0.0})[part] += value(row) * hours

    models = node_models(now.get("models", []), gpu_labels.values())
    teams = team_map(now.get("teams", []), request.team_label)
    key = _key_fn(request.by, teams, models)

    groups: dict[str, GroupRow] = {}
    total = GroupRow("total")
    unpriced: set[str] = set()
    for labels, h in alloc_rows:
        if h <= 0:
            continue
        grp = groups.setdefault(key(labels), GroupRow(key(labels)))
        model = models.get(labels.get("node", ""), UNKNOWN_MODEL)
        price = request.prices.for_model(model) if request.prices.given else None
        if request.prices.given and price is None:
            unpriced.add(model)
        for target in (grp, total):
            target.allocated_h += h
            if request.prices.given:
                _add_cost(target, h, price)
    for ident, numbers in gpu.items():
        labels = gpu_labels[ident]
        grp = groups.setdefault(key(labels), GroupRow(key(labels)))
        for target in (grp, total):
            target.used_h += numbers["used"]
            target.idle_h += numbers["idle"]
            target.measured_h += numbers["measured"]
    report.groups = sorted(groups.values(), key=lambda g: (-g.allocated_h, -g.used_h, g.key))
    report.total = total

    totals = {part: sum(value(r) for r in window.get(part, [])) * hours for part in ("capacity", "pending")}
    report.capacity_h, report.pending_h = totals["capacity"], totals["pending"]

    report.percentiles = {
        name: quantile(phi, bucket_counts(window.get("bucket", []))) for name, phi in PERCENTILES.items()
    }

    running = {(lab.get("namespace", ""), lab.get("pod", "")) for lab in map(_labels, now.get("allocated", []))}
    idle = [
        IdleGpu(
            namespace=labels.get("namespace", ""),
            pod=labels.get("pod", ""),
            node=labels.get("node", ""),
            gpu=labels.get("gpu", ""),
            model=labels.get("modelName", "") or UNKNOWN_MODEL,
            idle_h=numbers["idle"],
            held_h=numbers["measured"],
            running_now=(labels.get("namespace", ""), labels.get("pod", "")) in running,
        )
        for ident, numbers in gpu.items()
        if numbers["idle"] > 0
        for labels in (gpu_labels[ident],)
    ]
    report.idle = sorted(idle, key=lambda i: (-i.idle_h, i.namespace, i.pod, i.node, i.gpu))

    report.nodes = capacity_now(now, models)
    report.pending = sorted(
        (PendingPod(lab.get("namespace", ""), lab.get("pod", ""), value(r)) for r in now.get("pending", [])
         for lab in (_labels(r),) if value(r) > 0),
        key=lambda p: (-p.gpus, p.namespace, p.pod),
    )  # fmt: skip

    firsts = [value(r) for r in now.get("first", []) if value(r) > 0]
    report.data_start = min(firsts) if firsts else None
    report.trend = trend_points(results.trend)
    capacity = report.allocatable_now or (report.trend[-1].allocatable or 0.0 if report.trend else 0.0)
    report.forecast = forecast(
        [(p.end, p.allocated) for p in report.trend], capacity, request.end, request.seconds / 86400
    )
    report.notes += notes(request, report, teams, unpriced)
    return report


def capacity_now(now: Mapping[str, Sequence[Row]], models: Mapping[str, str]) -> list[NodeCapacity]:
    """Per node at the end of the window: allocatable, allocated (running pods), starting (bound, Pending)."""
    per: dict[str, dict[str, float]] = {}
    for part in ("allocatable", "allocated", "starting"):
        for row in now.get(part, []):
            node = _labels(row).get("node", "")
            if node:
                per.setdefault(node, {"allocatable": 0.0, "allocated": 0.0, "starting": 0.0})[part] += value(row)
    return [
        NodeCapacity(node, models.get(node, UNKNOWN_MODEL), n["allocatable"], n["allocated"], n["starting"])
        for node, n in sorted(per.items())
    ]


def trend_points(rows: Sequence[Row]) -> list[TrendPoint]:
    """Daily points of the trend range query (allocation needed; allocatable when recorded)."""
    series: dict[str, dict[float, float]] = {}
    for row in rows:
        part = str((row.get("metric") or {}).get(q.PART_LABEL, ""))
        for stamp, raw in row.get("values") or []:
            try:
                v = float(raw)
            except (TypeError, ValueError):
                continue
            if math.isfinite(v):
                series.setdefault(part, {})[float(stamp)] = v
    alloc, cap = series.get("allocated", {}), series.get("allocatable", {})
    return [TrendPoint(t, alloc[t], cap.get(t)) for t in sorted(alloc)]


def notes(request: Request, report: Report, teams: Mapping[str, str], unpriced: set[str]) -> list[str]:
    """What the numbers do not say by themselves."""
    out: list[str] = []
    if report.data_start is None:
        out.append(
            'no GPU data in the window: Prometheus has no kube_node_status_allocatable{resource="nvidia_com_gpu"} '
            "(kube-state-metrics, or no GPU node)"
        )
    elif report.data_start > report.start + COVERAGE_SLACK_S:
        covered = format_duration(report.end - report.data_start)
        out.append(
            f"GPU data starts at {iso(report.data_start)}: {covered} of the {format_duration(request.seconds)} "
            "asked for (Prometheus keeps data for its retention, monitoring.prometheus_retention)"
        )
    unmeasured = report.total.allocated_h - report.total.measured_h
    if report.total.allocated_h > 0 and unmeasured > MEASURED_NOTE_SHARE * report.total.allocated_h:
        out.append(
            f"{unmeasured:,.1f} allocated GPU-hours have no DCGM activity (exporter down, or pods on nodes "
            "without dcgm-exporter): used and idle cover the measured ones only"
        )
    if request.by == "team" and teams and all(t == NO_TEAM for t in teams.values()):
        out.append(
            f"no namespace carries the label {request.team_label!r} in kube_namespace_labels: label namespaces "
            f"(kubectl label namespace NS {request.team_label}=NAME) and let kube-state-metrics export it "
            f"(metricLabelsAllowlist namespaces=[{request.team_label}], set by gpustack up from monitoring.team_label)"
        )
    if request.prices.given and report.total.unpriced_h > 0:
        out.append(
            f"{report.total.unpriced_h:,.1f} GPU-hours have no price (models: {', '.join(sorted(unpriced))}): "
            "add MODEL=PRICE or a default to --price"
        )
    return out
