"""verify / doctor: collect -> checks -> report -> exit code."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.console import Console, literal
from gpustack.diagnose import registry, report
from gpustack.diagnose.collect import CollectContext, collect
from gpustack.diagnose.snapshot import Snapshot
from gpustack.errors import UsageError
from gpustack.paths import PRIVATE, check_input_file, check_output_path, write_output
from gpustack.runners.kubeconfig import ENV, HOME, KubeconfigNotFound, KubeTarget, resolve_kubeconfig

if TYPE_CHECKING:
    from gpustack.diagnose.fixes import StageRunner

OUTPUTS = ("table", "json", "junit")


#: seconds each of verify's and doctor's sources (the Kubernetes API, Prometheus, Grafana, ...) may take
SOURCE_TIMEOUT = 30.0
SOURCE_TIMEOUT_VAR = "GPUSTACK_SOURCE_TIMEOUT"


def source_timeout(environ: Mapping[str, str] | None = None) -> float:
    """$GPUSTACK_SOURCE_TIMEOUT (seconds, at least 5, at most 3600), default :data:`SOURCE_TIMEOUT`: a source still
    working then is reported as timed out (on a very large cluster Grafana's panel queries may need more); another
    value is a ConfigError (exit 2) naming the variable."""
    from gpustack.errors import ConfigError

    raw = (os.environ if environ is None else environ).get(SOURCE_TIMEOUT_VAR, "").strip()
    if not raw:
        return SOURCE_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 5 <= value <= 3600:
        raise ConfigError(f"environment variable {SOURCE_TIMEOUT_VAR}={raw!r}: must be seconds, at least 5 and at "
                          "most 3600", hint=f"unset it for the default ({SOURCE_TIMEOUT:g} s)")  # fmt: skip
    return value


@dataclass(frozen=True)
class DiagnoseOptions:
    command: str  # "verify" | "doctor"
    layers: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    output: str = "table"
    save: Path | None = None
    snapshot_in: Path | None = None  # analyse a saved snapshot instead of collecting
    snapshot_out: Path | None = None
    workload: bool = True
    load: bool = False
    timeout: float = field(default_factory=lambda: source_timeout())  # per source (GPUSTACK_SOURCE_TIMEOUT)
    extra: dict[str, object] = field(default_factory=dict)
    fix: bool = False  # doctor --fix: offer the safe fixes for the failures, apply, check again
    assume_yes: bool = False  # --yes: apply without asking
    bundle: Path | None = None  # doctor --bundle FILE: redacted support bundle
    kubeconfig: Path | None = None  # --kubeconfig FILE (else $KUBECONFIG, gpustack's admin.conf, ~/.kube/config)
    context: str | None = None  # --context NAME of the resolved kubeconfig (else its current-context)
    run_stage: StageRunner | None = None  # doctor --fix: re-runs a stage of `up` (the CLI passes up.run_stage)


def validate(opts: DiagnoseOptions) -> None:
    if opts.output not in OUTPUTS:
        raise UsageError(f"--output {opts.output}: choose one of {', '.join(OUTPUTS)}")
    bad = [layer for layer in opts.layers if layer not in registry.LAYERS]
    if bad:
        raise UsageError(f"--layer {', '.join(bad)}: layers are {', '.join(registry.LAYERS)}")
    known = set(registry.load_all())
    prefixes = {k.split("-", 1)[0] for k in known}
    unknown = [c for c in (*opts.checks, *opts.ignore) if c not in known and c not in prefixes]
    if unknown:
        raise UsageError(f"unknown check id(s): {', '.join(unknown)} (see `gpustack {opts.command} --list`)")
    if opts.kubeconfig is not None:
        check_input_file(opts.kubeconfig, "--kubeconfig")
    if opts.snapshot_in is not None:
        check_input_file(opts.snapshot_in, "--from-snapshot")
    for path, flag in ((opts.save, "--save"), (opts.snapshot_out, "--save-snapshot")):
        if path is not None:
            check_output_path(path, flag)
    if opts.fix and opts.snapshot_in is not None:
        raise UsageError("--fix needs the live cluster: it cannot be combined with --from-snapshot")


def target_for(cfg: Config, opts: DiagnoseOptions) -> tuple[KubeTarget | None, str]:
    """The cluster to check (:func:`~gpustack.runners.kubeconfig.resolve_kubeconfig`), or None and why not.
    A bad ``--kubeconfig``/``--context`` is a usage error (exit 2); no kubeconfig anywhere is data (K00)."""
    if opts.snapshot_in is not None:
        return None, ""
    try:
        return resolve_kubeconfig(kubeconfig=opts.kubeconfig, context=opts.context, cluster_name=cfg.cluster.name), ""
    except KubeconfigNotFound as exc:
        return None, exc.message + (f" ({exc.hint})" if exc.hint else "")


def refuse_unattended_fix(opts: DiagnoseOptions, target: KubeTarget | None) -> None:
    """``doctor --fix --yes`` changes a cluster without asking: only one the user named (``--kubeconfig``,
    ``--context``) or gpustack's own, never one a stray ``$KUBECONFIG`` or ``~/.kube/config`` points at."""
    if not (opts.fix and opts.assume_yes) or target is None or target.own or opts.context is not None:
        return
    if target.source in (ENV, HOME):
        raise UsageError(
            f"doctor --fix --yes would change {target.describe()} without asking",
            hint=f"name the cluster: add --context {target.context} (or --kubeconfig FILE), or drop --yes to be asked",
        )


def gather(
    cfg: Config,
    opts: DiagnoseOptions,
    layers: tuple[str, ...] = (),
    target: tuple[KubeTarget | None, str] | None = None,
) -> Snapshot:
    """Collect what the selected checks read: only the sources serving their ``layers``."""
    if opts.snapshot_in is not None:
        try:
            return Snapshot.from_json(json.loads(opts.snapshot_in.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else f"not a gpustack snapshot ({exc})"
            raise UsageError(f"--from-snapshot {opts.snapshot_in}: cannot load: {why}") from None
    resolved, why = target if target is not None else target_for(cfg, opts)
    ctx = CollectContext(
        cfg=cfg, command=opts.command, kubeconfig=None, timeout=opts.timeout, workload=opts.workload,
        load=opts.load, layers=layers or opts.layers, extra=dict(opts.extra), target=resolved, no_cluster=why,
    )  # fmt: skip
    snap = collect(ctx)
    if resolved is not None:
        snap.target = resolved.to_json()
    return snap


def cluster_unreachable(snap: Snapshot) -> bool:
    return "kubernetes" in snap.errors and not snap.kube


def diagnose(cfg: Config, opts: DiagnoseOptions, console: Console) -> tuple[int, list[Finding], Snapshot]:
    validate(opts)
    specs = registry.select(opts.command, layers=opts.layers, checks=opts.checks, ignore=opts.ignore)
    if not specs:
        raise UsageError(f"no {opts.command} check matches the selection (`gpustack {opts.command} --list`)")
    target = target_for(cfg, opts)
    refuse_unattended_fix(opts, target[0])
    # `--check H04` needs the hosts, not the cluster: collect for the selected checks' layers only
    snap = gather(cfg, opts, tuple(sorted({s.layer for s in specs})), target)
    if opts.snapshot_out is not None:
        # private: a snapshot holds the cluster's objects, addresses and host facts
        write_output(
            opts.snapshot_out,
            json.dumps(snap.to_json(), indent=1, default=str) + "\n",
            flag="--save-snapshot",
            mode=PRIVATE,
        )
    findings = registry.run(specs, snap)
    unreachable = cluster_unreachable(snap)
    if unreachable:  # one cause, said once: what is read through the API server was not checked
        findings = report.attribute_to_api(findings)
    code = report.exit_code(findings, cluster_unreachable=unreachable)
    # with --fix and json/junit output, stdout carries one report: the one after the fixes (if any ran)
    deferred = opts.fix and opts.output != "table"
    if not deferred:
        _print_report(opts, findings, console, snap, unreachable)
    if opts.bundle is not None:
        from gpustack.diagnose.bundle import last_run, write_bundle
        from gpustack.paths import state_dir

        written = write_bundle(
            opts.bundle, snap, findings, opts.command, config=cfg.model_dump(mode="json"),
            up_run=last_run(state_dir() / "runs", cfg.cluster.name),
        )  # fmt: skip
        (console.err if opts.output != "table" else console.out).print(f"support bundle (redacted): {literal(written)}")
    if opts.fix:
        from gpustack.diagnose import fixes

        fix_con = fixes.fix_console(console, opts.output)
        extra = dict(opts.extra)
        if target[0] is not None:  # fixes talk to the cluster that was checked
            extra.setdefault("target", target[0])
        outcome = fixes.offer_and_apply(
            cfg, snap, findings, fix_con, assume_yes=opts.assume_yes, extra=extra, run_stage=opts.run_stage
        )
        if outcome.ran:
            fix_con.print("[stage]▶ checking again after the fixes[/stage]")
            code, findings, snap = diagnose(cfg, replace(opts, fix=False, bundle=None, snapshot_out=None), console)
            fixes.report_after(outcome, findings, fix_con)
            return (1 if outcome.failed and code == 0 else code), findings, snap
        if deferred:
            _print_report(opts, findings, console, snap, unreachable)
    if opts.save is not None:
        report.save(opts.save, opts.command, findings, target=snap.target)
    return code, findings, snap


def _print_report(
    opts: DiagnoseOptions, findings: list[Finding], console: Console, snap: Snapshot, unreachable: bool
) -> None:
    report.show(opts.command, findings, console, opts.output, target=snap.target, cluster_unreachable=unreachable)
