"""``gpustack upgrade --to 1.Y[.Z]`` | ``--components``: options and the question; gpustack/upgrade.py and
gpustack/components.py run them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from gpustack.cli.options import AcceptKeysOpt, ConfigOpt, VerboseOpt, YesOpt, console_for, load_config, split_csv
from gpustack.errors import UsageError

if TYPE_CHECKING:  # the config model is heavy: `gpustack --help` must not import it
    from gpustack.config.model import Config
    from gpustack.console import Console


def upgrade(
    to: Annotated[
        str | None,
        typer.Option(
            "--to", metavar="VERSION", help="target Kubernetes version: a pinned minor (1.36) or patch (1.36.4)"
        ),
    ] = None,
    components: Annotated[
        bool,
        typer.Option(
            "--components", help="upgrade the Helm releases to their pinned chart versions (CRDs first) instead"
        ),
    ] = False,
    config: ConfigOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="check the skew policy and run Ansible in check mode: change nothing")
    ] = False,
    ignore_preflight: Annotated[
        list[str] | None, typer.Option(metavar="ID,...", help="preflight check ids/names to downgrade to warnings")
    ] = None,
    yes: YesOpt = False,
    accept_new_host_keys: AcceptKeysOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Upgrade Kubernetes one minor (or patch): control plane first, workers drained one at a time.
    Refused (exit 2) when the version-skew policy forbids it; re-run after an interruption to continue."""
    from gpustack import skew
    from gpustack.upgrade import UpgradeOptions
    from gpustack.upgrade import upgrade as run_upgrade

    if bool(to) == components:
        raise UsageError(
            "gpustack upgrade needs --to VERSION (e.g. --to 1.36) or --components, one at a time "
            "(Kubernetes first, then the components)"
        )
    console = console_for(verbose)
    cfg = load_config(config).config
    if components:
        _components(cfg, console, dry_run=dry_run, yes=yes, accept_new_host_keys=accept_new_host_keys,
                    ignore_preflight=split_csv(ignore_preflight, "--ignore-preflight"), verbose=verbose)  # fmt: skip
        return
    assert to is not None
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
        ignore_preflight=tuple(split_csv(ignore_preflight, "--ignore-preflight")),
    )
    run_upgrade(cfg, opts, console)


def _components(
    cfg: Config,
    console: Console,
    *,
    dry_run: bool,
    yes: bool,
    accept_new_host_keys: bool,
    ignore_preflight: list[str],
    verbose: int,
) -> None:
    from gpustack import lifecycle, plan
    from gpustack.components import upgrade_components
    from gpustack.config import compat

    console.print(f"[stage]upgrade --components[/stage] cluster {cfg.cluster.name}{' (dry run)' if dry_run else ''}:")
    for component, version in compat.pin_rows(cfg)[5:]:
        console.print(f"  - {component} -> {version} (CRDs from the chart applied first)", markup=False)
    if not dry_run and not yes:
        if not console.interactive:
            raise UsageError("no terminal to confirm on: pass --yes to upgrade non-interactively (or --dry-run)")
        if not console.confirm("Upgrade the cluster's components?", assume_yes=False):
            raise typer.Abort()
    opts = lifecycle.RunOptions(
        stages=plan.sequence("components").stages,
        dry_run=dry_run,
        verbosity=max(0, verbose - 1),
        assume_yes=True,
        accept_new_host_keys=accept_new_host_keys,
        ignore_preflight=ignore_preflight,
    )
    upgrade_components(cfg, opts, console)
