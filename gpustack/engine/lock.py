"""One run at a time per cluster: an exclusive ``flock`` on ``<state>/locks/<cluster>.lock``.

The kernel releases a ``flock`` when its holder dies, however it dies (SIGKILL included), so a
lock is never stale: a lock file left behind by a killed run is simply taken by the next one. The
file records who holds it (pid, command, start time) for the message a second run prints.
Children never inherit the descriptor (Python opens files non-inheritable), so a stray child
cannot keep a dead run's lock.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from gpustack.errors import BusyError
from gpustack.paths import ensure_private_dir, state_dir


def lock_path(cluster: str, root: Path | None = None) -> Path:
    return (root or state_dir()) / "locks" / f"{cluster}.lock"


def holder(path: Path) -> dict[str, object]:
    """What the lock file says about its holder ({} when unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@contextmanager
def cluster_lock(cluster: str, command: str, *, root: Path | None = None) -> Iterator[Path]:
    """Hold the cluster's lock for the body; BusyError (nothing touched) when another run has it."""
    path = lock_path(cluster, root)
    ensure_private_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = holder(path)
            what = (
                f"`gpustack {who.get('command', '?')}` (pid {who.get('pid', '?')}, started {who.get('started', '?')})"
            )
            raise BusyError(
                f"cluster {cluster!r} is busy: {what} is running against it",
                hint="wait for it to finish; a killed run releases the lock by itself, so there is nothing to clean up",
            ) from None
        record = {
            "pid": os.getpid(),
            "command": command,
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the flock
