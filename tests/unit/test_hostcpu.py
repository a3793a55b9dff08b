"""scripts/hostcpu.py, bench_up's CPU split: the pure parts, and the cgroup on this machine's own processes
(bench_up itself runs on the test bed: tests/testbed/test_up_single.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from scripts.hostcpu import CpuSample, HostCpu, descendants, machine_busy_seconds, split


def test_split_is_the_machine_less_the_hosts() -> None:
    assert split(CpuSample(100.0, 10.0), CpuSample(160.0, 50.0)) == (20.0, 40.0)
    assert split(None, CpuSample(1.0, 1.0)) is None and split(CpuSample(1.0, 1.0), None) is None
    # the hosts' counter and /proc/stat are read a moment apart: never a negative share here
    assert split(CpuSample(100.0, 10.0), CpuSample(100.5, 11.0)) == (0.0, 1.0)


def test_busy_seconds_grow_with_work() -> None:
    before = machine_busy_seconds()
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    assert machine_busy_seconds() - before >= 0.2


def test_a_process_and_its_descendants_and_their_cpu_counted_apart() -> None:
    """A busy child of this test stands in for a host's process: moved into the group, it is counted there."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nt=time.process_time()+0.6\nwhile time.process_time()<t: pass"]
    )
    try:
        assert child.pid in descendants([os.getpid()]) and os.getpid() in descendants([os.getpid()])
        assert os.getpid() not in descendants([child.pid])
        with HostCpu([]) as cpu:
            if cpu.group is None:  # no cgroup to be had here (not root): the bench prints "-"
                assert cpu.sample() is None
                return
            (cpu.group / "cgroup.procs").write_text(f"{child.pid}\n")
            before = cpu.sample()
            child.wait(timeout=30)
            after = cpu.sample()
            used = split(before, after)
            assert used is not None and used[1] >= 0.3, used
        assert not cpu.group.exists(), "the group is removed afterwards"
    finally:
        child.kill()
