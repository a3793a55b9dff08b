"""The one run engine: any command's :class:`~gpustack.engine.plan.CommandPlan`, run the same way.

    lock -> run directory -> SSH host-key gate -> stages in order -> summary

Stages run by kind (:data:`gpustack.engine.plan.Runner`): ``preflight`` collects every host's facts
(read-only) and checks them (a failure stops the run before anything changes); consecutive
``ansible`` stages are one run of the command's playbook with those stages' tags and the run's host
limit (:mod:`gpustack.engine.stages`); a ``python`` stage calls the step function the command
registered under the stage id. Every stage gets a row in the summary (status, changed count, time,
hosts), printed (:mod:`gpustack.engine.progress`) and kept with the Ansible artifacts, the facts and
the effective config in the run directory (:mod:`gpustack.engine.records`).

Commands (:mod:`gpustack.commands`) only supply their plan, options, Python steps and guard.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from itertools import groupby
from pathlib import Path
from typing import Any

from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.engine.lock import cluster_lock
from gpustack.engine.options import RunOptions
from gpustack.engine.plan import CommandPlan, targets
from gpustack.engine.progress import print_summary, report_preflight
from gpustack.engine.records import finish_record, run_record
from gpustack.engine.stages import ansible_stages, host_key_gate, run_preflight
from gpustack.engine.steps import Guard, RunResult, StageSummary, StepContext, StepFn
from gpustack.errors import GpustackError, Interrupted
from gpustack.paths import new_run_dir, write_json
from gpustack.runners import pinned_collections, sshmux


def run(
    plan: CommandPlan,
    cfg: Config,
    opts: RunOptions,
    console: Console,
    *,
    steps: Mapping[str, StepFn] | None = None,
    after_preflight: Guard | None = None,
) -> RunResult:
    """Run the selected stages of ``plan`` (``opts.stages``, from :meth:`CommandPlan.select`);
    ``after_preflight`` sees the facts once preflight passed, before the first change."""
    steps = steps or {}
    missing = [s.id for s in opts.stages if s.runner == "python" and s.id not in steps]
    if missing:
        raise ValueError(f"{plan.command}: no step function for {', '.join(missing)}")
    if any(s.runner in ("preflight", "ansible") for s in opts.stages):
        # the playbooks' collections, before any host is contacted (exit 2 with the command to run)
        pinned_collections.require_pinned()
    with cluster_lock(cfg.cluster.name, plan.command):
        return _run_locked(plan, cfg, opts, console, steps, after_preflight)


def _run_locked(
    plan: CommandPlan,
    cfg: Config,
    opts: RunOptions,
    console: Console,
    steps: Mapping[str, StepFn],
    after_preflight: Guard | None,
) -> RunResult:
    run_dir = new_run_dir()
    console.info(f"run directory: {run_dir}")
    write_json(run_dir / "config.json", cfg.model_dump(mode="json"))
    summaries: list[StageSummary] = []
    findings: list[Finding] = []
    facts: dict[str, Any] = dict(opts.facts or {})

    def finish() -> None:
        # every selected stage gets a row: those the run never reached are "not run"
        seen = {s.stage for s in summaries}
        summaries.extend(StageSummary(s.id, "not run", 0.0) for s in opts.stages if s.id not in seen)
        write_json(run_dir / "summary.json", [s.__dict__ for s in summaries])
        print_summary(summaries, console, dry_run=opts.dry_run)

    record = run_record(plan, cfg, opts)
    write_json(run_dir / "run.json", record)
    try:
        # the run's own SSH masters, ended when the run ends however it ends (runners/sshmux.py)
        reaches_hosts = any(s.runner in ("preflight", "ansible") for s in opts.stages)
        with sshmux.control_dir() if reaches_hosts else contextlib.nullcontext() as control:
            _run_stages(
                plan, cfg, opts, console, steps, run_dir, summaries, findings, facts, finish, after_preflight, control
            )
    except Interrupted as exc:
        for s in summaries:
            if s.status == "running":
                s.status = "interrupted"
        finish()
        write_json(run_dir / "run.json", finish_record(record, "interrupted", exc.message))
        exc.hint = exc.hint or f"run `gpustack {plan.command}` again: it continues where this run stopped"
        raise
    except GpustackError as exc:
        write_json(run_dir / "run.json", finish_record(record, "failed", exc.message))
        raise
    finish()
    write_json(run_dir / "run.json", finish_record(record, "ok"))
    return RunResult(run_dir, summaries, findings, facts)


def _run_stages(
    plan: CommandPlan,
    cfg: Config,
    opts: RunOptions,
    console: Console,
    steps: Mapping[str, StepFn],
    run_dir: Path,
    summaries: list[StageSummary],
    findings: list[Finding],
    facts: dict[str, Any],
    finish: Callable[[], None],
    after_preflight: Guard | None,
    control: Path | None = None,
) -> None:
    if any(s.runner in ("preflight", "ansible") for s in opts.stages):
        host_key_gate(cfg, opts, console)  # a run of Python steps only contacts no host

    for runner, group in groupby(opts.stages, key=lambda s: s.runner):
        stages = list(group)
        if runner == "preflight":
            t0 = time.monotonic()
            summaries.append(StageSummary("preflight", "running", 0.0, hosts=targets(cfg, opts.limit)))
            got, found = run_preflight(plan, cfg, opts, run_dir, console, control_dir=control)
            facts.update(got)
            findings[:] = found
            write_json(run_dir / "preflight.json", [f.__dict__ for f in findings])
            summaries[-1].status, summaries[-1].elapsed = "ok", time.monotonic() - t0
            try:
                report_preflight(findings, console)
                if after_preflight is not None:
                    after_preflight(cfg, facts)
            except GpustackError:
                summaries[-1].status = "failed"
                write_json(run_dir / "summary.json", [s.__dict__ for s in summaries])
                raise
        elif runner == "ansible":
            rows, result = ansible_stages(plan, stages, cfg, opts, run_dir, console, facts, control_dir=control)
            summaries += rows
            if result.status == "canceled":
                where = ", ".join(r.stage for r in rows if r.status == "interrupted") or "the host layer"
                raise Interrupted(f"interrupted during {where}")
            if result.failures or result.rc != 0:
                finish()
                result.raise_for_failures()
        else:
            for stage in stages:
                ctx = StepContext(cfg, opts, console, run_dir, facts)
                t0 = time.monotonic()
                try:
                    summaries += steps[stage.id](ctx)
                except GpustackError:
                    summaries.append(StageSummary(stage.id, "failed", 0.0, hosts=[cfg.control_plane.name]))
                    finish()
                    raise
                except Interrupted as exc:
                    summaries.append(StageSummary(stage.id, "interrupted", time.monotonic() - t0))
                    exc.message = f"interrupted during {stage.id}"
                    raise
