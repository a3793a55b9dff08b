"""The per-cluster lock: exclusive, says who holds it, never stale (the kernel frees it when the holder dies)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpustack.engine.lock import cluster_lock, holder, lock_path
from gpustack.errors import BusyError

HOLD = """
import sys, time
from pathlib import Path
from gpustack.engine.lock import cluster_lock
with cluster_lock("lab", "up", root=Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def test_the_lock_is_exclusive_and_names_its_holder(tmp_path: Path) -> None:
    with cluster_lock("lab", "up", root=tmp_path) as path:
        assert path == lock_path("lab", tmp_path)
        assert holder(path)["pid"] == os.getpid() and holder(path)["command"] == "up"
        assert path.stat().st_mode & 0o777 == 0o600
        with (
            pytest.raises(BusyError, match=rf"`gpustack up` \(pid {os.getpid()}"),
            cluster_lock("lab", "reset", root=tmp_path),
        ):
            pass
        with cluster_lock("other", "up", root=tmp_path):  # another cluster: its own lock
            pass
    with cluster_lock("lab", "reset", root=tmp_path):  # released on exit
        pass


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(BusyError, match=rf"pid {proc.pid}"), cluster_lock("lab", "up", root=tmp_path):
            pass
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while True:
            try:
                with cluster_lock("lab", "up", root=tmp_path):
                    break
            except BusyError:
                assert time.monotonic() < deadline, "the lock of a killed run was not released"
                time.sleep(0.1)
        assert lock_path("lab", tmp_path).exists()  # the file stays; it is simply taken
    finally:
        proc.kill()
        proc.wait()
