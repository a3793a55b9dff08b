"""The one run engine: any command's :class:`~gpustack.plan.CommandPlan`, run the same way.

    run directory -> SSH host-key gate -> stages in order -> summary

Stages run by kind (:data:`gpustack.plan.Runner`): ``preflight`` collects every host's facts
(read-only) and checks them (a failure stops the run before anything changes); consecutive
``ansible`` stages are one run of the command's playbook with those stages' tags and the run's host
limit; a ``python`` stage calls the step function the command registered under the stage id. Every
stage gets a row in the summary (status, changed count, time, hosts), printed and kept with the
Ansible artifacts, the facts and the effective config in the run directory.

Commands (``gpustack.up`` today) only supply their plan, options and Python steps.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import groupby
from pathlib import Path
from types import FrameType
from typing import Any

from rich.markup import escape

from gpustack.checks import preflight as pf
from gpustack.checks import sources
from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.errors import GpustackError, Interrupted, PreflightError, UsageError
from gpustack.lock import cluster_lock
from gpustack.paths import ensure_private_dir, kubeconfig_path, new_run_dir, resource_dir, state_dir
from gpustack.plan import CommandPlan, Stage
from gpustack.render import converge
from gpustack.render.ansible import extravars, inventory
from gpustack.runners import ansible as ar
from gpustack.runners import pinned_collections, ssh


@dataclass(frozen=True)
class RunOptions:
    stages: Sequence[Stage]
    dry_run: bool = False
    verbosity: int = 0
    assume_yes: bool = False
    accept_new_host_keys: bool = False
    ignore_preflight: Sequence[str] = ()
    #: node names the playbook runs on (``--limit``); empty: every node in the config
    limit: Sequence[str] = ()
    #: host facts already known (node -> gpustack_facts output), for a run without preflight
    facts: Mapping[str, Any] | None = None
    #: visit every host in every stage, even where the preflight found the stage converged
    full: bool = False
    #: the command's own playbook variables (on top of the config's)
    extravars: Mapping[str, Any] = field(default_factory=dict)
    #: stage id -> the only nodes its play may visit (``node add``: the new nodes); stages not
    #: named here visit their whole group (less the converged hosts)
    stage_nodes: Mapping[str, Sequence[str]] = field(default_factory=dict)


@dataclass
class StageSummary:
    stage: str
    status: str
    elapsed: float
    changed: int = 0
    hosts: list[str] = field(default_factory=list)
    note: str = ""
    #: host -> tasks that changed something there (Ansible stages)
    changed_by_host: dict[str, int] = field(default_factory=dict)


@dataclass
class RunResult:
    run_dir: Path
    summaries: list[StageSummary]
    findings: list[Finding]
    facts: dict[str, Any]


@dataclass
class StepContext:
    """What a Python step gets: the config, the options, the console, the run directory and the
    hosts' facts (from this run's preflight, or given in the options)."""

    cfg: Config
    opts: RunOptions
    console: Console
    run_dir: Path
    facts: dict[str, Any]


#: a Python stage: returns its summary rows (the first one is the stage's own)
StepFn = Callable[[StepContext], list[StageSummary]]


class Progress:
    """Feeds the console from runner events: one line per stage start, task status in a spinner."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.stage: str | None = None
        self.stage_started = time.monotonic()
        self.status: Any = None

    def __enter__(self) -> Progress:
        if self.console.interactive:
            self.status = self.console.out.status("starting", spinner="dots")
            self.status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.__exit__(None, None, None)

    def end(self, result: ar.StageResult) -> None:
        """A stage's end line: time, changed count, hosts (or why it had none)."""
        if result.failures:
            verdict = f"[fail]failed[/fail] on {', '.join(sorted({f.host for f in result.failures}))}"
        elif not result.hosts:
            verdict = "[skip]nothing to do (converged or no host in this stage)[/skip]"
        else:
            verdict = (
                f"[{'changed' if result.changed_total else 'ok'}]{result.changed_total} changed[/] "
                f"on {len(result.hosts)} host(s)"
            )
        self.console.print(f"[stage]■ {escape(result.stage)}[/stage] {verdict} [dim]{result.elapsed:.1f}s[/dim]")

    def __call__(self, stage: str, host: str | None, task: str | None) -> None:
        if stage != self.stage:
            self.stage = stage
            self.stage_started = time.monotonic()
            self.console.print(f"[stage]▶ {stage}[/stage]")
        elapsed = time.monotonic() - self.stage_started
        line = f"[stage]{stage}[/stage] {'[host]' + host + '[/host] ' if host else ''}{task or ''} [dim]{elapsed:5.1f}s[/dim]"
        if self.status is not None:
            self.status.update(line)
        elif self.console.verbosity > 0 and task:
            self.console.print(f"  {line}")


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def targets(cfg: Config, limit: Sequence[str]) -> list[str]:
    """The node names a run touches: the limit (checked against the config), else every node."""
    names = [n.name for n in cfg.nodes]
    unknown = [n for n in limit if n not in names]
    if unknown:
        raise UsageError(f"unknown node(s) {', '.join(unknown)}; the config has: {', '.join(names)}")
    return [n for n in names if n in limit] if limit else names


