"""``gpustack up``: config -> plan -> host keys -> preflight -> host layer -> summary.

Each step calls one runner; everything else here is ordering and reporting.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from gpustack.checks import preflight as pf
from gpustack.checks.model import Finding
from gpustack.config.model import Config, Node
from gpustack.console import Console
from gpustack.errors import GpustackError, PreflightError, StageError
from gpustack.paths import ensure_private_dir, kubeconfig_path, new_run_dir, resource_dir, state_dir
from gpustack.plan import Stage
from gpustack.render import converge
from gpustack.render.ansible import extravars, inventory
from gpustack.runners import ansible as ar
from gpustack.runners import ssh


@dataclass(frozen=True)
class UpOptions:
    stages: Sequence[Stage]
    dry_run: bool = False
    verbosity: int = 0
    assume_yes: bool = False
    accept_new_host_keys: bool = False
    ignore_preflight: Sequence[str] = ()
    #: visit every host in every stage, even where the preflight found the stage converged
    full: bool = False


@dataclass
class StageSummary:
    stage: str
    status: str
    elapsed: float
    changed: int = 0
    hosts: list[str] = field(default_factory=list)
    note: str = ""


@dataclass
class UpResult:
    run_dir: Path
    summaries: list[StageSummary]
    findings: list[Finding]
    kubeconfig: Path | None


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


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def _host_key_gate(cfg: Config, opts: UpOptions, console: Console) -> None:
    host_key_gate(cfg, cfg.nodes, opts.accept_new_host_keys, console)


def host_key_gate(cfg: Config, nodes: Sequence[Node], accept_new: bool, console: Console) -> None:
    """Check (or, when asked, record) every SSH node's host key before Ansible connects."""
    targets = [(n.address, n.port) for n in nodes if n.connection == "ssh"]
    if not targets:
        return
    accept = accept_new or cfg.ssh.accept_new_host_keys
    results = ssh.check_host_keys(targets, cfg.ssh.known_hosts, accept_new=accept, timeout=cfg.ssh.connect_timeout)
    for r in results:
        if r.status == "recorded":
            console.warn(f"recorded new host key for {r.host}:{r.port} {r.fingerprint} in {cfg.ssh.known_hosts}")
    ssh.raise_for_host_keys(results, cfg.ssh.known_hosts.expanduser())


def _settings(cfg: Config, opts: UpOptions, *, check: bool) -> ar.AnsibleSettings:
    return ansible_settings(cfg, opts.verbosity, check=check)


def ansible_settings(cfg: Config, verbosity: int, *, check: bool) -> ar.AnsibleSettings:
    return ar.AnsibleSettings(
        known_hosts=cfg.ssh.known_hosts.expanduser(),
        connect_timeout=cfg.ssh.connect_timeout,
        verbosity=verbosity,
        check=check,
    )


def run_preflight(
    cfg: Config, opts: UpOptions, run_dir: Path, console: Console
) -> tuple[dict[str, Any], list[Finding]]:
    """Collect every host's facts (read-only) and check them; returns (facts by node, findings)."""
    facts_dir = ensure_private_dir(run_dir / "facts")
    ev = extravars(cfg, kubeconfig_dest=kubeconfig_path(cfg.cluster.name), facts_dir=facts_dir)
    kwargs = ar.build_runner_kwargs(
        private_data_dir=run_dir / "ansible-preflight",
        project_dir=resource_dir("playbooks"),
        playbook="preflight.yml",
        inventory=_stage_inventory(cfg, ev),
        extravars=ev,
        tags=(),
        settings=_settings(cfg, opts, check=False),
        ident="preflight",
    )
    with Progress(console) as progress:
        result = ar.run_playbook(kwargs, ar.StageTracker(progress))
    facts: dict[str, Any] = {}
    for node in cfg.nodes:
        path = facts_dir / f"{node.name}.json"
        if path.exists():
            facts[node.name] = json.loads(path.read_text(encoding="utf-8"))
    if result.failures and not facts:
        result.raise_for_failures()
    findings = pf.run_checks(cfg, facts)
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


def _stage_inventory(cfg: Config, ev: dict[str, Any]) -> dict[str, Any]:
    """The inventory with each host's per-stage input digests (see gpustack/render/converge.py)."""
    return converge.with_stage_digests(inventory(cfg), ev, converge.tree_digest(resource_dir("playbooks")))


