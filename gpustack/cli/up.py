"""``gpustack up``: parse the flags, confirm, run the `up` sequence, then verify."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpustack.cli.options import (
    AcceptKeysOpt,
    ConfigOpt,
    FromOpt,
    StagesOpt,
    VerboseOpt,
    YesOpt,
    confirm_or_refuse,
    console_for,
    examples,
    load_config,
    run_flags,
    split_csv,
    verify_after,
)
from gpustack.console import literal

#: the examples at the end of its help page
EXAMPLES = examples(
    "gpustack up                    # this machine, or ./gpustack.yaml's nodes",
    "gpustack up -c site.yaml --dry-run",
    "gpustack up --only cluster     # the Helm releases and dashboards again",
    "gpustack up --bundle /media/bundle   # air-gapped",
)


def version_flags(kubernetes_version: str | None) -> dict[str, object]:
    """Config overrides from `--kubernetes-version`."""
    flags: dict[str, object] = {}
    if kubernetes_version:
        flags["versions"] = {"kubernetes": kubernetes_version}
    return flags


def up(
    config: ConfigOpt = None,
    only: StagesOpt = None,
    from_: FromOpt = None,
    skip: StagesOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Ansible check mode: show what would change, change nothing")
    ] = False,
    yes: YesOpt = False,
    accept_new_host_keys: AcceptKeysOpt = False,
    ignore_preflight: Annotated[
        list[str] | None,
        typer.Option(metavar="ID,...", help="preflight check ids/names to downgrade to warnings, or 'all'"),
    ] = None,
    kubernetes_version: Annotated[
        str | None,
        typer.Option(metavar="VERSION", help="Kubernetes minor or patch (overrides versions.kubernetes)"),
    ] = None,
    no_verify: Annotated[
        bool, typer.Option("--no-verify", help="do not run `gpustack verify` after the cluster stage")
    ] = False,
    full: Annotated[
        bool, typer.Option("--full", help="run every task on every host, even where a stage is recorded as converged")
    ] = False,
    bundle: Annotated[
        Path | None,
        typer.Option(
            "--bundle",
            metavar="DIR",
            help="install from this air-gapped bundle (gpustack bundle create): checked, then served to the nodes",
        ),
    ] = None,
    bundle_listen: Annotated[
        str | None,
        typer.Option(
            "--bundle-listen",
            metavar="ADDRESS[:PORT]",
            help="where to serve the bundle (default: this machine's address toward the nodes, port 8780)",
        ),
    ] = None,
    verbose: VerboseOpt = 0,
) -> None:
    """Build (or converge) the cluster (preflight, host layer, Kubernetes, network, Helm, GPU and monitoring
    stack), then prove it with `gpustack verify`."""
    from gpustack.commands.up import PLAN
    from gpustack.commands.up import up as run_up
    from gpustack.config import target

    console = console_for(verbose)
    stages = PLAN.select(only=split_csv(only, "--only"), from_=from_, skip=split_csv(skip, "--skip"))
    loaded = load_config(config, version_flags(kubernetes_version))
    cfg = loaded.config
    console.print(target.announcement(loaded), markup=False)
    changing = [s for s in stages if s.runner != "preflight"]
    if changing and not dry_run:
        confirm_or_refuse(console, target.confirm_question(loaded, [s.id for s in changing]), yes=yes)
    flags = run_flags(
        dry_run=dry_run, verbose=verbose, accept_new_host_keys=accept_new_host_keys, ignore_preflight=ignore_preflight
    )
    result = run_up(cfg, flags.run_options(stages, full=full), console, bundle=bundle, bundle_listen=bundle_listen)
    if result.kubeconfig:
        console.print(
            f"[ok]done.[/ok] kubeconfig: {literal(result.kubeconfig)}  (export KUBECONFIG={literal(result.kubeconfig)})"
        )
    if any(s.id == "cluster" for s in stages) and not dry_run:
        from gpustack.cluster.layer import access_lines  # the Kubernetes client: only when the cluster stage ran

        for line in access_lines(cfg):
            console.info(line)
        if not no_verify:
            verify_after(cfg, console, "the stack is up")
