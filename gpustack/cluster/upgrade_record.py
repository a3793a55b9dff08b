"""This machine's record of a cluster's Kubernetes upgrade, ``<state>/clusters/<name>/upgrade.json``:
written by ``gpustack upgrade`` (gpustack/commands/upgrade.py) before the first change and as each node
finishes, read by ``gpustack status``. The format is in docs/lifecycle.md."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack.paths import ensure_private_dir, kubeconfig_path, write_json

if TYPE_CHECKING:
    from gpustack.cluster.skew import ClusterVersions
    from gpustack.config.model import Config

#: version of the upgrade.json format
PROGRESS_FORMAT = 1


def progress_path(cfg: Config) -> Path:
    """This machine's record of the cluster's upgrade: ``<state>/clusters/<name>/upgrade.json``."""
    return kubeconfig_path(cfg.cluster.name).parent / "upgrade.json"


def _now(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_progress(
    cfg: Config,
    current: ClusterVersions,
    target: str,
    previous: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The record written before the first change (pure). A resumed upgrade (the previous record
    is for the same target and not done) keeps its start and its ``from``."""
    resumed = bool(previous and previous.get("to") == target and previous.get("status") != "done")
    nodes = {
        n.name: {
            "role": n.role,
            "version": current.nodes.get(n.name, ""),
            "status": "done" if current.nodes.get(n.name) == target else "pending",
        }
        for n in cfg.nodes
    }
    return {
        "format": PROGRESS_FORMAT,
        "cluster": cfg.cluster.name,
        "from": previous["from"] if resumed and previous else current.apiserver,
        "to": target,
        "status": "running",
        "started": previous["started"] if resumed and previous else _now(now),
        "updated": _now(now),
        "attempts": (int(previous.get("attempts", 1)) + 1) if resumed and previous else 1,
        "error": None,
        "nodes": nodes,
    }


def finish_progress(
    progress: Mapping[str, Any], *, status: str, error: str | None = None, now: datetime | None = None
) -> dict[str, Any]:
    """The record once the run ended (pure): ``done`` (every node at the target) or ``failed``."""
    out = dict(progress)
    out.update(status=status, error=error, updated=_now(now))
    if status == "done":
        out["nodes"] = {n: {**v, "status": "done", "version": progress["to"]} for n, v in progress["nodes"].items()}
    return out


def read_progress(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_progress(path: Path, data: Mapping[str, Any]) -> None:
    ensure_private_dir(path.parent)
    write_json(path, dict(data))