def stage_hosts(
    cfg: Config, opts: UpOptions, stage_ids: list[str], facts: dict[str, Any]
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Which hosts each stage visits: all of them with --full or without preflight facts; else
    only those where the preflight did not find the stage converged. The control-plane stage
    always runs while this machine has no copy of the cluster's kubeconfig (it delivers one)."""
    if opts.full or not facts:
        return {}, {}
    must = [] if kubeconfig_path(cfg.cluster.name).exists() else ["control-plane"]
    return converge.stage_hosts(stage_ids, inventory(cfg), facts, must_run=must)


def run_host_layer(
    cfg: Config,
    opts: UpOptions,
    stage_ids: list[str],
    run_dir: Path,
    console: Console,
    patterns: dict[str, str] | None = None,
) -> ar.PlaybookResult:
    kubeconfig = kubeconfig_path(cfg.cluster.name)
    ensure_private_dir(kubeconfig.parent)
    ensure_private_dir(state_dir() / "bin")  # the helm stage installs this machine's Helm here
    ev = extravars(cfg, kubeconfig_dest=kubeconfig)
    inv = _stage_inventory(cfg, ev)
    if patterns:
        ev["gpustack_stage_hosts"] = patterns
    kwargs = ar.build_runner_kwargs(
        private_data_dir=run_dir / "ansible",
        project_dir=resource_dir("playbooks"),
        playbook="site.yml",
        inventory=inv,
        extravars=ev,
        tags=stage_ids,
        settings=_settings(cfg, opts, check=opts.dry_run),
        ident="site",
    )
    with Progress(console) as progress:
        return ar.run_playbook(kwargs, ar.StageTracker(progress))


def up(cfg: Config, opts: UpOptions, console: Console) -> UpResult:
    run_dir = new_run_dir()
    console.print(f"run directory: {run_dir}")
    _write_json(run_dir / "config.json", cfg.model_dump(mode="json"))
    summaries: list[StageSummary] = []
    findings: list[Finding] = []
    facts: dict[str, Any] = {}
    ids = [s.id for s in opts.stages]

    _host_key_gate(cfg, opts, console)

    if "preflight" in ids:
        t0 = time.monotonic()
        facts, findings = run_preflight(cfg, opts, run_dir, console)
        _write_json(run_dir / "preflight.json", [f.__dict__ for f in findings])
        summaries.append(StageSummary("preflight", "ok", time.monotonic() - t0, hosts=[n.name for n in cfg.nodes]))
        try:
            report_preflight(findings, console)
        except PreflightError:
            summaries[-1].status = "failed"
            _write_json(run_dir / "summary.json", [s.__dict__ for s in summaries])
            raise

    ansible_ids = [s.id for s in opts.stages if s.runner == "ansible"]
    result: ar.PlaybookResult | None = None
    if ansible_ids:
        patterns, converged = stage_hosts(cfg, opts, ansible_ids, facts)
        done = sorted(s for s, p in patterns.items() if p == converge.NO_HOSTS)
        if done:
            console.print(
                f"converged, nothing to do: {', '.join(done)} [dim](gpustack up --full visits them anyway)[/dim]"
            )
        result = run_host_layer(cfg, opts, ansible_ids, run_dir, console, patterns)
        for sid in ansible_ids:
            st = result.stages.get(sid)
            note = f"converged on {', '.join(converged[sid])}" if converged.get(sid) else ""
            if st is None:
                summaries.append(StageSummary(sid, "not run" if result.failures else "ok", 0.0, note=note))
                continue
            summaries.append(StageSummary(sid, st.status, st.elapsed, st.changed_total, sorted(st.hosts), note))
    if result is not None and (result.failures or result.rc != 0):
        _finish(run_dir, summaries, console, opts)
        result.raise_for_failures()

    if "cluster" in ids:
        try:
            summaries += run_cluster_stage(cfg, facts, opts, console)
        except GpustackError:
            summaries.append(StageSummary("cluster", "failed", 0.0, hosts=[cfg.control_plane.name]))
            _finish(run_dir, summaries, console, opts)
            raise
    _finish(run_dir, summaries, console, opts)
    kubeconfig = kubeconfig_path(cfg.cluster.name)
    return UpResult(run_dir, summaries, findings, kubeconfig if kubeconfig.exists() else None)


def _finish(run_dir: Path, summaries: list[StageSummary], console: Console, opts: UpOptions) -> None:
    _write_json(run_dir / "summary.json", [s.__dict__ for s in summaries])
    print_summary(summaries, console, dry_run=opts.dry_run)


def find_helm() -> str:
    """The Helm the helm stage installed for this machine, else one on PATH."""
    mine = state_dir() / "bin" / "helm"
    if mine.is_file():
        return str(mine)
    found = shutil.which("helm")
    if found:
        return found
    raise StageError(
        "no helm executable on this machine", stage="cluster", hint="run the helm stage first: gpustack up --only helm"
    )


def run_cluster_stage(cfg: Config, facts: dict[str, Any], opts: UpOptions, console: Console) -> list[StageSummary]:
    """The cluster layer (Helm releases and objects) through the admin kubeconfig the
    control-plane stage fetched. In a dry run nothing is rendered against the cluster."""
    if opts.dry_run:
        console.print("[skip]cluster: skipped in a dry run (see `gpustack render` for what it would apply)[/skip]")
        return [StageSummary("cluster", "not run", 0.0, note="dry run")]
    from gpustack.cluster import foreign_nfd_running, run_cluster_layer
    from gpustack.render.values import summarize_facts
    from gpustack.runners.helm import Helm
    from gpustack.runners.kube import Kube

    kubeconfig = kubeconfig_path(cfg.cluster.name)
    if not kubeconfig.is_file():
        raise StageError(
            f"no admin kubeconfig at {kubeconfig}",
            stage="cluster",
            hint="run the control-plane stage first: gpustack up --from control-plane",
        )
    console.print("[stage]▶ cluster[/stage]")
    t0 = time.monotonic()
    kube = Kube.from_kubeconfig(kubeconfig)
    summary = summarize_facts(facts, nfd_running=foreign_nfd_running(kube))
    steps = run_cluster_layer(
        cfg, kubeconfig, summary, console, helm=Helm(kubeconfig, executable=find_helm()), kube=kube
    )
    changed = sum(s.status == "changed" for s in steps)
    rows = [
        StageSummary(
            "cluster", "changed" if changed else "ok", time.monotonic() - t0, changed, [cfg.control_plane.name]
        )
    ]
    rows += [
        StageSummary(
            f"cluster:{s.step}",
            "changed" if s.status == "changed" else "ok",
            s.seconds,
            int(s.status == "changed"),
            note=s.detail,
        )
        for s in steps
    ]
    return rows


def print_summary(summaries: list[StageSummary], console: Console, *, dry_run: bool) -> None:
    style = {"ok": "ok", "changed": "changed", "failed": "fail", "not run": "skip"}
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