def host_key_gate(cfg: Config, opts: RunOptions, console: Console) -> None:
    """Every SSH node's host key known (or, when asked, recorded) before anything connects."""
    chosen = set(targets(cfg, opts.limit))
    hosts = [(n.address, n.port) for n in cfg.nodes if n.connection == "ssh" and n.name in chosen]
    if not hosts:
        return
    accept = opts.accept_new_host_keys or cfg.ssh.accept_new_host_keys
    results = ssh.check_host_keys(hosts, cfg.ssh.known_hosts, accept_new=accept, timeout=cfg.ssh.connect_timeout)
    for r in results:
        if r.status == "recorded":
            console.warn(f"recorded new host key for {r.host}:{r.port} {r.fingerprint} in {cfg.ssh.known_hosts}")
    ssh.raise_for_host_keys(results, cfg.ssh.known_hosts.expanduser())


def _settings(cfg: Config, opts: RunOptions, *, check: bool) -> ar.AnsibleSettings:
    return ar.AnsibleSettings(
        known_hosts=cfg.ssh.known_hosts.expanduser(),
        connect_timeout=cfg.ssh.connect_timeout,
        verbosity=opts.verbosity,
        check=check,
        collections_path=pinned_collections.default_search_path(),
    )


def stage_inventory(cfg: Config, ev: Mapping[str, Any]) -> dict[str, Any]:
    """The inventory with each host's per-stage input digests (see gpustack/render/converge.py)."""
    return converge.with_stage_digests(inventory(cfg), dict(ev), converge.tree_digest(resource_dir("playbooks")))


