"""``gpustack upgrade --to 1.Y[.Z]`` | ``--components``: options and the question;
gpustack/commands/upgrade.py and gpustack/commands/components.py run them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from gpustack.cli.options import (
    AcceptKeysOpt,
    ConfigOpt,
    IgnorePreflightOpt,
    VerboseOpt,
    YesOpt,
    confirm_or_refuse,
    console_for,
    examples,
    load_config,
    run_flags,
)
from gpustack.console import literal
from gpustack.errors import UsageError

if TYPE_CHECKING:  # the config model is heavy: `gpustack --help` must not import it
    from gpustack.config.model import Config
    from gpustack.console import Console
    from gpustack.engine.options import RunFlags


#: the examples at the end of its help page
EXAMPLES = examples(
    "gpustack plan upgrade --to 1.36   # each node's turn, first",
    "gpustack upgrade --to 1.36",
    "gpustack upgrade --components",
)


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
    ignore_preflight: IgnorePreflightOpt = None,
    no_snapshot: Annotated[
        bool, typer.Option("--no-snapshot", help="no etcd snapshot first (an etcd that no longer answers)")
    ] = False,
    yes: YesOpt = False,
    accept_new_host_keys: AcceptKeysOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Upgrade Kubernetes one minor (or patch): control plane first, workers drained one at a time.
    Refused (exit 2) when the version-skew policy forbids it; re-run after an interruption to continue."""
    from gpustack.cluster import skew
    from gpustack.commands.upgrade import UpgradeOptions
    from gpustack.commands.upgrade import upgrade as run_upgrade

    if bool(to) == components:
        raise UsageError(
            "gpustack upgrade needs --to VERSION (e.g. --to 1.36) or --components, one at a time "
            "(Kubernetes first, then the components)"
        )
    console = console_for(verbose)
    cfg = load_config(config).config
    flags = run_flags(
        dry_run=dry_run, verbose=verbose, accept_new_host_keys=accept_new_host_keys, ignore_preflight=ignore_preflight
    )
    if components:
        _components(cfg, console, flags, yes=yes)
        return
    assert to is not None
    target = skew.resolve_target(to)
    console.print(
        f"[stage]upgrade[/stage] cluster {literal(cfg.cluster.name)} to Kubernetes {literal(target)}{' (dry run)' if dry_run else ''}:"
    )
    for step in skew.upgrade_order(cfg, target):
        console.print(f"  - {step.node}: {step.detail}", markup=False)
    if not dry_run:
        confirm_or_refuse(console, f"Upgrade {len(cfg.nodes)} node(s) to {target}?", yes=yes, verb="upgrade")
    run_upgrade(cfg, UpgradeOptions.from_flags(flags, to=target, no_snapshot=no_snapshot), console)


def _components(cfg: Config, console: Console, flags: RunFlags, *, yes: bool) -> None:
    from gpustack.commands.components import PLAN, upgrade_components
    from gpustack.config import compat

    dry_run = flags.dry_run

    console.print(
        f"[stage]upgrade --components[/stage] cluster {literal(cfg.cluster.name)}{' (dry run)' if dry_run else ''}:"
    )
    for component, version, *_ in compat.pin_rows(cfg)[5:]:
        console.print(f"  - {component} -> {version} (CRDs from the chart applied first)", markup=False)
    if not dry_run:
        confirm_or_refuse(console, "Upgrade the cluster's components?", yes=yes, verb="upgrade")
    upgrade_components(cfg, flags.run_options(PLAN.stages), console)
