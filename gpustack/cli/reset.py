"""``gpustack reset``: options, the description of what goes, the question; gpustack/commands/reset.py runs it."""

from __future__ import annotations

from typing import Annotated

import typer

from gpustack.cli.options import (
    AcceptKeysOpt,
    ConfigOpt,
    DryRunOpt,
    VerboseOpt,
    YesOpt,
    confirm_or_refuse,
    console_for,
    examples,
    load_config,
    run_flags,
    split_csv,
)
from gpustack.console import literal

#: the examples at the end of its help page
EXAMPLES = examples(
    "gpustack reset --dry-run",
    "gpustack reset --node w3",
    "gpustack reset --purge --forget",
)


def reset(
    config: ConfigOpt = None,
    node: Annotated[
        list[str] | None,
        typer.Option("--node", metavar="NAME,...", help="reset only these nodes (comma-separated or repeated)"),
    ] = None,
    purge: Annotated[
        bool, typer.Option("--purge", help="also remove the Kubernetes packages and the files gpustack wrote")
    ] = False,
    restore: Annotated[
        bool, typer.Option("--restore", help="put back /etc/fstab and containerd's config from up's backups")
    ] = False,
    forget: Annotated[
        bool, typer.Option("--forget", help="delete this machine's state of the cluster instead of archiving it")
    ] = False,
    no_snapshot: Annotated[
        bool,
        typer.Option("--no-snapshot", help="no etcd snapshot first (an etcd that no longer answers)"),
    ] = False,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    accept_new_host_keys: AcceptKeysOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Tear the cluster (or --node NAME) down: kubeadm reset, Kubernetes' files, links and iptables chains,
    gpustack's firewall chain. Never flushes a table, changes a policy or drops SSH."""
    from gpustack.commands.reset import ResetOptions, describe, select_nodes
    from gpustack.commands.reset import reset as run_reset

    console = console_for(verbose)
    cfg = load_config(config).config
    opts = ResetOptions.from_flags(
        run_flags(dry_run=dry_run, verbose=verbose, accept_new_host_keys=accept_new_host_keys),
        nodes=split_csv(node, "--node"),
        purge=purge,
        restore=restore,
        forget=forget,
        no_snapshot=no_snapshot,
    )
    nodes = select_nodes(cfg, opts.nodes)
    console.print(f"[stage]reset[/stage] cluster {literal(cfg.cluster.name)}{' (dry run)' if dry_run else ''}:")
    for line in describe(cfg, nodes, opts):
        console.print(f"  - {line}", markup=False)
    if not dry_run:
        confirm_or_refuse(console, f"Reset {len(nodes)} host(s)?", yes=yes, verb="reset")
    run_reset(cfg, opts, console)
