"""Where gpustack keeps its state, and where the files it ships are (the one way to find them)."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

_PKG = Path(__file__).resolve().parent


#: shipped beside the package in a checkout (and under gpustack/_data/ in a wheel)
BESIDE = ("playbooks", "values", "dashboards")
#: shipped inside the package
INSIDE = ("templates",)


def resource_dir(name: str) -> Path:
    """A shipped directory: playbooks/, values/, dashboards/ (from the source tree, or from the
    installed wheel's gpustack/_data/), or templates/ (inside the package)."""
    if name in INSIDE:
        return _PKG / name
    if name not in BESIDE:
        raise ValueError(f"{name!r} is not a directory gpustack ships ({', '.join(BESIDE + INSIDE)})")
    for candidate in (_PKG.parent / name, _PKG / "_data" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"gpustack resource directory {name!r} is missing from the installation")


def resource_file(name: str, *parts: str) -> Path:
    """A file under a shipped directory: ``resource_file("templates", "monitoring", "x.yaml")``."""
    return resource_dir(name).joinpath(*parts)


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
