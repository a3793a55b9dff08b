"""The run engine with Python steps only (no host touched): ordering, summary, run directory,
failures recorded before they propagate, the host limit checked against the config."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from gpustack import lifecycle
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.errors import StageError, UsageError
from gpustack.plan import CommandPlan, Stage

CFG = Config.model_validate(
    {"nodes": [{"name": "cp", "address": "192.0.2.10", "role": "control-plane", "connection": "local"},
               {"name": "w1", "address": "192.0.2.11", "connection": "local"}]}
)  # fmt: skip
PLAN = CommandPlan(
    "demo",
    "two Python steps",
    "site.yml",
    (Stage("first", "First", "python", "all", "nothing"), Stage("second", "Second", "python", "targets", "nothing")),
)


def console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(stream=buf, color=False), buf


def test_python_steps_run_in_order_and_are_summarised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
    seen: list[tuple[str, list[str]]] = []

    def step(name: str) -> lifecycle.StepFn:
        def run(ctx: lifecycle.StepContext) -> list[lifecycle.StageSummary]:
            seen.append((name, sorted(ctx.facts)))
            return [lifecycle.StageSummary(name, "changed", 0.5, 1, ["cp"])]

        return run

    con, buf = console()
    opts = lifecycle.RunOptions(stages=PLAN.select(), facts={"cp": {}})
    result = lifecycle.run(PLAN, CFG, opts, con, steps={"first": step("first"), "second": step("second")})
    assert seen == [("first", ["cp"]), ("second", ["cp"])]
    rows = json.loads((result.run_dir / "summary.json").read_text())
    assert [(r["stage"], r["status"], r["changed"]) for r in rows] == [
        ("first", "changed", 1),
        ("second", "changed", 1),
    ]
    assert json.loads((result.run_dir / "config.json").read_text())["nodes"][0]["name"] == "cp"
    assert "Summary" in buf.getvalue() and "1.0s" in buf.getvalue()


def test_a_failing_step_is_recorded_then_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))

    def boom(ctx: lifecycle.StepContext) -> list[lifecycle.StageSummary]:
        raise StageError("it broke", stage="first")

    con, _ = console()
    with pytest.raises(StageError):
        lifecycle.run(PLAN, CFG, lifecycle.RunOptions(stages=PLAN.select(only=["first"])), con, steps={"first": boom})
    [run_dir] = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "summary.json").read_text())[0]["status"] == "failed"


def test_a_python_stage_without_a_step_is_a_programming_error() -> None:
    con, _ = console()
    with pytest.raises(ValueError, match="no step function for first"):
        lifecycle.run(PLAN, CFG, lifecycle.RunOptions(stages=PLAN.select()), con, steps={"second": lambda c: []})


def test_host_limit() -> None:
    assert lifecycle.targets(CFG, []) == ["cp", "w1"]
    assert lifecycle.targets(CFG, ["w1"]) == ["w1"]
    with pytest.raises(UsageError, match="unknown node"):
        lifecycle.targets(CFG, ["w9"])
