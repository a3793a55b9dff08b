"""``gpustack certs renew``: options, what will happen, the question; gpustack/commands/certs_renew.py runs it."""

from __future__ import annotations

import typer

from gpustack.cli.options import (
    AcceptKeysOpt,
    ConfigOpt,
    ContextOpt,
    DetailOpt,
    DryRunOpt,
    IgnorePreflightOpt,
    KubeconfigOpt,
    VerboseOpt,
    YesOpt,
    confirm_or_refuse,
    console_for,
    examples,
    load_config,
    run_flags,
)
from gpustack.console import literal

certs_app = typer.Typer(
    help="The cluster's kubeadm certificates and the kubelets' serving certificates.", no_args_is_help=True
)


@certs_app.command(
    "renew",
    short_help="Renew every control plane's certificates, one at a time",
    epilog=examples("gpustack plan certs-renew        # what it does, first", "gpustack certs renew --yes"),
)
def renew(
    config: ConfigOpt = None,
    dry_run: DryRunOpt = False,
    ignore_preflight: IgnorePreflightOpt = None,
    yes: YesOpt = False,
    accept_new_host_keys: AcceptKeysOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Renew the kubeadm certificates and kubeconfigs of every control plane, one at a time (kubeadm certs renew
    all with certificates.validity; the control-plane pods and kube-vip restarted; the API server serving the new
    certificate), then fetch the admin kubeconfig again. Refused (exit 2, nothing changed) when a control plane is
    unreachable; re-run after an interruption to continue."""
    from gpustack.commands.certs_renew import RenewOptions
    from gpustack.commands.certs_renew import renew as run_renew

    console = console_for(verbose)
    cfg = load_config(config).config
    flags = run_flags(
        dry_run=dry_run, verbose=verbose, accept_new_host_keys=accept_new_host_keys, ignore_preflight=ignore_preflight
    )
    names = [n.name for n in cfg.control_planes]
    console.print(
        f"[stage]certs renew[/stage] cluster {literal(cfg.cluster.name)}{' (dry run)' if dry_run else ''}: "
        f"{literal(', '.join(names))}, one at a time (validity {literal(cfg.certificates.validity)})",
    )
    if len(names) == 1:
        console.print(
            "  the only API server restarts: the Kubernetes API is unavailable for a minute or so", markup=False
        )
    if not dry_run:
        confirm_or_refuse(console, f"Renew the certificates of {len(names)} control plane(s)?", yes=yes, verb="renew")
    run_renew(cfg, RenewOptions.from_flags(flags), console)
    if not dry_run:
        console.print(
            f"[ok]certificates renewed[/ok] on {literal(', '.join(names))}; this machine's admin kubeconfig fetched again"
        )


@certs_app.command(
    "approve",
    short_help="Approve the kubelets' pending serving-certificate requests that are the nodes' own",
    epilog=examples("gpustack certs approve", "gpustack doctor --check K12-kubelet-serving-csr   # what stays pending"),
)
def approve(
    config: ConfigOpt = None, kubeconfig: KubeconfigOpt = None, context: ContextOpt = None, verbose: DetailOpt = 0
) -> None:
    """Approve every pending kubernetes.io/kubelet-serving CSR whose requester is the node system:node:NAME of
    gpustack.yaml, whose subject is that node's and whose names and addresses are only its own (its Node object's,
    and its address in gpustack.yaml); leave any other pending and name why (exit 1). The kubelets ask again at
    70-90% of their certificate's life: `up` and `node add` approve too; run this on a schedule in between."""
    from gpustack.cluster.kubelet_csr import approve_pending, describe
    from gpustack.errors import StageError
    from gpustack.runners.kubeconfig import cluster_client

    console = console_for(verbose)
    cfg = load_config(config).config
    result = approve_pending(cluster_client(cfg.cluster.name, kubeconfig, context=context), cfg)
    for line in describe(result):
        console.print(f"  - {line}", markup=False)
    console.print(f"[ok]{len(result.approved)} kubelet serving certificate request(s) approved[/ok]")
    if result.refused:
        raise StageError(
            f"{len(result.refused)} kubelet serving certificate request(s) left pending: "
            + "; ".join(f"{v.csr} ({v.node}): {v.reason}" for v in result.refused),
            stage="certs-approve",
            hint="a request for another node's name or address is refused by design: check the node's addresses "
            "(kubectl get node NAME -o wide) against gpustack.yaml",
        )
