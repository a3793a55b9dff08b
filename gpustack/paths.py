"""Where gpustack keeps its state, and where the shipped playbooks/values/dashboards are."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """playbooks/, values/, dashboards/: from the source tree, or from the installed wheel."""
    for candidate in (_PKG.parent / name, _PKG / "_data" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"gpustack resource directory {name!r} is missing from the installation")


def state_dir() -> Path:
    if os.environ.get("GPUSTACK_STATE_DIR"):
        return Path(os.environ["GPUSTACK_STATE_DIR"]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpustack"


def ensure_private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def new_run_dir(root: Path | None = None, *, now: datetime | None = None) -> Path:
    root = root or state_dir()
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%S.%fZ")
    return ensure_private_dir(root / "runs" / stamp)


def kubeconfig_path(cluster_name: str, root: Path | None = None) -> Path:
    return (root or state_dir()) / "clusters" / cluster_name / "admin.conf"
