"""The etcd snapshot stage: one verified ``etcdctl snapshot save`` on a control plane, kept there and copied to
this machine. ``gpustack etcd snapshot`` runs it alone; ``upgrade``, ``node remove`` and ``reset`` run it before
anything changes (docs/lifecycle.md, "Day 365").

On the control plane (playbooks/roles/etcd_snapshot, module ``gpustack_etcd_snapshot``,
playbooks/module_utils/gpustack_etcd.py): the etcd static pod's own etcdctl (``crictl exec``), kubeadm's
healthcheck-client certificate, the sha256 etcd appends checked, ``/var/lib/gpustack/etcd-snapshots/`` keeps the
newest ``etcd.snapshots.keep``. On this machine: ``<state>/clusters/<cluster>/etcd-snapshots/`` (0700, files
0600), the newest ``etcd.snapshots.local_keep`` kept (:func:`settle`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack.engine.plan import Stage
from gpustack.paths import ensure_private_dir, kubeconfig_path

if TYPE_CHECKING:
    from gpustack.config.model import Config

STAGE_ID = "etcd-snapshot"
HOST_DIR = "/var/lib/gpustack/etcd-snapshots"

STAGE = Stage(
    STAGE_ID,
    "etcd snapshot",
    "ansible",
    "control-plane",
    "on one control plane (the first of the config that stays): etcdctl snapshot save with kubeadm's etcd client "
    f"certificate, through the etcd static pod's own etcdctl; its integrity hash checked; kept in {HOST_DIR} "
    "(0600, the newest etcd.snapshots.keep) and copied to <state>/clusters/<cluster>/etcd-snapshots on this "
    "machine (0600, the newest etcd.snapshots.local_keep)",
)

#: the stage's playbook variables (each command's PLAN.extravars lists them)
EXTRAVARS = ("gpustack_etcd_snapshot_host", "gpustack_etcd_snapshot_local_dir")


def local_dir(cfg: Config) -> Path:
    """``<state>/clusters/<cluster>/etcd-snapshots``: this machine's copies."""
    return kubeconfig_path(cfg.cluster.name).parent / "etcd-snapshots"


def snapshot_host(cfg: Config, leaving: Sequence[str] = ()) -> str:
    """The control plane that takes the snapshot: the first of the config not in ``leaving`` (pure), else the
    first (a whole-cluster reset takes it before any node goes)."""
    cps = [n.name for n in cfg.control_planes]
    staying = [n for n in cps if n not in leaving]
    return (staying or cps or [""])[0]


def extravars(cfg: Config, leaving: Sequence[str] = ()) -> dict[str, Any]:
    """The stage's variables; this machine's directory made 0700 first (fetch writes into it)."""
    dest = ensure_private_dir(local_dir(cfg))
    return {"gpustack_etcd_snapshot_host": snapshot_host(cfg, leaving), "gpustack_etcd_snapshot_local_dir": str(dest)}


def local_snapshots(cfg: Config) -> list[Path]:
    """This machine's snapshots of the cluster, oldest first (by modification time, then name)."""
    d = local_dir(cfg)
    if not d.is_dir():
        return []
    files = [p for p in d.iterdir() if p.is_file() and p.name.startswith("etcd-") and p.name.endswith(".db")]
    return sorted(files, key=lambda p: (p.stat().st_mtime, p.name))


def settle(cfg: Config, keep: int | None = None) -> Path | None:
    """Each local snapshot 0600, all but the newest ``keep`` (etcd.snapshots.local_keep) removed; the newest."""
    keep = cfg.etcd.snapshots.local_keep if keep is None else keep
    files = local_snapshots(cfg)
    for p in files:
        os.chmod(p, 0o600)
    for p in files[: max(0, len(files) - keep)]:
        p.unlink()
    return files[-1] if files else None


def latest(cfg: Config) -> Path | None:
    files = local_snapshots(cfg)
    return files[-1] if files else None
