"""``gpustack secrets rotate-key``: options, what will happen, the question; gpustack/commands/secrets_rotate_key.py
runs it."""

from __future__ import annotations

import typer

from gpustack.cli.options import (
    AcceptKeysOpt,
    ConfigOpt,
    DryRunOpt,
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

secrets_app = typer.Typer(help="The cluster's Secret encryption at rest.", no_args_is_help=True)


@secrets_app.command(
    "rotate-key",
    short_help="Replace the Secret encryption key; resumable",
    epilog=examples("gpustack plan secrets-rotate-key    # what it does, first", "gpustack secrets rotate-key --yes"),
)
def rotate_key(
    config: ConfigOpt = None,
    dry_run: DryRunOpt = False,
    ignore_preflight: IgnorePreflightOpt = None,
    yes: YesOpt = False,
    accept_new_host_keys: AcceptKeysOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Replace the cluster's Secret encryption key: a new key added on every control plane, then made the one
    Secrets are written with, every Secret rewritten, the old key removed; each API server restarted one at a time
    at each step. Re-run after an interruption to finish the rotation (no second key is made)."""
    from gpustack.cluster.key_rotation import describe, refuse_without_encryption
    from gpustack.commands.secrets_rotate_key import RotateOptions, rotate

    console = console_for(verbose)
    cfg = load_config(config).config
    refuse_without_encryption(cfg)
    flags = run_flags(
        dry_run=dry_run, verbose=verbose, accept_new_host_keys=accept_new_host_keys, ignore_preflight=ignore_preflight
    )
    names = [n.name for n in cfg.control_planes]
    console.print(
        f"[stage]secrets rotate-key[/stage] cluster {literal(cfg.cluster.name)}{' (dry run)' if dry_run else ''}: "
        f"{literal(', '.join(names))}, one at a time, three restarts each; {literal(describe(cfg))}",
    )
    if len(names) == 1:
        console.print("  the only API server restarts three times: the Kubernetes API is unavailable meanwhile",
                      markup=False)  # fmt: skip
    if not dry_run:
        confirm_or_refuse(console, f"Rotate the Secret encryption key on {len(names)} control plane(s)?", yes=yes,
                          verb="rotate")  # fmt: skip
    rotate(cfg, RotateOptions.from_flags(flags), console)
    if not dry_run:
        console.print(f"[ok]encryption key rotated[/ok]: every Secret rewritten; the old key removed from "
                      f"{literal(', '.join(names))} and this machine's state")  # fmt: skip
