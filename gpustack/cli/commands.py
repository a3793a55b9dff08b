"""The commands: each parses flags, loads config, calls one engine function, prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpustack.cli.app import ConfigOpt, VerboseOpt, app, console_for, load_config, split_csv
from gpustack.config.model import Config
from gpustack.errors import UsageError

StagesOpt = Annotated[list[str] | None, typer.Option(help="stage id(s), comma-separated or repeated")]


def _flags(kubernetes_version: str | None) -> dict[str, object]:
    flags: dict[str, object] = {}
    if kubernetes_version:
        flags["versions"] = {"kubernetes": kubernetes_version}
    return flags


@app.command()
def up(
    config: ConfigOpt = None,
    only: StagesOpt = None,
    from_: Annotated[str | None, typer.Option("--from", help="start at this stage")] = None,
    skip: StagesOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Ansible check mode: show what would change, change nothing")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    accept_new_host_keys: Annotated[
        bool, typer.Option(help="trust and record SSH host keys seen for the first time")
    ] = False,
    ignore_preflight: Annotated[
        list[str] | None, typer.Option(help="preflight check ids/names to downgrade to warnings, or 'all'")
    ] = None,
    kubernetes_version: Annotated[
        str | None, typer.Option(help="Kubernetes minor or patch (overrides versions.kubernetes)")
    ] = None,
    no_verify: Annotated[
        bool, typer.Option("--no-verify", help="do not run `gpustack verify` after the cluster stage")
    ] = False,
    full: Annotated[
        bool, typer.Option("--full", help="run every task on every host, even where a stage is recorded as converged")
    ] = False,
    verbose: VerboseOpt = 0,
) -> None:
    """Build (or converge) the cluster (preflight, host layer, Kubernetes, network, Helm, GPU and monitoring
    stack), then prove it with `gpustack verify`."""
    from gpustack import plan
    from gpustack.config import target
    from gpustack.up import UpOptions
    from gpustack.up import up as run_up

    console = console_for(verbose)
    stages = plan.select(only=split_csv(only), from_=from_, skip=split_csv(skip))
    loaded = load_config(config, _flags(kubernetes_version))
    cfg = loaded.config
    console.print(target.announcement(loaded), markup=False)
    changing = [s for s in stages if s.runner != "preflight"]
    if changing and not dry_run:
        question = target.confirm_question(loaded, [s.id for s in changing])
        if not yes:
            if not console.interactive:
                raise UsageError("no terminal to confirm on: pass --yes to run non-interactively (or --dry-run)")
            if not console.confirm(question, assume_yes=False):
                raise typer.Abort()
    result = run_up(
        cfg,
        UpOptions(
            stages=stages,
            dry_run=dry_run,
            verbosity=max(0, verbose - 1),
            assume_yes=yes,
            accept_new_host_keys=accept_new_host_keys,
            ignore_preflight=split_csv(ignore_preflight),
            full=full,
        ),
        console,
    )
    if result.kubeconfig:
        console.print(f"[ok]done.[/ok] kubeconfig: {result.kubeconfig}  (export KUBECONFIG={result.kubeconfig})")
    if any(s.id == "cluster" for s in stages) and not dry_run:
        for line in access_lines(cfg):
            console.print(line)
        if not no_verify:
            from gpustack.diagnose.engine import DiagnoseOptions, diagnose

            console.print("[stage]▶ verify[/stage]")
            code, _, _ = diagnose(cfg, DiagnoseOptions(command="verify"), console)
            if code:
                console.error(
                    "the stack is up, but verify found problems", "run `gpustack doctor` for causes and fixes"
                )
                raise typer.Exit(code)


def access_lines(cfg: Config) -> list[str]:
    """Where to reach the monitoring stack (NodePorts on the control plane's address)."""
    host, mon = cfg.control_plane.address, cfg.monitoring
    lines = []
    if mon.prometheus_nodeport:
        lines.append(f"Prometheus:   http://{host}:{mon.prometheus_nodeport}")
    else:
        lines.append("Prometheus:   kubectl -n monitoring port-forward svc/kube-prometheus-stack-prometheus 9090")
    if mon.grafana_nodeport:
        lines.append(
            f"Grafana:      http://{host}:{mon.grafana_nodeport}  (user {mon.grafana_admin_user}; "
            "password: gpustack grafana-password)"
        )
    else:
        lines.append("Grafana:      kubectl -n monitoring port-forward svc/kube-prometheus-stack-grafana 3000:80")
    if mon.alertmanager_nodeport:
        lines.append(f"Alertmanager: http://{host}:{mon.alertmanager_nodeport}")
    return lines


@app.command("grafana-password")
def grafana_password_cmd(config: ConfigOpt = None) -> None:
    """Print the Grafana admin password (kept 0600 in the state directory; never printed otherwise)."""
    from gpustack.cluster import password_path

    cfg = load_config(config).config
    path = password_path(cfg)
    if not path.is_file():
        raise UsageError(f"no Grafana password yet ({path}): run `gpustack up` first")
    console_for().print(path.read_text(encoding="utf-8").strip())


@app.command("plan")
def plan_cmd(
    config: ConfigOpt = None,
    only: StagesOpt = None,
    from_: Annotated[str | None, typer.Option("--from")] = None,
    skip: StagesOpt = None,
) -> None:
    """Print the ordered stages `up` would run and what each changes; touches nothing."""
    from gpustack import plan
    from gpustack.config import target

    console = console_for()
    stages = plan.select(only=split_csv(only), from_=from_, skip=split_csv(skip))
    loaded = load_config(config)
    cfg = loaded.config
    console.print(target.announcement(loaded), markup=False)
    cp = cfg.control_plane.name
    workers = ", ".join(n.name for n in cfg.workers) or "(none)"
    where = {"all": ", ".join(n.name for n in cfg.nodes), "control-plane": cp, "workers": workers}
    rows = [[str(i), s.id, where[s.hosts], s.changes] for i, s in enumerate(stages, 1)]
    console.table("gpustack up would run", ["#", "stage", "hosts", "changes"], rows)
    from gpustack.cli.version import print_versions

    print_versions(console, cfg)


@app.command()
def render(
    out: Annotated[Path, typer.Option("--out", "-o", help="directory to write into")],
    config: ConfigOpt = None,
    facts: Annotated[
        Path | None,
        typer.Option(help="a run's facts/ directory (preflight output): values then follow those hosts"),
    ] = None,
) -> None:
    """Write every generated file (inventory, extravars, kubeadm config, Helm values, manifests) to DIR."""
    from gpustack.render.files import load_facts, render_to

    cfg = load_config(config).config
    console = console_for()
    if facts is not None and not facts.is_dir():
        raise UsageError(f"--facts {facts}: not a directory (use <state>/runs/<run>/facts)")
    result = render_to(cfg, out, facts=load_facts(facts))
    for path, size in result.written:
        console.print(f"{path}  ({size:,} bytes)", markup=False)
    for path in result.removed:
        console.print(f"{path}  (removed: no longer generated)", markup=False)


@app.command()
def init(
    path: Annotated[Path, typer.Argument(help="where to write the example")] = Path("gpustack.yaml"),
    force: Annotated[bool, typer.Option(help="overwrite an existing file")] = False,
) -> None:
    """Write a commented example gpustack.yaml."""
    from gpustack.config.example import write_example

    write_example(path, force=force)
    console_for().print(f"wrote {path}: edit the nodes, then run `gpustack plan -c {path}`", markup=False)


LayerOpt = Annotated[list[str] | None, typer.Option("--layer", help="only these layers (comma-separated or repeated)")]
CheckOpt = Annotated[list[str] | None, typer.Option("--check", help="only these check ids (or id prefixes like K02)")]
IgnoreOpt = Annotated[list[str] | None, typer.Option("--ignore", help="check ids to leave out")]
OutputOpt = Annotated[str, typer.Option("--output", "-o", help="table, json or junit")]
SaveOpt = Annotated[Path | None, typer.Option("--save", help="also write the report to FILE (.xml: JUnit, else JSON)")]
ListOpt = Annotated[bool, typer.Option("--list", help="list the checks (id, layer, what they read) and exit")]
SnapInOpt = Annotated[
    Path | None, typer.Option("--from-snapshot", help="analyse a saved snapshot instead of the cluster")
]
SnapOutOpt = Annotated[Path | None, typer.Option("--save-snapshot", help="write what was collected to FILE (JSON)")]
KubeconfigOpt = Annotated[
    Path | None,
    typer.Option("--kubeconfig", help="the cluster to check (default: the admin.conf `gpustack up` wrote for it)"),
]


def _diagnose(command: str, config: Path | None, verbose: int, **kw: object) -> None:
    from gpustack.diagnose.engine import DiagnoseOptions, diagnose

    console = console_for(verbose)
    cfg = load_config(config).config
    opts = DiagnoseOptions(command=command, **kw)  # type: ignore[arg-type]
    code, _, _ = diagnose(cfg, opts, console)
    raise typer.Exit(code)


def _list_checks(command: str) -> None:
    from gpustack.diagnose import registry

    console = console_for()
    rows = [[s.id, s.layer, s.title, s.reads] for s in registry.select(command)]
    console.table(f"gpustack {command} checks", ["id", "layer", "checks", "reads"], rows)


@app.command()
def verify(
    config: ConfigOpt = None,
    layer: LayerOpt = None,
    check: CheckOpt = None,
    ignore: IgnoreOpt = None,
    output: OutputOpt = "table",
    save: SaveOpt = None,
    load: Annotated[
        bool, typer.Option("--load", help="also run dcgmproftester on one GPU and check the metrics move")
    ] = False,
    no_workload: Annotated[
        bool, typer.Option("--no-workload", help="start no test pod (pod-network probe, CUDA pod)")
    ] = False,
    list_: ListOpt = False,
    from_snapshot: SnapInOpt = None,
    save_snapshot: SnapOutOpt = None,
    kubeconfig: KubeconfigOpt = None,
    verbose: VerboseOpt = 0,
) -> None:
    """Prove every layer works end to end. Exit 0 all pass, 1 failures, 2 usage, 3 cluster unreachable."""
    if list_:
        return _list_checks("verify")
    _diagnose(
        "verify", config, verbose, layers=tuple(split_csv(layer)), checks=tuple(split_csv(check)),
        ignore=tuple(split_csv(ignore)), output=output, save=save, load=load, workload=not no_workload,
        snapshot_in=from_snapshot, snapshot_out=save_snapshot, kubeconfig=kubeconfig,
    )  # fmt: skip


@app.command()
def doctor(
    config: ConfigOpt = None,
    layer: LayerOpt = None,
    check: CheckOpt = None,
    ignore: IgnoreOpt = None,
    output: OutputOpt = "table",
    save: SaveOpt = None,
    list_: ListOpt = False,
    from_snapshot: SnapInOpt = None,
    save_snapshot: SnapOutOpt = None,
    fix: Annotated[
        bool, typer.Option("--fix", help="apply the safe fixes for the failures found (shown first), then check again")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="with --fix: apply without asking")] = False,
    bundle: Annotated[
        Path | None, typer.Option("--bundle", help="write a support bundle (.tar.gz, secrets redacted) to FILE")
    ] = None,
    kubeconfig: KubeconfigOpt = None,
    verbose: VerboseOpt = 0,
) -> None:
    """Find known failures and say exactly how to fix them. Exit codes as for verify.

    --fix applies only the safe fixes (single-node control-plane taint, host firewall rules, CoreDNS
    restart, ServiceMonitor release label, node-exporter port) after showing them; without a terminal
    it needs --yes. Everything else prints its fix."""
    if list_:
        return _list_checks("doctor")
    if yes and not fix:
        raise UsageError("--yes only applies to --fix")
    _diagnose(
        "doctor", config, verbose, layers=tuple(split_csv(layer)), checks=tuple(split_csv(check)),
        ignore=tuple(split_csv(ignore)), output=output, save=save, workload=False,
        snapshot_in=from_snapshot, snapshot_out=save_snapshot, fix=fix, assume_yes=yes, bundle=bundle,
        kubeconfig=kubeconfig,
    )  # fmt: skip
