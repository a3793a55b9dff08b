"""``gpustack etcd snapshot``: one verified etcd snapshot on a control plane, copied to this machine
(playbooks/etcd.yml, the stage in gpustack/cluster/etcd_snapshot.py), run by the one engine.

The same stage runs first in ``upgrade``, ``node remove`` and ``reset``; the systemd timer takes them on schedule
(``etcd.snapshots``). Restoring one: ``gpustack etcd restore`` (gpustack/commands/etcd_restore.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpustack.cluster import etcd_snapshot
from gpustack.console import literal
from gpustack.engine.options import RunFlags
from gpustack.engine.plan import CommandPlan
from gpustack.engine.steps import StageSummary
from gpustack.errors import ConfigError

if TYPE_CHECKING:
    from gpustack.config.model import Config
    from gpustack.console import Console

PLAN = CommandPlan(
    "etcd-snapshot",
    "gpustack etcd snapshot: a verified etcd snapshot on a control plane, copied to this machine",
    "etcd.yml",
    (etcd_snapshot.STAGE,),
    extravars=etcd_snapshot.EXTRAVARS,
    host_notes={"control-plane": "the first control-plane node of the config"},
)


@dataclass(frozen=True)
class SnapshotOptions(RunFlags):
    pass


@dataclass
class SnapshotResult:
    run_dir: Path
    summaries: list[StageSummary]
    path: Path | None


def snapshot(cfg: Config, opts: SnapshotOptions, console: Console) -> SnapshotResult:
    """Run the snapshot stage; name the file it left on this machine."""
    from gpustack.engine.run import run

    if not cfg.control_planes:
        raise ConfigError("the config has no control-plane node: there is no etcd to snapshot")
    before = set(etcd_snapshot.local_snapshots(cfg))
    run_opts = opts.run_options(PLAN.stages, extravars=etcd_snapshot.extravars(cfg))
    result = run(PLAN, cfg, run_opts, console)
    newest = etcd_snapshot.settle(cfg)
    path = newest if newest is not None and newest not in before else None
    if path is not None:
        console.print(f"[ok]etcd snapshot[/ok] {literal(str(path))} ({path.stat().st_size} bytes, verified)")
    elif not opts.dry_run:
        console.print("no new etcd snapshot arrived on this machine", markup=False)
    return SnapshotResult(result.run_dir, result.summaries, path)
