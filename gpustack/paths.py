"""Where gpustack keeps its state, and where the files it ships are (the one way to find them)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path

from gpustack.errors import ConfigError, UsageError

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


#: the mode of every file gpustack writes under its state (and of what it writes for you that may
#: hold cluster details: snapshots, support bundles), whatever the umask
PRIVATE = 0o600


def current_umask() -> int:
    """The process umask, read without changing it where the kernel says it (/proc, Linux 4.7+)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    old = os.umask(0o077)
    os.umask(old)
    return old


def _mode(mode: int | None) -> int:
    return (0o666 & ~current_umask()) if mode is None else mode


@contextlib.contextmanager
def replacing(path: Path, *, mode: int | None = PRIVATE) -> Iterator[Path]:
    """A new file beside ``path`` with an explicit ``mode`` (see :func:`write_file`), for a library
    that writes by file name (paramiko's known_hosts): renamed over ``path`` when the block ends
    without an error, removed otherwise."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _mode(mode))
        os.close(fd)
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_file(path: Path, data: bytes | str, *, mode: int | None = PRIVATE) -> Path:
    """The one way gpustack writes a file: atomically and with an explicit ``mode``.

    The data goes to a new file beside ``path`` (a random name created with O_EXCL|O_NOFOLLOW, so
    never through a link someone placed there), its mode is set with fchmod (which the umask does
    not touch: 0600 stays 0600 under umask 000), then it is renamed over ``path`` (which replaces a
    link at ``path`` itself and never writes through it). ``mode=None``: what a new file gets
    from the umask (0666 less the umask), for files written for the user (``render --out``)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _mode(mode))
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def write_json(path: Path, data: object, *, mode: int | None = PRIVATE) -> Path:
    """``data`` as indented JSON (see :func:`write_file`; private by default)."""
    return write_file(path, json.dumps(data, indent=2, default=str) + "\n", mode=mode)


def check_input_file(path: Path, flag: str) -> Path:
    """A file the user named to be read (``--kubeconfig FILE``): a UsageError (exit 2) naming the
    flag, the path and what is wrong with it (missing, a directory, unreadable)."""
    where = f"{flag} {path}" if flag else str(path)
    p = path.expanduser()
    if p.is_dir():
        raise UsageError(f"{where}: is a directory, not a file")
    if not p.exists():
        raise UsageError(f"{where}: no such file")
    if not p.is_file():
        raise UsageError(f"{where}: not a regular file")
    if not os.access(p, os.R_OK):
        raise UsageError(f"{where}: not readable (permission denied)")
    return p


def check_output_path(path: Path, flag: str) -> None:
    """Refuse, before any work, a file the user named (``--save FILE``) that cannot be written: a
    UsageError (exit 2) naming the flag and the path."""
    where = f"{flag} {path}" if flag else str(path)
    if path.is_dir():
        raise UsageError(f"{where}: is a directory", hint="name a file")
    parent = path.parent
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist"
        raise UsageError(f"{where}: directory {parent} {why}", hint=f"create it first (mkdir -p {parent})")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: directory {parent} is not writable", hint="choose a directory you can write to")


def write_output(path: Path, data: bytes | str, *, flag: str, mode: int | None = None) -> Path:
    """A file the user named on the command line (``--save FILE``; ``mode=None``: as the umask
    says): a problem with the path is a UsageError (exit 2) that names the flag and the path."""
    check_output_path(path, flag)
    try:
        return write_file(path, data, mode=mode)
    except OSError as exc:
        where = f"{flag} {path}" if flag else str(path)
        raise UsageError(f"{where}: cannot write: {exc.strerror or exc}") from None


def make_tree_private(root: Path) -> None:
    """Take group and other permissions off everything under ``root`` (what a tool gpustack runs
    wrote there with the caller's umask: ansible-runner's artifacts). Links are not followed."""
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(base, name)
            with contextlib.suppress(OSError):
                st = os.lstat(p)
                if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
                    os.chmod(p, stat.S_IMODE(st.st_mode) & ~0o077)


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


#: the cluster's Secret encryption keys (``security.encryption_at_rest``), beside its admin kubeconfig; 0600
ENCRYPTION_KEYS_FILE = "encryption-keys.json"


def encryption_keys_path(cluster_name: str, root: Path | None = None) -> Path:
    """Where the cluster's encryption keys are kept (``<state>/clusters/<name>/encryption-keys.json``): a restore of
    an etcd snapshot needs them."""
    return (root or state_dir()) / "clusters" / cluster_name / ENCRYPTION_KEYS_FILE
