"""``gpustack up``: the `up` sequence (gpustack.plan) run by the engine (gpustack.lifecycle), plus
its one Python step, the cluster layer (Helm releases and objects through the admin kubeconfig)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpustack import lifecycle, plan, skew
from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.errors import StageError
from gpustack.lifecycle import StageSummary, StepContext
from gpustack.paths import kubeconfig_path, state_dir

#: `up`'s options are the engine's
UpOptions = lifecycle.RunOptions


@dataclass
class UpResult:
    run_dir: Path
    summaries: list[StageSummary]
    findings: list[Finding]
    kubeconfig: Path | None


def up(
    cfg: Config, opts: UpOptions, console: Console, *, bundle: Path | None = None, bundle_listen: str | None = None
) -> UpResult:
    """Run the `up` sequence; with ``bundle`` (``up --bundle DIR``), from an air-gapped bundle:
    checked against the config before anything else, served to the nodes for the run's lifetime
    (gpustack/bundle/use.py)."""
    if bundle is None:
        result = _run(cfg, opts, console, steps={"cluster": cluster_step})
    else:
        from gpustack.bundle.use import session
        from gpustack.paths import resource_dir

        with session(cfg, bundle, console, playbooks=resource_dir("playbooks"), listen=bundle_listen) as served:

            def bundled_cluster(ctx: StepContext) -> list[StageSummary]:
                return run_cluster_stage(ctx.cfg, ctx.facts, ctx.opts, ctx.console, charts=served.charts)

            opts = replace(opts, extravars={**opts.extravars, **served.extravars})
            result = _run(
                served.config,
                opts,
                console,
                steps={"cluster": bundled_cluster},
                also_after_preflight=lambda _cfg, facts: served.check_hosts(facts),
            )
    kubeconfig = kubeconfig_path(cfg.cluster.name)
    return UpResult(result.run_dir, result.summaries, result.findings, kubeconfig if kubeconfig.exists() else None)


def _run(
    cfg: Config,
    opts: UpOptions,
    console: Console,
    *,
    steps: Mapping[str, lifecycle.StepFn],
    also_after_preflight: lifecycle.Guard | None = None,
) -> lifecycle.RunResult:
    def after_preflight(c: Config, facts: Mapping[str, Any]) -> None:
        # a live cluster at another version is upgraded by `gpustack upgrade`, never by `up`
        skew.refuse_version_change(c, facts)
        if also_after_preflight is not None:
            also_after_preflight(c, facts)

    return lifecycle.run(plan.sequence("up"), cfg, opts, console, steps=steps, after_preflight=after_preflight)


def run_stage(cfg: Config, console: Console, stage_id: str, facts: Mapping[str, Any] | None = None) -> None:
    """Re-run one `up` stage without preflight (host keys verified, never recorded): what
    ``doctor --fix`` is given as its "run stage" callable. ``facts``: the hosts' facts, for the
    cluster stage (it sizes values from them)."""
    stages = plan.select(only=[stage_id], skip=["preflight"])
    opts = UpOptions(stages=stages, assume_yes=True, verbosity=max(0, console.verbosity - 1), facts=facts)
    up(cfg, opts, console)


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


def cluster_step(ctx: StepContext) -> list[StageSummary]:
    return run_cluster_stage(ctx.cfg, ctx.facts, ctx.opts, ctx.console)


def run_cluster_stage(
    cfg: Config,
    facts: dict[str, Any],
    opts: lifecycle.RunOptions,
    console: Console,
    *,
    charts: Mapping[str, Path] | None = None,
) -> list[StageSummary]:
    """The cluster layer (Helm releases and objects) through the admin kubeconfig the
    control-plane stage fetched. In a dry run nothing is rendered against the cluster."""
    if opts.dry_run:
        console.print("[skip]cluster: skipped in a dry run (see `gpustack render` for what it would apply)[/skip]")
        return [StageSummary("cluster", "not run", 0.0, note="dry run")]
    from gpustack.cluster import foreign_nfd_running, run_cluster_layer
    from gpustack.render.values import summarize_facts
    from gpustack.runners.helm import Helm
    from gpustack.runners.kubeconfig import kube_from_file

    kubeconfig = kubeconfig_path(cfg.cluster.name)
    if not kubeconfig.is_file():
        raise StageError(
            f"no admin kubeconfig at {kubeconfig}",
            stage="cluster",
            hint="run the control-plane stage first: gpustack up --from control-plane",
        )
    console.print("[stage]▶ cluster[/stage]")
    t0 = time.monotonic()
    kube = kube_from_file(kubeconfig)
    summary = summarize_facts(facts, nfd_running=foreign_nfd_running(kube))
    steps = run_cluster_layer(
        cfg, kubeconfig, summary, console, helm=Helm(kubeconfig, executable=find_helm()), kube=kube, charts=charts
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
