"""``gpustack node add|remove|patch``: options, what will happen, the question; gpustack/commands/node_add.py,
gpustack/commands/node_remove.py and gpustack/commands/node_patch.py run them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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
    split_csv,
    verify_after,
)
from gpustack.console import literal
from gpustack.errors import UsageError

node_app = typer.Typer(help="Add nodes to, remove them from, or patch them in a running cluster.", no_args_is_help=True)

NamesArg = Annotated[
    list[str], typer.Argument(metavar="NODE", help="node name(s) from gpustack.yaml", show_default=False)
]


@node_app.command(
    "add",
    short_help="Join nodes added to gpustack.yaml to the cluster",
    epilog=examples("gpustack plan node-add w3        # what would change, first", "gpustack node add w3 w4"),
)
def add(
    names: NamesArg,
    config: ConfigOpt = None,
    dry_run: DryRunOpt = False,
    no_verify: Annotated[bool, typer.Option("--no-verify", help="do not run `gpustack verify` afterwards")] = False,
    no_approve: Annotated[
        bool,
        typer.Option(
            "--no-approve", help="leave the new kubelets' serving-certificate requests (gpustack certs approve)"
        ),
    ] = False,
    ignore_preflight: IgnorePreflightOpt = None,
    yes: YesOpt = False,
    accept_new_host_keys: AcceptKeysOpt = False,
    bundle: Annotated[
        Path | None,
        typer.Option(
            "--bundle",
            metavar="DIR",
            help="install the new nodes from this air-gapped bundle (as `gpustack up --bundle`)",
        ),
    ] = None,
    bundle_listen: Annotated[
        str | None,
        typer.Option(
            "--bundle-listen", metavar="ADDRESS[:PORT]", help="where to serve the bundle (default: port 8780)"
        ),
    ] = None,
    verbose: VerboseOpt = 0,
) -> None:
    """Join nodes listed in gpustack.yaml to the running cluster: up's host layer on them only, a fresh
    join token; the existing nodes change only their firewall's peer list. Then `gpustack verify`."""
    from gpustack.commands.node_add import AddOptions, add, describe, select_new

    console = console_for(verbose)
    cfg = load_config(config).config
    flags = run_flags(
        dry_run=dry_run, verbose=verbose, accept_new_host_keys=accept_new_host_keys, ignore_preflight=ignore_preflight
    )
    opts = AddOptions.from_flags(
        flags, nodes=tuple(split_csv(names)), bundle=bundle, bundle_listen=bundle_listen, approve=not no_approve
    )
    new = select_new(cfg, opts.nodes)
    console.print(f"[stage]node add[/stage] cluster {literal(cfg.cluster.name)}{' (dry run)' if dry_run else ''}:")
    for line in describe(cfg, new):
        console.print(f"  - {line}", markup=False)
    if not dry_run:
        confirm_or_refuse(console, f"Add {len(new)} node(s) to cluster {cfg.cluster.name}?", yes=yes)
    add(cfg, opts, console)
    if dry_run:
        return
    console.print(f"[ok]added[/ok] {literal(', '.join(n.name for n in new))}")
    if not no_verify:
        verify_after(cfg, console, "the nodes joined")


