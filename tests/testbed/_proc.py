"""Small process and polling helpers shared by the test bed modules.

Every subprocess gets a timeout and a readable error; every wait has a deadline.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class TestbedError(RuntimeError):
    """Raised when the test bed cannot be built, booted or torn down."""

    __test__ = False  # keep pytest from collecting this as a test class


def run(
    cmd: Sequence[str],
    *,
    timeout: float = 60.0,
    check: bool = True,
    input_text: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` with a timeout, capturing text output.

    With ``check`` a non-zero exit raises :class:`TestbedError` carrying the command and its
    output, which makes failures in fixtures readable in the pytest report.
    """
    try:
        proc = subprocess.run(
            list(cmd),
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=subprocess.DEVNULL if input_text is None else None,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise TestbedError(f"timed out after {timeout:.0f}s: {' '.join(cmd)}") from exc
    if check and proc.returncode != 0:
        raise TestbedError(
            f"command failed (rc={proc.returncode}): {' '.join(cmd)}\n"
            f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
        )
    return proc


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.5,
    what: str = "condition",
) -> T:
    """Call ``probe`` until it returns something other than ``None`` or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result is not None:
            return result
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TestbedError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(min(interval, remaining))


@contextlib.contextmanager
def file_lock(path: Path, *, shared: bool = False, timeout: float = 1800.0) -> Iterator[None]:
    """Hold an ``flock`` on ``path`` (created if missing) for the duration of the block.

    Used to serialise the root file system build and the use of the machine-wide network
    names (bridge, links, namespaces) between concurrent pytest processes.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:

        def _try() -> bool | None:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            return True

        wait_for(_try, timeout=timeout, interval=1.0, what=f"lock {path}")
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def run_parallel(cmds: Sequence[Sequence[str]], *, timeout: float) -> None:
    """Run independent commands at the same time; raise if any fails or the deadline passes."""
    procs = [
        subprocess.Popen(list(c), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for c in cmds
    ]
    deadline = time.monotonic() + timeout
    failures = []
    for cmd, proc in zip(cmds, procs, strict=True):
        try:
            _, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise TestbedError(f"timed out after {timeout:.0f}s: {' '.join(cmd)}") from None
        if proc.returncode != 0:
            failures.append(f"{' '.join(cmd)} (rc={proc.returncode}): {err[-2000:]}")
    if failures:
        raise TestbedError("commands failed:\n" + "\n".join(failures))