def stage_hosts(
    cfg: Config, opts: RunOptions, stage_ids: list[str], facts: Mapping[str, Any]
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Which hosts each stage visits: all of them with --full or without preflight facts; else
    only those where the preflight did not find the stage converged. The control-plane stage
    always runs while this machine has no copy of the cluster's kubeconfig (it delivers one)."""
    only = {s: list(n) for s, n in opts.stage_nodes.items()} or None
    if (opts.full or not facts) and only is None:
        return {}, {}
    must = [] if kubeconfig_path(cfg.cluster.name).exists() else ["control-plane"]
    known = {} if opts.full else dict(facts)
    return converge.stage_hosts(stage_ids, inventory(cfg), known, must_run=must, only=only)


def run_playbook(
    cfg: Config,
    opts: RunOptions,
    *,
    playbook: str,
    tags: Sequence[str],
    private_dir: Path,
    ident: str,
    check: bool,
    console: Console,
    facts_dir: Path | None = None,
    stage_patterns: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> ar.PlaybookResult:
    """One run of a shipped playbook with the stages' tags and the run's host limit, with progress."""
    kubeconfig = kubeconfig_path(cfg.cluster.name)
    ev = extravars(cfg, kubeconfig_dest=kubeconfig, facts_dir=facts_dir)
    # the stage digests cover the config's inputs, not a command's own variables: a node that
    # `node add` prepared is converged for the next `up`
    inv = stage_inventory(cfg, ev)
    ev.update(opts.extravars)
    ev.update(extra or {})  # this run's own (the preflight's sources to probe)
    if stage_patterns:
        ev["gpustack_stage_hosts"] = dict(stage_patterns)
    kwargs = ar.build_runner_kwargs(
        private_data_dir=private_dir,
        project_dir=resource_dir("playbooks"),
        playbook=playbook,
        inventory=inv,
        extravars=ev,
        tags=tags,
        settings=_settings(cfg, opts, check=check),
        ident=ident,
    )
    if opts.limit:
        kwargs["limit"] = ",".join(targets(cfg, opts.limit))
    with Progress(console) as progress, _cancel_on_signal(console) as cancelled:
        return ar.run_playbook(kwargs, ar.StageTracker(progress, on_end=progress.end), cancel=cancelled)


@contextmanager
def _cancel_on_signal(console: Console) -> Iterator[Callable[[], bool]]:
    """While a playbook runs, SIGINT/SIGTERM only ask ansible-runner to cancel it (it then kills
    the playbook's process group and reports "canceled"); raising from a signal handler inside
    ansible-runner's loop would leave ansible-playbook running."""
    flag = {"set": False}

    def ask(signum: int, frame: FrameType | None) -> None:
        if not flag["set"]:
            console.warn("interrupting: stopping the playbook run (the summary follows)")
        flag["set"] = True

    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    old = {sig: signal.signal(sig, ask) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield lambda: flag["set"]
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def run_preflight(
    cfg: Config, opts: RunOptions, run_dir: Path, console: Console
) -> tuple[dict[str, Any], list[Finding]]:
    """Collect every host's facts (read-only) and check them; returns (facts by node, findings)."""
    facts_dir = ensure_private_dir(run_dir / "facts")
    # what the selected stages will download, tried from every host (P24, P25)
    probes = sources.probe_list(cfg, [s.id for s in opts.stages], full=opts.full, run_vars=opts.extravars)
    result = run_playbook(
        cfg, opts, playbook="preflight.yml", tags=(), private_dir=run_dir / "ansible-preflight",
        ident="preflight", check=False, console=console, facts_dir=facts_dir,
        extra={"gpustack_preflight_sources": probes},
    )  # fmt: skip
    facts: dict[str, Any] = {}
    for name in targets(cfg, opts.limit):
        path = facts_dir / f"{name}.json"
        if path.exists():
            facts[name] = json.loads(path.read_text(encoding="utf-8"))
    if result.status == "canceled":
        raise Interrupted("interrupted during the preflight; nothing was changed")
    if result.failures and not facts:
        result.raise_for_failures()
    findings = pf.run_checks(cfg, facts, nodes=targets(cfg, opts.limit))
    for f in result.failures:
        findings.append(
            Finding(
                "P00-facts",
                "host",
                "fail",
                f"could not collect facts: {f.message}",
                host=f.host,
                fix="check SSH access and sudo on that host",
            )
        )
    return facts, pf.apply_ignores(findings, list(opts.ignore_preflight) + list(cfg.preflight.ignore))


def report_preflight(findings: list[Finding], console: Console) -> None:
    shown = [f for f in findings if f.status != "pass" or console.verbosity > 0]
    if shown:
        rows = [
            [
                f.host or "",
                f.id,
                f"[{f.status}]{f.status}[/{f.status}]",
                f.summary + (f"\n[dim]{f.evidence}[/dim]" if f.evidence else ""),
                f.fix,
            ]
            for f in shown
        ]
        console.table("Preflight", ["host", "check", "status", "finding", "fix"], rows)
    fails = [f for f in findings if f.status == "fail"]
    if fails:
        raise PreflightError(
            f"preflight failed: {len(fails)} problem(s) on {', '.join(sorted({f.host or '?' for f in fails}))}; nothing was changed",
            hint="fix them, or pass --ignore-preflight "
            + ",".join(sorted({f.name for f in fails}))
            + " if you are sure",
        )
    console.print(
        f"[ok]preflight passed[/ok] on {len({f.host for f in findings})} host(s)"
        + (
            f" with {sum(f.status == 'warn' for f in findings)} warning(s)"
            if any(f.status == "warn" for f in findings)
            else ""
        )
    )


def _ansible_stages(
    plan: CommandPlan,
    stages: list[Stage],
    cfg: Config,
    opts: RunOptions,
    run_dir: Path,
    console: Console,
    facts: Mapping[str, Any],
) -> tuple[list[StageSummary], ar.PlaybookResult]:
    ensure_private_dir(kubeconfig_path(cfg.cluster.name).parent)
    ensure_private_dir(state_dir() / "bin")  # the helm stage installs this machine's Helm here
    ids = [s.id for s in stages]
    patterns, converged = stage_hosts(cfg, opts, ids, facts) if plan.converges else ({}, {})
    done = sorted(s for s, p in patterns.items() if p == converge.NO_HOSTS)
    if done:
        console.print(f"converged, nothing to do: {', '.join(done)} [dim](--full visits them anyway)[/dim]")
    first = not (run_dir / "ansible").exists()
    result = run_playbook(
        cfg, opts, playbook=plan.playbook, tags=ids, private_dir=run_dir / ("ansible" if first else f"ansible-{ids[0]}"),
        ident=plan.playbook.removesuffix(".yml"), check=opts.dry_run, console=console, stage_patterns=patterns,
    )  # fmt: skip
    rows = []
    for sid in ids:
        st = result.stages.get(sid)
        note = f"converged on {', '.join(converged[sid])}" if converged.get(sid) else ""
        if st is None:
            # a play that never started ran nothing, whatever the reason
            rows.append(StageSummary(sid, "not run", 0.0, note=note))
            continue
        status = st.status
        if result.status == "canceled" and not st.failures and (st.ended is None or st is result.last_stage):
            status = "interrupted"
        rows.append(StageSummary(sid, status, st.elapsed, st.changed_total, sorted(st.hosts), note, dict(st.changed)))
    return rows, result


#: a command's own check of the preflight facts before anything changes (raises to refuse the run)
Guard = Callable[[Config, Mapping[str, Any]], None]


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
    console.print(f"run directory: {run_dir}")
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
        _run_stages(plan, cfg, opts, console, steps, run_dir, summaries, findings, facts, finish, after_preflight)
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


#: version of a run directory's run.json
RUN_RECORD_FORMAT = 1


def _utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_record(plan: CommandPlan, cfg: Config, opts: RunOptions) -> dict[str, Any]:
    """What ``<run dir>/run.json`` says while a run goes on (``gpustack status`` reads it)."""
    return {
        "format": RUN_RECORD_FORMAT,
        "command": plan.command,
        "cluster": cfg.cluster.name,
        "nodes": sorted(set(opts.limit) | {n for ns in opts.stage_nodes.values() for n in ns}),
        "dry_run": opts.dry_run,
        "started": _utc(),
        "finished": None,
        "result": "running",
        "error": None,
    }


def finish_record(record: Mapping[str, Any], result: str, error: str | None = None) -> dict[str, Any]:
    """The record once the run ended: ``ok``, ``failed`` (with the error) or ``interrupted``."""
    return {**record, "finished": _utc(), "result": result, "error": error}


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
) -> None:
    if any(s.runner in ("preflight", "ansible") for s in opts.stages):
        host_key_gate(cfg, opts, console)  # a run of Python steps only contacts no host

    for runner, group in groupby(opts.stages, key=lambda s: s.runner):
        stages = list(group)
        if runner == "preflight":
            t0 = time.monotonic()
            summaries.append(StageSummary("preflight", "running", 0.0, hosts=targets(cfg, opts.limit)))
            got, found = run_preflight(cfg, opts, run_dir, console)
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
            rows, result = _ansible_stages(plan, stages, cfg, opts, run_dir, console, facts)
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


def print_summary(summaries: list[StageSummary], console: Console, *, dry_run: bool) -> None:
    style = {"ok": "ok", "changed": "changed", "failed": "fail", "not run": "skip", "interrupted": "fail"}
    rows = [
        [
            s.stage,
            f"[{style.get(s.status, 'skip')}]{s.status}[/]",
            str(s.changed),
            f"{s.elapsed:.1f}s",
            ", ".join(s.hosts) + (f"{' ' if s.hosts else ''}[dim]({escape(s.note)})[/dim]" if s.note else ""),
        ]
        for s in summaries
    ]
    total = sum(s.elapsed for s in summaries)
    console.table(
        f"Summary{' (dry run: check mode, nothing changed)' if dry_run else ''} — {total:.1f}s",
        ["stage", "status", "changed", "time", "hosts"],
        rows,
    )
