"""``gpustack security apply``: options, what differs, the question; gpustack/commands/security_apply.py runs it."""

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

security_app = typer.Typer(help="The control plane's hardening settings (security:).", no_args_is_help=True)


@security_app.command(
    "apply",
    short_help="Bring changed security: settings to a running cluster; resumable",
    epilog=examples("gpustack security apply --dry-run   # what differs, per control plane",
                    "gpustack security apply --yes"),
)  # fmt: skip
def apply(
    config: ConfigOpt = None,
    dry_run: DryRunOpt = False,
    ignore_preflight: IgnorePreflightOpt = None,
    yes: YesOpt = False,
    accept_new_host_keys: AcceptKeysOpt = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Bring gpustack.yaml's security: settings to a running cluster: the control planes' flags that differ are
    listed, the hardening files written, the kubeadm ClusterConfiguration updated, then kubeadm regenerates the
    changed static pods one control plane at a time (each API server awaited); the kubelet settings go to kubeadm's
    kubelet-config ConfigMap and each node's kubelet is reconfigured and restarted, one node at a time, where it
    differs; turning encryption at rest on rewrites every Secret. Re-run after an interruption to finish (a node
    already as configured is skipped)."""
    from gpustack.cluster.kubelet_apply import configmap_drift
    from gpustack.cluster.security_apply import admin_kube, rows
    from gpustack.commands.security_apply import ApplyOptions, apply, read_drift, refuse_encryption_off

    console = console_for(verbose)
    cfg = load_config(config).config
    flags = run_flags(
        dry_run=dry_run, verbose=verbose, accept_new_host_keys=accept_new_host_keys, ignore_preflight=ignore_preflight
    )
    kube = admin_kube(cfg)
    found = read_drift(cfg, kube)
    refuse_encryption_off(found)
    kubelet = configmap_drift(cfg, kube)
    console.print(f"[stage]security apply[/stage] cluster {literal(cfg.cluster.name)}{' (dry run)' if dry_run else ''}")
    console.table("security: per control plane", ["node", "flags that differ", "static pods that restart"], rows(found))
    console.print(f"  kubelet settings that differ in kube-system/kubelet-config: {', '.join(kubelet) or 'none'} (each "
                  "node's kubelet is reconfigured and restarted, one node at a time, where its config.yaml differs)",
                  markup=False)  # fmt: skip
    changing = found.nodes
    if not dry_run and kubelet and not changing:
        confirm_or_refuse(console, f"Reconfigure and restart the kubelets ({', '.join(kubelet)}), one node at a time?",
                          yes=yes, verb="apply")  # fmt: skip
    if not dry_run and changing:
        if len(cfg.control_planes) == 1 and "kube-apiserver" in found.restarts(changing[0]):
            console.print("  the only API server restarts: the Kubernetes API is unavailable meanwhile", markup=False)
        also = f", then reconfigure the kubelets ({', '.join(kubelet)})" if kubelet else ""
        confirm_or_refuse(console, f"Regenerate the static pods of {len(changing)} control plane(s), one at a time{also}?",
                          yes=yes, verb="apply")  # fmt: skip
    apply(cfg, ApplyOptions.from_flags(flags), console)
