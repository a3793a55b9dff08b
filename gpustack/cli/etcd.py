"""``gpustack etcd snapshot``: options; gpustack/commands/etcd.py runs it."""

from __future__ import annotations

from typing import Annotated

import typer

from gpustack.cli.options import AcceptKeysOpt, ConfigOpt, VerboseOpt, console_for, examples, load_config, run_flags

etcd_app = typer.Typer(
    help="etcd snapshots: take a verified one now (restoring one: docs/lifecycle.md).", no_args_is_help=True
)


@etcd_app.command(
    "snapshot",
    short_help="Take a verified etcd snapshot and copy it here",
    epilog=examples("gpustack etcd snapshot", "gpustack plan etcd-snapshot"),
)
def snapshot(
    config: ConfigOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Ansible check mode: change nothing")] = False,
    accept_new_host_keys: AcceptKeysOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """etcdctl snapshot save on the first control plane (the etcd static pod's etcdctl, kubeadm's client
    certificate), its integrity hash checked, kept there and copied to this machine's state directory (0600)."""
    from gpustack.commands.etcd import SnapshotOptions
    from gpustack.commands.etcd import snapshot as run_snapshot

    console = console_for(verbose)
    cfg = load_config(config).config
    opts = SnapshotOptions.from_flags(
        run_flags(dry_run=dry_run, verbose=verbose, accept_new_host_keys=accept_new_host_keys)
    )
    run_snapshot(cfg, opts, console)
