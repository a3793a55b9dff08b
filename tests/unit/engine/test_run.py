"""The run engine with Python steps only (no host touched): ordering, summary, run directory,
failures recorded before they propagate, the host limit checked against the config."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.engine import stages
from gpustack.engine.lock import cluster_lock
from gpustack.engine.options import RunOptions
from gpustack.engine.plan import CommandPlan, Stage, targets
from gpustack.engine.run import run
from gpustack.engine.steps import StageSummary, StepContext, StepFn
from gpustack.errors import BusyError, Interrupted, StageError, UsageError
from gpustack.runners import ansible as ar

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

    def step(name: str) -> StepFn:
        def run(ctx: StepContext) -> list[StageSummary]:
            seen.append((name, sorted(ctx.facts)))
            return [StageSummary(name, "changed", 0.5, 1, ["cp"])]

        return run

    con, buf = console()
    opts = RunOptions(stages=PLAN.select(), facts={"cp": {}})
    result = run(PLAN, CFG, opts, con, steps={"first": step("first"), "second": step("second")})
    assert seen == [("first", ["cp"]), ("second", ["cp"])]
    rows = json.loads((result.run_dir / "summary.json").read_text())
    assert [(r["stage"], r["status"], r["changed"]) for r in rows] == [
        ("first", "changed", 1),
        ("second", "changed", 1),
    ]
    record = json.loads((result.run_dir / "run.json").read_text())
    assert (record["command"], record["cluster"], record["result"], record["error"]) == ("demo", "gpustack", "ok", None)
    assert json.loads((result.run_dir / "config.json").read_text())["nodes"][0]["name"] == "cp"
    assert "Summary" in buf.getvalue() and "1.0s" in buf.getvalue()


def test_a_failing_step_is_recorded_then_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))

    def boom(ctx: StepContext) -> list[StageSummary]:
        raise StageError("it broke", stage="first")

    con, _ = console()
    with pytest.raises(StageError):
        run(PLAN, CFG, RunOptions(stages=PLAN.select(only=["first"])), con, steps={"first": boom})
    [run_dir] = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "summary.json").read_text())[0]["status"] == "failed"
    record = json.loads((run_dir / "run.json").read_text())
    assert (record["command"], record["result"], record["error"]) == ("demo", "failed", "it broke")
    assert record["finished"] is not None


def test_a_python_stage_without_a_step_is_a_programming_error() -> None:
    con, _ = console()
    with pytest.raises(ValueError, match="no step function for first"):
        run(PLAN, CFG, RunOptions(stages=PLAN.select()), con, steps={"second": lambda c: []})


def test_host_limit() -> None:
    assert targets(CFG, []) == ["cp", "w1"]
    assert targets(CFG, ["w1"]) == ["w1"]
    with pytest.raises(UsageError, match="unknown node"):
        targets(CFG, ["w9"])


def test_an_interrupted_step_is_recorded_and_later_stages_are_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))

    def interrupted(ctx: StepContext) -> list[StageSummary]:
        raise Interrupted()

    con, buf = console()
    with pytest.raises(Interrupted) as exc:
        run(
            PLAN,
            CFG,
            RunOptions(stages=PLAN.select()),
            con,
            steps={"first": interrupted, "second": interrupted},
        )
    assert exc.value.message == "interrupted during first"
    assert exc.value.hint is not None and "gpustack demo" in exc.value.hint
    [run_dir] = (tmp_path / "runs").iterdir()
    rows = json.loads((run_dir / "summary.json").read_text())
    assert [(r["stage"], r["status"]) for r in rows] == [("first", "interrupted"), ("second", "not run")]
    assert "interrupted" in buf.getvalue() and "not run" in buf.getvalue()
    assert json.loads((run_dir / "run.json").read_text())["result"] == "interrupted"


ANSIBLE_PLAN = CommandPlan(
    "demo",
    "three plays",
    "site.yml",
    tuple(Stage(i, i, "ansible", "all", "nothing") for i in ("a", "b", "c")),
)


def test_a_cancelled_playbook_makes_the_summary_truthful(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while play b runs: a ok, b interrupted, c not run (it used to say ok), exit via Interrupted."""
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))

    controls: list[Path] = []

    def cancelled_run(plan: CommandPlan, cfg: Config, opts: RunOptions, **kw: object) -> ar.PlaybookResult:
        assert isinstance(kw["control_dir"], Path) and kw["control_dir"].is_dir(), "the run's SSH control directory"
        controls.append(kw["control_dir"])
        a = ar.StageResult("a", started=1.0, ended=2.0, hosts={"cp"}, ok={"cp": 3})
        b = ar.StageResult("b", started=2.0, hosts={"cp"}, ok={"cp": 1}, changed={"cp": 1})
        return ar.PlaybookResult(254, "canceled", {"a": a, "b": b}, [], tmp_path)

    monkeypatch.setattr(stages, "run_playbook", cancelled_run)
    con, _ = console()
    with pytest.raises(Interrupted, match="interrupted during b"):
        run(ANSIBLE_PLAN, CFG, RunOptions(stages=ANSIBLE_PLAN.select()), con)
    [run_dir] = (tmp_path / "runs").iterdir()
    rows = json.loads((run_dir / "summary.json").read_text())
    assert [(r["stage"], r["status"]) for r in rows] == [("a", "ok"), ("b", "interrupted"), ("c", "not run")]
    assert rows[1]["changed_by_host"] == {"cp": 1}, "each host's changed count is kept"
    assert controls and not controls[0].exists(), "the interrupted run's SSH control directory is closed"


