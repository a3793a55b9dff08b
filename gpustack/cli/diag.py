"""``gpustack diag``: DCGM diagnostics on the GPU nodes, one Job per node (the logic is gpustack.diag)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpustack.cli.options import (
    ConfigOpt,
    ContextOpt,
    DetailOpt,
    KubeconfigOpt,
    OutputOpt,
    SaveOpt,
    console_for,
    examples,
    load_config,
    split_csv,
)

#: the examples at the end of its help page
EXAMPLES = examples(
    "gpustack diag                  # level 1 on every GPU node",
    "gpustack diag -r 2 -n gpu-worker-1",
)

OUTPUTS = ("table", "json", "junit")


def diag(
    node: Annotated[
        list[str] | None,
        typer.Option(
            "--node",
            "-n",
            metavar="NODE,...",
            help="only these nodes (comma-separated or repeated; default: every GPU node)",
        ),
    ] = None,
    level: Annotated[
        int | None,
        typer.Option(
            "--level",
            "-r",
            metavar="LEVEL",
            min=1,
            max=4,
            help="dcgmi diag level: 1 quick (seconds), 2 medium (~2 min), 3 long (~15-30 min), 4 extended (hours)",
        ),
    ] = None,
    health: Annotated[
        bool,
        typer.Option(
            "--health", help="run the quick background health check (dcgmi health -c, ~70 s) instead of the diagnostic"
        ),
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="level 3/4 even while GPU workloads run on the node")] = False,
    timeout: Annotated[
        int | None,
        typer.Option(
            "--timeout",
            min=10,
            metavar="SECONDS",
            help="dcgmi's timeout in seconds (default per level: 120, 600, 2700, 14400)",
        ),
    ] = None,
    output: OutputOpt = "table",
    save: SaveOpt = None,
    config: ConfigOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    verbose: DetailOpt = 0,
) -> None:
    """Run DCGM diagnostics on GPU nodes and report per test and per GPU. Exit 0 pass, 1 failures, 2 usage, 3 unreachable.

    Each node gets a Job that requests all of its allocatable GPUs (nothing else is scheduled on them
    meanwhile) and runs the pinned DCGM image's `dcgmi diag -r LEVEL -j`. Levels 3 and 4 are refused
    while GPU workloads run on a node unless --force. The Jobs are deleted afterwards, also on Ctrl-C;
    each node's verdict is recorded on it (gpustack.io/diag-result) for `gpustack health release`."""
    from gpustack.diag.job import DiagSpec
    from gpustack.diag.runner import DiagOptions, run_diag
    from gpustack.diagnose import report
    from gpustack.diagnose.fixes import fix_console
    from gpustack.errors import UsageError
    from gpustack.runners.kubeconfig import cluster_client

    if output not in OUTPUTS:
        raise UsageError(f"--output {output}: choose one of {', '.join(OUTPUTS)}")
    if health and level is not None:
        raise UsageError("--health runs dcgmi health -c: --level does not apply to it")
    if health and timeout is not None:
        raise UsageError("--timeout applies to dcgmi diag, not to --health")
    spec = DiagSpec(mode="health" if health else "diag", level=level or 1, timeout=timeout)
    console = console_for(verbose)
    cfg = load_config(config).config
    kube = cluster_client(cfg.cluster.name, kubeconfig, context=context)
    findings = run_diag(
        kube, DiagOptions(spec=spec, nodes=tuple(split_csv(node)), force=force), fix_console(console, output)
    )
    command = "diag --health" if health else f"diag --level {spec.level}"
    report.show(command, findings, console, output, target=kube.target)
    if save is not None:
        report.save(save, command, findings, target=kube.target)
    raise typer.Exit(report.exit_code(findings))
