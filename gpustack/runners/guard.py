"""A guard between gpustack and ``ansible-playbook``: no playbook outlives the gpustack that started it.

ansible-runner starts its command in a new session on a pseudo-terminal, and Ansible's workers
each start a session of their own (as do the ssh processes they run), so neither a process group
nor a terminal reaches them all. When gpustack died without a chance to clean up (SIGKILL, an OOM
kill, a lost SSH session to the admin machine), ``ansible-playbook`` and its workers used to carry
on against the hosts, concurrently with the next run.

The engine therefore puts a small executable named ``ansible-playbook`` (:func:`write_guard`)
first on the PATH ansible-runner runs with. The guard asks the kernel for SIGTERM when its parent
dies (``PR_SET_PDEATHSIG``) and to adopt orphaned descendants (``PR_SET_CHILD_SUBREAPER``), starts
the real ``ansible-playbook`` and, on SIGTERM, ends every descendant — whatever session it is in —
with SIGTERM, then SIGKILL after a grace period. Ctrl-C takes the same path: the engine sends the
guard SIGTERM (see ``runners.ansible.run_playbook``).

It also ends the SSH masters of the run's control directory (``ANSIBLE_SSH_CONTROL_PATH_DIR``, see
:mod:`gpustack.runners.sshmux`): those an earlier playbook of the run left behind are not its
descendants. When gpustack is gone it removes the directory too.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from gpustack.paths import write_file
from gpustack.runners import sshmux

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: seconds the playbook's processes get to end after SIGTERM before SIGKILL
GRACE_SECONDS = 5.0
PIDFILE = "guard.pid"


def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the guard still ends what it can see
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def descendants(root: int, proc: Path = Path("/proc")) -> list[int]:
    """Every live descendant of ``root`` (children first, then theirs), from /proc."""
    parents: dict[int, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if fields and fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found: list[int] = []
    frontier = [root]
    while frontier:
        kids = [pid for pid, ppid in parents.items() if ppid in frontier and pid not in found]
        found += kids
        frontier = kids
    return found


def end_tree(root: int, grace: float = GRACE_SECONDS) -> None:
    """SIGTERM every descendant of ``root``, wait up to ``grace`` seconds, SIGKILL what is left."""
    for pid in descendants(root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while descendants(root) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:  # reap what ended (we are their subreaper)
                pass
        time.sleep(0.05)
    for pid in descendants(root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def main(real: str, parent: int, pidfile: str, args: list[str]) -> int:
    """Run ``real args…``; end it and everything it started when the parent dies or on SIGTERM."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the kernel could be asked to tell us
        return 143
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    write_file(Path(pidfile), f"{os.getpid()}\n")
    child = subprocess.Popen([real, *args])

    def stop(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        end_tree(os.getpid())
        end_control_dir(os.environ.get("ANSIBLE_SSH_CONTROL_PATH_DIR"))
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    rc = child.wait()
    return 128 - rc if rc < 0 else rc


def end_control_dir(value: str | None) -> None:
    """End the masters of the run's control directory (only one gpustack made); remove it when
    the gpustack that made it is gone."""
    if not value:
        return
    path = Path(value)
    if not sshmux.is_control_dir(path):
        return
    try:
        owner = (path / sshmux.OWNER).read_text(encoding="utf-8")
    except OSError:
        return
    if sshmux.owner_alive(owner):
        sshmux.end_masters(path)
    else:
        sshmux.close(path)


def real_playbook_binary() -> str:
    """The ansible-playbook next to this Python (gpustack's venv), else the one on PATH."""
    beside = Path(sys.executable).parent / "ansible-playbook"
    if beside.is_file():
        return str(beside)
    return shutil.which("ansible-playbook") or "ansible-playbook"


def write_guard(directory: Path, *, real: str | None = None, parent: int | None = None) -> Path:
    """Write the guard (named ``ansible-playbook``) for one run into ``directory`` (0700)."""
    path = directory / "ansible-playbook"
    write_file(
        path,
        f"#!{sys.executable}\n"
        "import sys\n"
        "from gpustack.runners.guard import main\n"
        f"sys.exit(main({real or real_playbook_binary()!r}, {parent or os.getpid()}, "
        f"{str(directory / PIDFILE)!r}, sys.argv[1:]))\n",
        mode=0o700,
    )
    return path


def guard_pid(directory: Path) -> int | None:
    """The pid a guard in ``directory`` recorded (None before it started)."""
    try:
        return int((directory / PIDFILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
