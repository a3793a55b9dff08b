"""verify / doctor: collect -> checks -> report -> exit code."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.diagnose import registry, report
from gpustack.diagnose.collect import CollectContext, collect
from gpustack.diagnose.snapshot import Snapshot
from gpustack.errors import UsageError
from gpustack.paths import kubeconfig_path

OUTPUTS = ("table", "json", "junit")


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
    timeout: float = 30.0
    extra: dict[str, object] = field(default_factory=dict)


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


def gather(cfg: Config, opts: DiagnoseOptions) -> Snapshot:
    if opts.snapshot_in is not None:
        try:
            return Snapshot.from_json(json.loads(opts.snapshot_in.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as exc:
            raise UsageError(f"--snapshot {opts.snapshot_in}: cannot load: {exc}") from None
    kc = kubeconfig_path(cfg.cluster.name)
    ctx = CollectContext(
        cfg=cfg, command=opts.command, kubeconfig=kc if kc.is_file() else None, timeout=opts.timeout,
        workload=opts.workload, load=opts.load, layers=opts.layers, extra=dict(opts.extra),
    )  # fmt: skip
    return collect(ctx)


def cluster_unreachable(snap: Snapshot) -> bool:
    return "kubernetes" in snap.errors and not snap.kube


def diagnose(cfg: Config, opts: DiagnoseOptions, console: Console) -> tuple[int, list[Finding], Snapshot]:
    validate(opts)
    if not registry.select(opts.command, layers=opts.layers, checks=opts.checks, ignore=opts.ignore):
        raise UsageError(f"no {opts.command} check matches the selection (`gpustack {opts.command} --list`)")
    snap = gather(cfg, opts)
    if opts.snapshot_out is not None:
        opts.snapshot_out.write_text(json.dumps(snap.to_json(), indent=1, default=str) + "\n", encoding="utf-8")
    specs = registry.select(opts.command, layers=opts.layers, checks=opts.checks, ignore=opts.ignore)
    findings = registry.run(specs, snap)
    code = report.exit_code(findings, cluster_unreachable=cluster_unreachable(snap))
    if opts.output == "table":
        report.print_table(opts.command, findings, console)
    else:
        console.out.print(report.render(opts.command, findings, opts.output), markup=False, end="")
    if opts.save is not None:
        fmt = "junit" if opts.save.suffix == ".xml" else "json"
        opts.save.write_text(report.render(opts.command, findings, fmt), encoding="utf-8")
    return code, findings, snap
