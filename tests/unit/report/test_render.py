"""gpustack.report.render: tables that fit 80 columns, CSV for spreadsheets, JSON with units in the keys."""

from __future__ import annotations

import csv
import io
import json

from rich.console import Console as RichConsole

from gpustack.report import render
from gpustack.report.inputs import parse_prices
from tests.unit.report.test_compute import build


def text(renderable: object, width: int = 80) -> str:
    buf = io.StringIO()
    RichConsole(file=buf, width=width, no_color=True, highlight=False).print(renderable)
    return buf.getvalue()


def test_table_fits_80_columns_and_says_everything() -> None:
    report = build(prices=parse_prices(["H100=4,A100=2"]))
    report.groups[0].key = "a-very-long-namespace-name-that-a-platform-team-might-choose-for-its-batch-jobs"
    out = text(render.table_view(report))
    assert max(len(line) for line in out.splitlines()) <= 80
    for needle in ("GPU-hours by namespace", "cost USD", "Idle allocated GPUs", "web/api", "GPUs at", "pending now:",
                   "forecast: not enough data", "note: "):  # fmt: skip
        assert needle in out, needle
    assert "cost USD" not in text(render.table_view(build()))


def test_csv_rows_and_total() -> None:
    rows = list(csv.DictReader(io.StringIO(render.csv_text(build(by="node", prices=parse_prices(["1"]))))))
    assert list(rows[0]) == list(render.CSV_COLUMNS)
    assert [(r["by"], r["key"], r["allocated_gpu_hours"], r["cost_usd"]) for r in rows] == [
        ("node", "n2", "20.0", "20.0"),
        ("node", "n1", "10.0", "10.0"),
        ("node", "n3", "1.0", "1.0"),
        ("node", "total", "31.0", "31.0"),
    ]
    assert rows[2]["activity_pct"] == ""  # nothing measured on n3


def test_json_has_every_section() -> None:
    data = json.loads(render.json_text(build()))
    assert data["command"] == "report" and data["window"]["seconds"] == 2 * 86400
    assert set(data) >= {"groups", "total", "idle", "now", "trend", "forecast", "activity_percentiles_pct", "notes"}
    assert data["now"]["free_gpus"] == 9 and data["now"]["pending_pods"] == [
        {"namespace": "ml", "pod": "wait", "gpus": 4}
    ]
    assert data["idle"][0]["idle_gpu_hours"] == 10.0 and data["idle"][0]["running_now"] is True
    assert data["forecast"]["status"] == "not enough data" and data["total"]["cost_usd"] is None


def test_sparkline() -> None:
    assert render.sparkline([0, 4, 8], top=8) == "▁▅█"
    assert render.sparkline([]) == ""
    assert render.sparkline([0.0, 0.0]) == "▁▁"
