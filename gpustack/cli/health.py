"""``gpustack health [--apply]`` and ``gpustack health release NODE``: GPU fault quarantine (the logic is
gpustack.health)."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from gpustack.cli.options import (
    ConfigOpt,
    ContextOpt,
    DetailOpt,
    KubeconfigOpt,
    OutputOpt,
    SaveOpt,
    YesOpt,
    console_for,
    examples,
    split_csv,
)
from gpustack.console import literal

OUTPUTS = ("table", "json", "junit")
#: remediation field -> the flag that overrides it
FLAG_OF = {"max_nodes_per_window": "--max-nodes", "max_percent_per_window": "--max-percent", "window": "--window",
           "xid_lookback": "--xid-lookback", "rows_growth_window": "--rows-growth-window",
           "allocatable_hold": "--allocatable-hold"}  # fmt: skip

# its help is the callback's docstring (exit codes, signals, breaker), as `health --help` shows
health_app = typer.Typer(
    invoke_without_command=True,
    no_args_is_help=False,
    epilog=examples(
        "gpustack health                # what the policy would do now (dry run)",
        "gpustack health --apply",
        "gpustack health policy",
        "gpustack health release gpu-worker-1",
    ),
)

InClusterOpt = Annotated[bool, typer.Option("--in-cluster", help="use the pod's ServiceAccount (gpustack's CronJob)")]
MaxNodesOpt = Annotated[
    int | None,
    typer.Option(
        "--max-nodes",
        min=0,
        metavar="N",
        help="circuit breaker: new quarantines per window (remediation.max_nodes_per_window)",
    ),
]
MaxPercentOpt = Annotated[
    float | None,
    typer.Option(
        "--max-percent",
        min=0.01,
        max=100,
        metavar="PERCENT",
        help="circuit breaker: % of the GPU nodes per window, rounded up",
    ),
]
WindowOpt = Annotated[
    str | None,
    typer.Option("--window", metavar="DURATION", help="circuit breaker window (remediation.window, default 1h)"),
]
LookbackOpt = Annotated[
    str | None, typer.Option("--xid-lookback", metavar="DURATION", help="how long a fatal XID counts (default 15m)")
]
GrowthOpt = Annotated[
    str | None,
    typer.Option(
        "--rows-growth-window", metavar="DURATION", help="window of the remapped-rows growth rule (default 1h)"
    ),
]
HoldOpt = Annotated[
    str | None,
    typer.Option(
        "--allocatable-hold", metavar="DURATION", help="allocatable below capacity for this long (default 10m)"
    ),
]


def _settings(config: Any, in_cluster: bool, flags: dict[str, Any]) -> tuple[Any, str]:
    """The policy settings (config ``remediation:`` < flags) and the cluster name."""
    from pydantic import ValidationError

    from gpustack.cli.options import load_config
    from gpustack.config.monitoring import Remediation, window_seconds
    from gpustack.errors import UsageError
    from gpustack.health.policy import Settings

    if in_cluster:  # the CronJob has no gpustack.yaml: everything comes as flags
        rem, name = Remediation(), "in-cluster"
    else:
        cfg = load_config(config).config
        rem, name = cfg.remediation, cfg.cluster.name
    given = {k: v for k, v in flags.items() if v is not None}
    try:
        merged = Remediation.model_validate({**rem.model_dump(), "enabled": False, **given})
    except ValidationError as exc:
        problems = [f"{FLAG_OF.get(str(e['loc'][0]), str(e['loc'][0]))}: {e['msg'].removeprefix('Value error, ')}"
                    for e in exc.errors() if e.get("loc")]  # fmt: skip
        raise UsageError("; ".join(problems) or str(exc)) from None
    settings = Settings(
        max_nodes=merged.max_nodes_per_window,
        max_percent=merged.max_percent_per_window,
        window=window_seconds(merged.window),
        lookback=window_seconds(merged.xid_lookback),
        growth_window=window_seconds(merged.rows_growth_window),
        hold=window_seconds(merged.allocatable_hold),
    )
    return settings, name


def _by(in_cluster: bool, command: str) -> str:
    """Who changes the node, for its annotations: the CronJob's pod, or the command and user@host."""
    from gpustack.diag.runner import who

    if in_cluster:
        return f"gpustack health CronJob (pod {os.environ.get('HOSTNAME', '?')})"
    return f"{command} ({who()})"


