"""A :class:`~gpustack.report.model.Report` as tables (80 columns), CSV (the ``--by`` rows, for chargeback
spreadsheets) or JSON (everything). Pure: text and rich renderables; the console prints them."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.text import Text

from gpustack.console import grid, wrap_words
from gpustack.report.inputs import format_duration, iso
from gpustack.report.model import GroupRow, NodeCapacity, Report

TOP_IDLE = 10
SPARK = "▁▂▃▄▅▆▇█"
CSV_COLUMNS = (
    "by",
    "key",
    "allocated_gpu_hours",
    "used_gpu_hours",
    "idle_gpu_hours",
    "measured_gpu_hours",
    "activity_pct",
    "cost_usd",
    "unpriced_gpu_hours",
)


def hours(value: float) -> str:
    return f"{value:,.1f}"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} %"


def money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def gpus(value: float) -> str:
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def _when(stamp: float) -> str:
    return iso(stamp).replace("T", " ")[:16]


def title(report: Report) -> str:
    return (
        f"GPU usage {_when(report.start)} to {_when(report.end)} UTC ({format_duration(report.end - report.start)}), "
        f"from {report.source}"
    )


def _table(
    title_text: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    numeric_from: int = 1,
    footer: Sequence[str] | None = None,
) -> RenderableType:
    """The console's layout (a namespace or pod name is never broken: a table that fits, else blocks);
    numbers right-aligned; the cells are text, never markup."""
    return grid(
        title_text,
        columns,
        [[escape(c) for c in r] for r in rows],
        width=width,
        right=range(numeric_from, len(columns)),
        footer=[escape(c) for c in footer] if footer is not None else None,
    )


def groups_table(report: Report, width: int = 80) -> RenderableType:
    priced = report.prices.given
    columns = [report.by, "allocated GPU-h", "used GPU-h", "idle GPU-h", "activity"] + (["cost USD"] if priced else [])

    def cells(row: GroupRow) -> list[str]:
        out = [row.key, hours(row.allocated_h), hours(row.used_h), hours(row.idle_h), pct(row.activity_pct)]
        return out + ([money(row.cost)] if priced else [])

    rows = [cells(row) for row in report.groups]
    return _table(f"GPU-hours by {report.by}", columns, rows, width, footer=cells(report.total))


def summary_lines(report: Report) -> list[str]:
    total = report.total
    lines = []
    if report.capacity_h > 0:
        lines.append(
            f"capacity {hours(report.capacity_h)} GPU-h allocatable: {pct(100 * total.allocated_h / report.capacity_h)} "
            f"allocated, {pct(100 * total.used_h / report.capacity_h)} used"
        )
    p = report.percentiles
    if any(v is not None for v in p.values()):
        shown = ", ".join(f"{k} {pct(None if v is None else 100 * v)}" for k, v in p.items())
        lines.append(f"activity of allocated GPUs, per GPU-minute: {shown}")
    lines.append(f"pending: {hours(report.pending_h)} GPU-h requested by pods waiting for a node")
    return lines


def idle_table(report: Report, top: int = TOP_IDLE, width: int = 80) -> RenderableType | None:
    if not report.idle:
        return None
    shown = report.idle[:top]
    more = f" (top {top} of {len(report.idle)})" if len(report.idle) > top else ""
    rows = [
        [
            f"{item.namespace}/{item.pod}",
            f"{item.node}/{item.gpu}",
            hours(item.idle_h),
            hours(item.held_h),
            "running" if item.running_now else "gone",
        ]
        for item in shown
    ]
    return _table(f"Idle allocated GPUs{more}", ["pod", "node/GPU", "idle GPU-h", "held GPU-h", "now"], rows, width, 2)


def _by_model(nodes: Sequence[NodeCapacity]) -> list[tuple[str, float, float, float, float]]:
    per: dict[str, list[float]] = {}
    for n in nodes:
        row = per.setdefault(n.model, [0.0, 0.0, 0.0, 0.0])
        for i, v in enumerate((n.allocatable, n.allocated, n.starting, n.free)):
            row[i] += v
    return [(m, *vals) for m, vals in sorted(per.items())]  # type: ignore[misc]


def capacity_table(report: Report, width: int = 80) -> RenderableType:
    rows = [
        [model, gpus(alloc_able), gpus(allocated), gpus(starting), gpus(free)]
        for model, alloc_able, allocated, starting, free in _by_model(report.nodes)
    ]
    total = [
        "total",
        gpus(report.allocatable_now),
        gpus(report.allocated_now),
        gpus(report.starting_now),
        gpus(report.free_now),
    ]
    columns = ["GPU model", "allocatable", "allocated", "starting", "free"]
    return _table(f"GPUs at {_when(report.end)} UTC", columns, rows, width, footer=total)


def pending_line(report: Report) -> str:
    if not report.pending:
        return "pending now: no pod waits for a GPU"
    names = ", ".join(f"{p.namespace}/{p.pod} {gpus(p.gpus)}" for p in report.pending[:3])
    more = f", and {len(report.pending) - 3} more" if len(report.pending) > 3 else ""
    return f"pending now: {gpus(report.pending_now)} GPUs for {len(report.pending)} unscheduled pod(s) ({names}{more})"


def sparkline(values: Sequence[float], top: float | None = None) -> str:
    if not values:
        return ""
    high = max(top or 0.0, *values) or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, round(v / high * (len(SPARK) - 1)))] for v in values)


def trend_lines(report: Report) -> list[str]:
    points = report.trend
    lines = []
    if points:
        first, last = points[0].allocated, points[-1].allocated
        cap = report.forecast.capacity if report.forecast else None
        lines.append(
            f"allocation, GPUs a day: {first:.1f} -> {last:.1f} {sparkline([p.allocated for p in points], cap)} "
            f"({len(points)} days)"
        )
    if report.forecast is not None:
        lines.append(f"forecast: {report.forecast.describe()}")
    return lines


def table_view(report: Report, width: int = 80) -> RenderableType:
    """Everything, in the order people read it: who used what, what is idle, capacity, where it is going
    (laid out for ``width`` columns)."""

    def prose(line: str, style: str = "") -> Text:  # wrapped at words here: a pod name stays whole
        return Text(wrap_words(line, width), style=style)

    parts: list[RenderableType] = [prose(title(report), "bold"), groups_table(report, width)]
    parts += [prose(line) for line in summary_lines(report)]
    idle = idle_table(report, width=width)
    if idle is not None:
        parts.append(idle)
    parts += [capacity_table(report, width), prose(pending_line(report))]
    parts += [prose(line) for line in trend_lines(report)]
    parts += [prose(f"note: {n}", "yellow") for n in report.notes]
    return Group(*parts)


def _num(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def group_json(row: GroupRow) -> dict[str, Any]:
    return {
        "key": row.key,
        "allocated_gpu_hours": _num(row.allocated_h),
        "used_gpu_hours": _num(row.used_h),
        "idle_gpu_hours": _num(row.idle_h),
        "measured_gpu_hours": _num(row.measured_h),
        "activity_pct": _num(row.activity_pct, 1),
        "cost_usd": _num(row.cost, 2),
        "unpriced_gpu_hours": _num(row.unpriced_h),
    }


def to_json(report: Report) -> dict[str, Any]:
    f = report.forecast
    return {
        "command": "report",
        "window": {
            "start": iso(report.start),
            "end": iso(report.end),
            "seconds": int(report.end - report.start),
            "data_start": None if report.data_start is None else iso(report.data_start),
        },
        "source": report.source,
        "queries": report.queries,
        "by": report.by,
        "team_label": report.team_label,
        "prices": {"default_usd": report.prices.default, "by_model_usd": dict(report.prices.by_model)},
        "groups": [group_json(g) for g in report.groups],
        "total": group_json(report.total),
        "capacity_gpu_hours": _num(report.capacity_h),
        "pending_gpu_hours": _num(report.pending_h),
        "activity_percentiles_pct": {k: _num(None if v is None else 100 * v, 1) for k, v in report.percentiles.items()},
        "idle": [
            {
                "namespace": i.namespace,
                "pod": i.pod,
                "node": i.node,
                "gpu": i.gpu,
                "model": i.model,
                "idle_gpu_hours": _num(i.idle_h),
                "held_gpu_hours": _num(i.held_h),
                "running_now": i.running_now,
            }
            for i in report.idle
        ],
        "now": {
            "time": iso(report.end),
            "allocatable_gpus": report.allocatable_now,
            "allocated_gpus": report.allocated_now,
            "starting_gpus": report.starting_now,
            "free_gpus": report.free_now,
            "pending_gpus": report.pending_now,
            "nodes": [
                {
                    "node": n.node,
                    "model": n.model,
                    "allocatable_gpus": n.allocatable,
                    "allocated_gpus": n.allocated,
                    "starting_gpus": n.starting,
                    "free_gpus": n.free,
                }
                for n in report.nodes
            ],
            "pending_pods": [{"namespace": p.namespace, "pod": p.pod, "gpus": p.gpus} for p in report.pending],
        },
        "trend": [
            {
                "day_end": iso(p.end),
                "allocated_gpus": _num(p.allocated),
                "allocatable_gpus": _num(p.allocatable),
            }
            for p in report.trend
        ],
        "forecast": None
        if f is None
        else {
            "status": f.status,
            "capacity_gpus": f.capacity,
            "points": f.points,
            "slope_gpus_per_day": _num(f.slope, 4),
            "allocated_gpus_at_end": _num(f.intercept),
            "horizon_days": f.horizon_days,
            "date": None if f.when is None else iso(f.when)[:10],
            "days_left": _num(f.days_left, 1),
            "text": f.describe(),
        },
        "notes": list(report.notes),
    }


def json_text(report: Report) -> str:
    return json.dumps(to_json(report), indent=1) + "\n"


def csv_text(report: Report) -> str:
    """One row per ``--by`` group, then the total: what a chargeback spreadsheet imports."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in [*report.groups, report.total]:
        data = group_json(row)
        writer.writerow([report.by, row.key, *("" if data[c] is None else data[c] for c in CSV_COLUMNS[2:])])
    return buf.getvalue()
