"""The ``etcd`` section as playbook variables (gpustack/config/etcd.py): the snapshot role and its timer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpustack.config.model import Config


def etcd_vars(cfg: Config) -> dict[str, Any]:
    s = cfg.etcd.snapshots
    return {
        "gpustack_etcd_snapshot_keep": s.keep,
        "gpustack_etcd_snapshot_copy_to": s.copy_to,
        "gpustack_etcd_snapshot_scheduled": s.scheduled,
        "gpustack_etcd_snapshot_interval_seconds": s.interval_seconds,
    }
