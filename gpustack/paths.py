"""Where gpustack keeps its state, and where the files it ships are (the one way to find them)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

from gpustack.errors import ConfigError

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
    """Create ``path`` 0700, and every missing directory above it 0700 too (whatever the umask:
    under umask 000, ``mkdir -p`` would leave them 0777). Existing parents are left as they are."""
    missing = []
    cur = path
    while not cur.exists():
        missing.append(cur)
        if cur.parent == cur:
            break
        cur = cur.parent
    try:
        for d in reversed(missing):
            try:
                d.mkdir(mode=0o700)
            except FileExistsError:
                continue
            d.chmod(0o700)
        path.chmod(0o700)
    except OSError as exc:  # a file where a directory should be, no permission: bad environment
        raise ConfigError(
            f"cannot create directory {path}: {exc.strerror or exc}",
            hint="GPUSTACK_STATE_DIR moves gpustack's state directory (docs/configuration.md)",
        ) from None
    return path


DEFAULT_KEEP_RUNS = 20
_RUN_NAME = re.compile(r"^[0-9]{8}T[0-9]{6}\.[0-9]{6}Z$")


def keep_runs(environ: Mapping[str, str] | None = None) -> int:
    """How many run directories to keep: $GPUSTACK_KEEP_RUNS (>= 1), default 20."""
    raw = (os.environ if environ is None else environ).get("GPUSTACK_KEEP_RUNS")
    if raw is None or raw == "":
        return DEFAULT_KEEP_RUNS
    if not raw.strip().isdigit() or int(raw) < 1:
        raise ConfigError(f"environment variable GPUSTACK_KEEP_RUNS={raw!r}: must be a whole number, 1 or more")
    return int(raw)


def prune_runs(runs: Path, keep: int) -> list[Path]:
    """Remove all but the newest ``keep`` run directories under ``runs`` (only directories named
    like a run: a UTC timestamp). Returns what was removed, oldest first."""
    if not runs.is_dir():
        return []
    named = sorted(p for p in runs.iterdir() if p.is_dir() and not p.is_symlink() and _RUN_NAME.match(p.name))
    old = named[: max(0, len(named) - keep)]
    for p in old:
        shutil.rmtree(p, ignore_errors=True)
    return old


def new_run_dir(root: Path | None = None, *, now: datetime | None = None, keep: int | None = None) -> Path:
    """A new private run directory; older runs beyond the newest ``keep`` (GPUSTACK_KEEP_RUNS,
    default 20) are removed."""
    root = root or state_dir()
    keep = keep_runs() if keep is None else keep
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%S.%fZ")
    run = ensure_private_dir(root / "runs" / stamp)
    prune_runs(root / "runs", keep)
    return run


def kubeconfig_path(cluster_name: str, root: Path | None = None) -> Path:
    return (root or state_dir()) / "clusters" / cluster_name / "admin.conf"


#: the Grafana admin password ``gpustack up`` generates for a cluster, beside its admin kubeconfig
GRAFANA_PASSWORD_FILE = "grafana-admin-password"


def grafana_password_path(cluster_name: str, root: Path | None = None) -> Path:
    """Where the cluster's Grafana admin password is kept (``<state>/clusters/<name>/grafana-admin-password``)."""
    return (root or state_dir()) / "clusters" / cluster_name / GRAFANA_PASSWORD_FILE
