"""The playbook guard: when gpustack dies by SIGKILL, ansible-playbook and everything it started
end too (real processes; a shell script stands in for ansible-playbook — TEST DOUBLE)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpustack.runners.guard import write_guard

FAKE_PLAYBOOK = """#!/bin/sh
# TEST DOUBLE for ansible-playbook: a worker in a session of its own (as Ansible's are), then a wait.
# The worker writes its pid once in its session (CI, 2026-11-27: `$!` read before setsid() had run).
setsid sh -c 'echo $$ > "$PIDS.worker"; exec sleep 300' &
while [ ! -s "$PIDS.worker" ]; do sleep 0.01; done
echo $$ "$(cat "$PIDS.worker")" > "$PIDS"
echo "args: $*" > "$PIDS.args"
wait
"""

PARENT = """
import os, subprocess, sys, time
from pathlib import Path
from gpustack.runners.guard import write_guard
guard_dir = Path(sys.argv[1]) / "guard"
guard_dir.mkdir()
guard = write_guard(guard_dir, real=sys.argv[2])
child = subprocess.Popen([str(guard), "--tags", "os", "site.yml"])
print(child.pid, flush=True)
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def test_the_playbook_and_its_workers_end_when_gpustack_is_killed(tmp_path: Path) -> None:
    fake = tmp_path / "ansible-playbook"
    fake.write_text(FAKE_PLAYBOOK)
    fake.chmod(0o755)
    pids_file = tmp_path / "pids"
    env = {**os.environ, "PIDS": str(pids_file)}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path), str(fake)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert parent.stdout is not None
    guard_pid = int(parent.stdout.readline())
    deadline = time.monotonic() + 20
    while not pids_file.exists() or not pids_file.read_text().strip():
        assert time.monotonic() < deadline, "the fake playbook never started"
        time.sleep(0.05)
    playbook_pid, worker_pid = map(int, pids_file.read_text().split())
    assert (tmp_path / "pids.args").read_text().strip() == "args: --tags os site.yml"
    assert os.getsid(worker_pid) != os.getsid(playbook_pid)  # out of reach of a process-group kill
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in (guard_pid, playbook_pid, worker_pid)):
        assert time.monotonic() < deadline, "a process outlived the gpustack that started it"
        time.sleep(0.1)


def test_the_guard_passes_the_exit_code_through(tmp_path: Path) -> None:
    fake = tmp_path / "ansible-playbook"
    fake.write_text("#!/bin/sh\nexit 4\n")
    fake.chmod(0o755)
    (tmp_path / "guard").mkdir()
    guard = write_guard(tmp_path / "guard", real=str(fake))
    assert guard.stat().st_mode & 0o777 == 0o700
    assert subprocess.run([str(guard)], check=False).returncode == 4
