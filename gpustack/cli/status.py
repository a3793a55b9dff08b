"""``gpustack status``: nodes and kubelet versions, Helm releases against the pins, the last run,
an upgrade in progress. Read-only; the logic is gpustack/cluster/status.py."""

from __future__ import annotations

from typing import Annotated

import typer

from gpustack.cli.options import ConfigOpt, ContextOpt, DetailOpt, KubeconfigOpt, console_for, examples, load_config
from gpustack.errors import ClusterUnreachableError, UsageError

#: the examples at the end of its help page
EXAMPLES = examples(
    "gpustack status",
    "gpustack status -o json --kubeconfig ~/.kube/other",
)


def status(
    config: ConfigOpt = None,
    output: Annotated[str, typer.Option("--output", "-o", metavar="FORMAT", help="table or json")] = "table",
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    verbose: DetailOpt = 0,
) -> None:
    """Show the cluster: nodes (kubelet versions against the control plane), Helm releases against
    gpustack's pins, the last run and its result, an upgrade in progress. Read-only. Exit 0, or 3
    when the cluster is unreachable (what this machine knows is still shown)."""
    from gpustack.cluster.status import exit_code, gather, print_status, status_json
    from gpustack.runners.kubeconfig import QUICK_TIMEOUT, cluster_client

    if output not in ("table", "json"):
        raise UsageError(f"--output {output}: use table or json")
    console = console_for(verbose)
    cfg = load_config(config).config
    try:
        kube = cluster_client(cfg.cluster.name, kubeconfig, context=context, request_timeout=QUICK_TIMEOUT)
        error = None
    except ClusterUnreachableError as exc:
        kube, error = None, exc.message
    found = gather(cfg, kube, error)
    if output == "json":
        console.out.print(status_json(found), markup=False, end="")
    else:
        print_status(found, console)
    raise typer.Exit(exit_code(found))
