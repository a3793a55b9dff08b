"""``gpustack upgrade --to 1.Y[.Z]``: options and the question; gpustack/upgrade.py runs it."""

from __future__ import annotations

from typing import Annotated

import typer

from gpustack.cli.options import ConfigOpt, VerboseOpt, YesOpt, console_for, load_config, split_csv
from gpustack.errors import UsageError


def upgrade(
    to: Annotated[
        str | None, typer.Option("--to", help="target Kubernetes version: a pinned minor (1.36) or patch (1.36.4)")
    ] = None,
    config: ConfigOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="check the skew policy and run Ansible in check mode: change nothing")
    ] = False,
    ignore_preflight: Annotated[
        list[str] | None, typer.Option(help="preflight check ids/names to downgrade to warnings")
    ] = None,
    yes: YesOpt = False,
    accept_new_host_keys: Annotated[
        bool, typer.Option(help="trust and record SSH host keys seen for the first time")
    ] = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Upgrade Kubernetes one minor (or patch): control plane first, workers drained one at a time.
    Refused (exit 2) when the version-skew policy forbids it; re-run after an interruption to continue."""
    from gpustack import skew
    from gpustack.upgrade import UpgradeOptions
    from gpustack.upgrade import upgrade as run_upgrade

    if not to:
        raise UsageError("gpustack upgrade needs --to VERSION (e.g. --to 1.36)")
    console = console_for(verbose)
    cfg = load_config(config).config
    target = skew.resolve_target(to)
    console.print(
        f"[stage]upgrade[/stage] cluster {cfg.cluster.name} to Kubernetes {target}{' (dry run)' if dry_run else ''}:"
    )
    for step in skew.upgrade_order(cfg, target):
        console.print(f"  - {step.node}: {step.detail}", markup=False)
    if not dry_run and not yes:
        if not console.interactive:
            raise UsageError("no terminal to confirm on: pass --yes to upgrade non-interactively (or --dry-run)")
        if not console.confirm(f"Upgrade {len(cfg.nodes)} node(s) to {target}?", assume_yes=False):
            raise typer.Abort()
    opts = UpgradeOptions(
        to=target,
        dry_run=dry_run,
        verbosity=max(0, verbose - 1),
        accept_new_host_keys=accept_new_host_keys,
        ignore_preflight=tuple(split_csv(ignore_preflight)),
    )
    run_upgrade(cfg, opts, console)