def test_a_second_run_on_a_busy_cluster_is_refused_before_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
    con, _ = console()
    with cluster_lock(CFG.cluster.name, "upgrade"), pytest.raises(BusyError, match=r"`gpustack upgrade` \(pid \d+"):
        run(
            PLAN,
            CFG,
            RunOptions(stages=PLAN.select()),
            con,
            steps={"first": lambda c: [], "second": lambda c: []},
        )
    assert not (tmp_path / "runs").exists()


def test_a_command_passes_only_the_playbook_variables_its_plan_declares(tmp_path: Path) -> None:
    """A command's variables are its plan's contract with the playbooks: one the plan does not declare
    is a programming error before any playbook starts (the config's own variables may be overridden)."""
    declared = CommandPlan("x", "test", "site.yml", ANSIBLE_PLAN.stages, extravars=("gpustack_x_nodes",))
    con, _ = console()

    def start(**extra: object) -> None:
        opts = RunOptions(stages=declared.stages, extravars=extra)
        stages.run_playbook(declared, CFG, opts, playbook="site.yml", tags=["a"], private_dir=tmp_path / "p",
                            ident="x", check=True, console=con)  # fmt: skip

    with pytest.raises(ValueError, match="does not declare: gpustack_x_typo"):
        start(gpustack_x_nodes=["cp"], gpustack_x_typo=1)


def test_the_stages_run_through_mitogen_and_the_preflight_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tasks per host: the preflight keeps Ansible's linear strategy (starting Mitogen costs more than it saves
    there); a stage run uses Mitogen unless the config's ``ssh.mitogen`` is false."""
    seen: list[tuple[str, str | None]] = []

    def fake_run(kwargs: dict[str, Any], tracker: Any, **_: Any) -> Any:
        seen.append((kwargs["playbook"], kwargs["envvars"].get("ANSIBLE_STRATEGY")))
        raise RuntimeError("stop here")

    monkeypatch.setattr(stages.ar, "run_playbook", fake_run)
    con, _ = console()
    for cfg in (CFG, CFG.model_copy(update={"ssh": CFG.ssh.model_copy(update={"mitogen": False})})):
        opts = RunOptions(stages=ANSIBLE_PLAN.stages)
        for playbook, mitogen in (("preflight.yml", False), ("site.yml", True)):
            with pytest.raises(RuntimeError, match="stop here"):
                stages.run_playbook(ANSIBLE_PLAN, cfg, opts, playbook=playbook, tags=["a"], private_dir=tmp_path / "p",
                                    ident="x", check=False, console=con, mitogen=mitogen)  # fmt: skip
    assert seen == [
        ("preflight.yml", None),
        ("site.yml", "mitogen_linear"),
        ("preflight.yml", None),
        ("site.yml", None),
    ]

    asked: list[Any] = []

    def record(*args: Any, **kwargs: Any) -> Any:
        asked.append((kwargs["playbook"], kwargs.get("mitogen", True)))
        raise RuntimeError("stop here")

    monkeypatch.setattr(stages, "run_playbook", record)
    with pytest.raises(RuntimeError, match="stop here"):
        stages.run_preflight(ANSIBLE_PLAN, CFG, RunOptions(stages=ANSIBLE_PLAN.stages), tmp_path / "run", con)
    assert asked == [("preflight.yml", False)]
