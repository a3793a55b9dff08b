"""``gpustack etcd snapshot`` and ``gpustack etcd restore``: options, what will be lost, the question;
gpustack/commands/etcd.py and gpustack/commands/etcd_restore.py run them."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
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
)
from gpustack.console import literal

etcd_app = typer.Typer(help="etcd snapshots: take a verified one now, or restore one.", no_args_is_help=True)


@etcd_app.command(
    "snapshot",
    short_help="Take a verified etcd snapshot and copy it here",
    epilog=examples("gpustack etcd snapshot", "gpustack plan etcd-snapshot"),
)
def snapshot(
    config: ConfigOpt = None,
    dry_run: DryRunOpt = False,
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


@etcd_app.command(
    "restore",
    short_help="Restore etcd on every control plane from a snapshot",
    epilog=examples(
        "gpustack plan etcd-restore        # what it does, first",
        "gpustack etcd restore             # the newest local snapshot",
        "gpustack etcd restore ~/etcd-cp1-20261129T044512Z.db --yes",
    ),
)
def restore(
    snapshot: Annotated[
        Path | None,
        typer.Argument(
            metavar="SNAPSHOT",
            help="the snapshot file (default: the newest of this cluster in the state directory that verifies)",
        ),
    ] = None,
    config: ConfigOpt = None,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    accept_new_host_keys: AcceptKeysOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Restore every control plane's etcd from one snapshot, as kubeadm documents it: etcd and the API servers
    stopped, each member's data directory moved aside (kept) and restored with a new cluster token, started, the
    API checked. Everything written after the snapshot is lost: it says what before asking. Re-run after an
    interruption to finish the same restore."""
    from gpustack.cluster.etcd_restore import losses, snapshot_file
    from gpustack.commands.etcd_restore import RestoreOptions, prepare
    from gpustack.commands.etcd_restore import restore as run_restore

    console = console_for(verbose)
    cfg = load_config(config).config
    flags = run_flags(dry_run=dry_run, verbose=verbose, accept_new_host_keys=accept_new_host_keys)
    opts = RestoreOptions.from_flags(flags, snapshot=snapshot_file(snapshot))
    record = prepare(cfg, opts)
    what = "continues the unfinished restore " + str(record["id"]) if record.get("resumed") else "restore"
    console.print(
        f"[stage]etcd restore[/stage] cluster {literal(cfg.cluster.name)}{' (dry run)' if dry_run else ''}: {what}"
    )
    for line in losses(record, datetime.now(timezone.utc)):
        console.print(f"  {line}", markup=False)
    if not dry_run:
        confirm_or_refuse(
            console,
            f"Restore etcd from this snapshot and lose what was written since {record['taken']}?",
            yes=yes,
            verb="restore",
        )
    result = run_restore(cfg, opts, console, record)
    if not dry_run:
        console.print(
            f"[ok]etcd restored[/ok] from {literal(str(record['snapshot']))} on "
            f"{literal(', '.join(record['members']))}; {result.nodes} node(s) read through the API server"
        )
