"""The cluster stage (``up``'s and ``upgrade --components``' ``cluster``): the cluster layer
(:mod:`gpustack.cluster.layer`) through the admin kubeconfig the control-plane stage fetched, as
the engine's summary rows."""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.engine.options import RunOptions
from gpustack.engine.steps import StageSummary, StepContext
from gpustack.errors import StageError
from gpustack.paths import kubeconfig_path, state_dir


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
    opts: RunOptions,
    console: Console,
    *,
    charts: Mapping[str, Path] | None = None,
) -> list[StageSummary]:
    """The cluster layer (Helm releases and objects) through the admin kubeconfig the
    control-plane stage fetched. In a dry run nothing is rendered against the cluster."""
    if opts.dry_run:
        console.print("[skip]cluster: skipped in a dry run (see `gpustack render` for what it would apply)[/skip]")
        return [StageSummary("cluster", "not run", 0.0, note="dry run")]
    from gpustack.cluster.layer import etcd_metrics_exposed, foreign_nfd_running, run_cluster_layer
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
    summary = summarize_facts(
        facts, nfd_running=foreign_nfd_running(kube), etcd_metrics_exposed=etcd_metrics_exposed(kube)
    )
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
