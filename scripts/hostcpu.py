"""CPU seconds of the test bed's hosts apart from this machine's own (gpustack, Ansible, ssh): for
``scripts/bench_up.py``, which runs three "machines" on the same cores as the controller.

Once the hosts have booted, every process descended from a host's systemd-nspawn is moved into one cpuacct
cgroup (cgroup v1 ``cpuacct.usage``, or a v2 group's ``cpu.stat`` ``usage_usec``); what the hosts start later
(sshd's sessions, apt, dpkg, the modules Ansible runs, services) inherits it. This machine's share is the
whole machine's busy time (/proc/stat) less the hosts'. Where no cgroup can be made (not root, no cpu
accounting), :meth:`HostCpu.sample` returns None and the bench prints "-".
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

V1 = Path("/sys/fs/cgroup/cpuacct")
V2 = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class CpuSample:
    machine: float  # busy CPU seconds of the whole machine since boot
    hosts: float  # CPU seconds of the hosts' processes since they were moved


def machine_busy_seconds() -> float:
    """user+nice+system+irq+softirq+steal of /proc/stat's first line, in seconds."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def descendants(pids: Iterable[int]) -> list[int]:
    """``pids`` and every process descended from them (by /proc/PID/stat's parent pid). A host's processes are
    told apart this way, not by root or mount namespace: seen from here, a process in another mount namespace
    has the root "/", and some of a host's services have a mount namespace of their own."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    found = set(pids)
    grew = True
    while grew:
        new = {pid for pid, ppid in parent.items() if ppid in found and pid not in found}
        found |= new
        grew = bool(new)
    return sorted(found)


class HostCpu:
    """The hosts' processes in a cpuacct cgroup of their own, for as long as the context lasts."""

    def __init__(self, pids: Iterable[int]) -> None:
        self.pids = list(pids)  # the hosts' systemd-nspawn processes
        self.group: Path | None = None
        self.v1 = V1.is_dir() and (V1 / "cpuacct.usage").exists()

    def __enter__(self) -> HostCpu:
        base = V1 if self.v1 else V2
        group = base / f"gpustack-bench-{os.getpid()}"
        try:
            group.mkdir(exist_ok=True)
            for pid in descendants(self.pids):
                with contextlib.suppress(OSError):  # a process that has just ended
                    (group / "cgroup.procs").write_text(f"{pid}\n")
        except OSError:
            return self
        self.group = group
        return self

    def __exit__(self, *exc: object) -> None:
        if self.group is None:
            return
        parent = self.group.parent
        with contextlib.suppress(OSError):
            for pid in (self.group / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (parent / "cgroup.procs").write_text(f"{pid}\n")
            self.group.rmdir()

    def _hosts_seconds(self) -> float | None:
        assert self.group is not None
        with contextlib.suppress(OSError, ValueError):
            if self.v1:
                return int((self.group / "cpuacct.usage").read_text()) / 1e9
            stat = dict(line.split() for line in (self.group / "cpu.stat").read_text().splitlines())
            return int(stat["usage_usec"]) / 1e6
        return None

    def sample(self) -> CpuSample | None:
        if self.group is None:
            return None
        hosts = self._hosts_seconds()
        return None if hosts is None else CpuSample(machine_busy_seconds(), hosts)


def split(before: CpuSample | None, after: CpuSample | None) -> tuple[float, float] | None:
    """(this machine's CPU seconds, the hosts') between two samples."""
    if before is None or after is None:
        return None
    hosts = after.hosts - before.hosts
    return max(0.0, after.machine - before.machine - hosts), hosts