@health_app.callback()
def health(
    ctx: typer.Context,
    apply: Annotated[
        bool, typer.Option("--apply", help="cordon and taint the nodes with a fatal GPU signal (default: dry run)")
    ] = False,
    node: Annotated[
        list[str] | None,
        typer.Option("--node", "-n", metavar="NODE,...", help="only these GPU nodes (comma-separated or repeated)"),
    ] = None,
    output: OutputOpt = "table",
    save: SaveOpt = None,
    max_nodes: MaxNodesOpt = None,
    max_percent: MaxPercentOpt = None,
    window: WindowOpt = None,
    xid_lookback: LookbackOpt = None,
    rows_growth_window: GrowthOpt = None,
    allocatable_hold: HoldOpt = None,
    in_cluster: InClusterOpt = False,
    config: ConfigOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    verbose: DetailOpt = 0,
) -> None:
    """GPU fault quarantine: evaluate the XID policy (dry run), --apply to quarantine, release NODE, show the policy.

    Evaluates every GPU node; --apply quarantines (cordon + taint gpustack.io/gpu-health=fatal:NoSchedule,
    labels gpustack.io/quarantined and quarantine-action). Dry run by default: what each node needs (nothing,
    an alert, or a quarantine until GPU reset, until reboot, or for RMA) and what it would do.

    Signals (Prometheus, from dcgm-exporter): XIDs by NVIDIA's catalogue (`gpustack health policy`: each
    XID's action and why), the driver's recovery action, row-remap failure or pending, allocatable GPUs below
    capacity (docs/operations.md).

    Circuit breaker: at most --max-nodes (and --max-percent of the GPU nodes) new quarantines per --window,
    counted in the ledger ConfigMap gpustack-system/gpustack-health-breaker on the API server's clock; an
    unreadable ledger or a clock that disagrees holds every new quarantine.

    Exit codes: 0 nothing left to do; 1 a node needs a quarantine (dry run), was held by the breaker or could
    not be patched, or a signal source is missing; 2 usage; 3 the cluster or Prometheus unreachable.

    Subcommands: `policy` prints the policy; `release NODE` lifts a quarantine once its action is done."""
    if ctx.invoked_subcommand is not None:
        return
    from gpustack.diagnose import report
    from gpustack.diagnose.fixes import fix_console
    from gpustack.errors import UsageError
    from gpustack.health.runner import HealthOptions, run_health
    from gpustack.runners.kubeconfig import cluster_client

    if output not in OUTPUTS:
        raise UsageError(f"--output {output}: choose one of {', '.join(OUTPUTS)}")
    if in_cluster and (kubeconfig is not None or context is not None):
        raise UsageError("--in-cluster and --kubeconfig/--context exclude each other")
    flags = {"max_nodes_per_window": max_nodes, "max_percent_per_window": max_percent, "window": window,
             "xid_lookback": xid_lookback, "rows_growth_window": rows_growth_window, "allocatable_hold": allocatable_hold}  # fmt: skip
    settings, name = _settings(config, in_cluster, flags)
    console = console_for(verbose)
    kube = cluster_client(name, kubeconfig, context=context, in_cluster=in_cluster)
    opts = HealthOptions(
        settings=settings, apply=apply, nodes=tuple(split_csv(node)), by=_by(in_cluster, "gpustack health --apply")
    )
    findings = run_health(kube, opts, fix_console(console, output))
    command = "health --apply" if apply else "health (dry run)"
    report.show(command, findings, console, output, target=kube.target)
    if save is not None:
        report.save(save, command, findings, target=kube.target)
    raise typer.Exit(report.exit_code(findings))


@health_app.command(
    "policy",
    short_help="Each XID's action (alert, reset, reboot, RMA) and why",
    epilog=examples("gpustack health policy", "gpustack health policy -o json"),
)
def policy(
    output: Annotated[str, typer.Option("--output", "-o", metavar="FORMAT", help="table or json")] = "table",
) -> None:
    """Print the XID policy: each XID's action (alert, reset, reboot, rma), the catalogue bucket and why.

    The data is gpustack/templates/health/xid-policy.yaml (versioned, with its upstream sources); `-o json` lists every
    XID with its mnemonic, the catalogue's and the legacy CSV's action."""
    import json

    from gpustack.errors import UsageError
    from gpustack.health.xids import grouped, xid_policy

    if output not in ("table", "json"):
        raise UsageError(f"--output {output}: use table or json")
    pol = xid_policy()
    if output == "json":
        typer.echo(json.dumps(pol.to_json(), indent=2))
        return
    console = console_for()
    console.table(f"gpustack XID policy, version {pol.version}: actions", ["action", "the node needs", "how", "release needs"],
                  [[literal(f"{a.id}: {a.title}"), literal(a.needs), literal(a.how), literal(a.release or "-")] for a in sorted(pol.actions.values(), key=lambda a: a.rank)])  # fmt: skip
    console.table("XIDs (NVIDIA's catalogue; -o json for every XID)", ["XID", "action", "catalogue", "why"],
                  [[literal(c) for c in row] for row in grouped(pol)])  # fmt: skip
    console.table("other signals", ["rule", "source", "action", "why"],
                  [[literal(c) for c in (s.id, s.source, s.action, s.reason)] for s in pol.signals])  # fmt: skip
    sources = "; ".join(f"{k}: {v.get('repo')} {v.get('path')} @ {v.get('commit')}" for k, v in pol.sources.items())
    console.info(f"sources: {sources}")


@health_app.command(
    "release",
    short_help="Lift gpustack's quarantine of a node",
    epilog=examples(
        "gpustack diag -r 2 -n gpu-worker-1   # first, for a reset", "gpustack health release gpu-worker-1"
    ),
)
def release(
    node: Annotated[str, typer.Argument(metavar="NODE", help="the quarantined node")],
    yes: YesOpt = False,
    config: ConfigOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    verbose: DetailOpt = 0,
) -> None:
    """Release a node gpustack quarantined, once what its action demands is done: a passing `gpustack diag
    --node NODE --level 2` since the quarantine, and for `reboot`/`rma` a reboot since (a new boot ID).

    Removes gpustack's taint, labels and annotations and uncordons the node only if gpustack cordoned it."""
    from gpustack.health.runner import HealthOptions, release_node
    from gpustack.runners.kubeconfig import cluster_client

    settings, name = _settings(config, False, {})
    console = console_for(verbose)
    kube = cluster_client(name, kubeconfig, context=context)
    opts = HealthOptions(settings=settings, by=_by(False, "gpustack health release"))
    release_node(kube, node, opts, console, confirm=lambda q: console.confirm(q, assume_yes=yes))