@node_app.command(
    "remove",
    short_help="Drain, reset and delete nodes (PDBs checked first)",
    epilog=examples(
        "gpustack node remove w3 --dry-run   # the drain preview", "gpustack node remove w3 --offline   # a dead host"
    ),
)
def remove(
    names: NamesArg,
    config: ConfigOpt = None,
    offline: Annotated[
        bool,
        typer.Option("--offline", help="the host is dead: drain and delete the node, do not contact the host"),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            show_default=False,
            help="how long the drain may take before it gives up and uncordons (default: 300 s)",
        ),
    ] = 300.0,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="check and show the drain preview (server-side dry run); change nothing")
    ] = False,
    yes: YesOpt = False,
    accept_new_host_keys: AcceptKeysOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Take nodes out of the cluster: PodDisruptionBudgets checked with a server-side dry run before
    anything is cordoned, then cordon, drain, reset the host (not with --offline), delete the node.
    Refuses the last control-plane node and removals that would break etcd quorum."""
    from gpustack.cluster import drain
    from gpustack.commands.node_remove import RemoveOptions, assess, describe, remove
    from gpustack.runners.kubeconfig import QUICK_TIMEOUT, cluster_client

    console = console_for(verbose)
    cfg = load_config(config).config
    if timeout <= 0:
        raise UsageError(f"--timeout {timeout}: must be more than 0 seconds")
    opts = RemoveOptions.from_flags(
        run_flags(verbose=verbose, accept_new_host_keys=accept_new_host_keys),
        nodes=tuple(split_csv(names)),
        offline=offline,
        timeout=timeout,
    )
    kube = cluster_client(
        cfg.cluster.name, own_only=True, request_timeout=QUICK_TIMEOUT
    )  # it changes the cluster in gpustack.yaml
    found = assess(cfg, kube, opts)
    console.print(f"[stage]node remove[/stage] cluster {literal(cfg.cluster.name)}{' (dry run)' if dry_run else ''}:")
    for line in describe(found, opts):
        console.print(f"  - {line}", markup=False)
    for line in found.warnings:
        console.warn(line)
    if found.blocked:
        rows = [[literal(c) for c in (p.node, q.ref, q.owner, why)] for p in found.previews for q, why in p.blocked]
        rows += [
            [literal(p.node), literal(q.ref), "(none)", "not managed by a controller"]
            for p in found.previews
            for q in p.pods.unmanaged
        ]
        console.table("Pods that block the drain (server-side dry run)", ["node", "pod", "owner", "why"], rows)
        raise drain.DrainError(
            f"the drain of {', '.join(p.node for p in found.previews if not p.ok)} would be blocked: nothing was changed "
            "(no node cordoned)",
            hint="relax the PodDisruptionBudget or scale the workload (or move the unmanaged pods), then run again",
        )
    if dry_run:
        return
    confirm_or_refuse(
        console, f"Remove {', '.join(n.name for n in found.targets)} from cluster {cfg.cluster.name}?", yes=yes
    )
    done = remove(cfg, opts, console, kube)
    console.print(
        f"[ok]removed[/ok] {literal(', '.join(done.removed))}: delete them from gpustack.yaml (nodes:), or "
        "`gpustack node add` brings them back"
    )


@node_app.command(
    "patch",
    short_help="OS updates and kernel, one node at a time: GPU jobs waited for, drain, reboot when asked",
    epilog=examples(
        "gpustack plan node-patch            # the stages",
        "gpustack node patch --all --dry-run  # which nodes have updates",
        "gpustack node patch w1 w2",
    ),
)
def patch(
    names: Annotated[
        list[str] | None, typer.Argument(metavar="NODE", help="node name(s) from gpustack.yaml", show_default=False)
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="every node of the config")] = False,
    config: ConfigOpt = None,
    evict_gpu_pods: Annotated[
        bool,
        typer.Option("--evict-gpu-pods", help="evict GPU Job pods still running after --gpu-job-timeout (work lost)"),
    ] = False,
    gpu_job_timeout: Annotated[
        float,
        typer.Option(
            "--gpu-job-timeout",
            metavar="SECONDS",
            show_default=False,
            help="how long to wait for a node's GPU jobs to finish (default: 3600 s)",
        ),
    ] = 3600.0,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            show_default=False,
            help="how long the drain of the other pods may take (default: 300 s)",
        ),
    ] = 300.0,
    ready_timeout: Annotated[
        float,
        typer.Option(
            "--ready-timeout",
            metavar="SECONDS",
            show_default=False,
            help="how long a node may take to come back with its GPUs (default: 1800 s)",
        ),
    ] = 1800.0,
    max_unavailable: Annotated[
        int,
        typer.Option(
            "--max-unavailable",
            metavar="N",
            show_default=False,
            help="workers patched (drained, rebooted) together; control planes always one at a time (default: 1)",
        ),
    ] = 1,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="show which nodes have updates, a reboot or headers due; change nothing")
    ] = False,
    yes: YesOpt = False,
    accept_new_host_keys: AcceptKeysOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Patch running nodes one at a time (workers --max-unavailable at a time): cordon, wait for the node's GPU jobs, drain (PodDisruptionBudgets
    respected), apt upgrade with gpustack's packages held, the new kernel's headers, reboot when a package asks,
    wait for the node and its GPUs, uncordon. Stops at the first node that does not come back; run again to
    continue. Nodes with nothing to do are left alone."""
    from gpustack.commands.node_patch import PatchOptions, describe, patch, select_nodes
    from gpustack.runners.kubeconfig import QUICK_TIMEOUT, cluster_client

    console = console_for(verbose)
    cfg = load_config(config).config
    for flag, value in (("--gpu-job-timeout", gpu_job_timeout), ("--timeout", timeout)):
        if value < 0:
            raise UsageError(f"{flag} {value}: must be 0 seconds or more")
    if ready_timeout <= 0:
        raise UsageError(f"--ready-timeout {ready_timeout}: must be more than 0 seconds")
    if max_unavailable < 1:
        raise UsageError(f"--max-unavailable {max_unavailable}: at least 1 node")
    opts = PatchOptions.from_flags(
        run_flags(dry_run=dry_run, verbose=verbose, accept_new_host_keys=accept_new_host_keys),
        nodes=tuple(split_csv(names or [])),
        all=every,
        evict_gpu_pods=evict_gpu_pods,
        gpu_job_timeout=gpu_job_timeout,
        drain_timeout=timeout,
        ready_timeout=ready_timeout,
        max_unavailable=max_unavailable,
    )
    nodes = select_nodes(cfg, opts.nodes, opts.all)
    console.print(f"[stage]node patch[/stage] cluster {literal(cfg.cluster.name)}{' (dry run)' if dry_run else ''}:")
    for line in describe(cfg, nodes, opts):
        console.print(f"  - {line}", markup=False)
    if not dry_run:
        confirm_or_refuse(console, f"Patch {', '.join(n.name for n in nodes)} of cluster {cfg.cluster.name}?", yes=yes)
    kube = cluster_client(cfg.cluster.name, own_only=True, request_timeout=QUICK_TIMEOUT)
    done = patch(cfg, opts, console, kube)
    if dry_run:
        return
    if done.patched:
        console.print(f"[ok]patched[/ok] {literal(', '.join(done.patched))}")
    if done.current:
        console.print(f"up to date, left alone: {literal(', '.join(done.current))}")
