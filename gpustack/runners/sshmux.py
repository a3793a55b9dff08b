"""Each run's own SSH control directory, and nothing of it left when the run ends.

Ansible reuses one SSH connection per host through OpenSSH's ControlMaster; with ``ControlPersist``
the master goes to the background (``ssh: <socket> [mux]``, in a session of its own) and stays for
60 s after its last use. In Ansible's default place (``~/.ansible/cp``) those masters belonged to no
run: they outlived Ctrl-C and SIGKILL of gpustack, and the next run reused them.

Every engine run (and every host collection of ``verify``/``doctor``) therefore gets its own control
directory, ``<tmp>/gpustack-ssh-<uid>/run-XXXXXXXX/`` (``ANSIBLE_SSH_CONTROL_PATH_DIR``; short, because a
socket path must fit the 108 bytes of ``sun_path``), holding an ``owner`` file (pid and start time
of the gpustack process). :func:`close` ends its masters — ``ssh -O exit`` per socket, then SIGTERM
and SIGKILL for any master process that names the directory — and removes it:

- when the run ends, normally or by Ctrl-C/SIGTERM (:func:`control_dir`'s ``finally``);
- when gpustack is killed while a playbook runs: the playbook's guard (:mod:`gpustack.runners.guard`)
  is told by the kernel and closes the directory;
- when gpustack is killed between playbooks: the next run (or collection) closes every directory
  whose owner is gone (:func:`sweep`).

The preflight and the host collection of verify/doctor open each host's master before Ansible starts
(:func:`open_masters`, through ``runners.ansible.early_masters``), at the socket
Ansible's ssh connection plugin will look for (:func:`control_socket`): the SSH login then happens while
``ansible-playbook`` starts up (~1 s), not after. A master not ready in time costs nothing: Ansible's ssh
makes its own connection, and whichever binds the socket second runs without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

#: the file in a control directory that names the process it belongs to ("<pid> <start time>")
OWNER = "owner"
#: the longest base directory used as it is (the socket is <base>/<run>/<10 hex digits> plus the 17
#: characters of ssh's temporary suffix, within sun_path's 108 bytes); a longer one falls back to /tmp
MAX_BASE = 48
#: a directory without an owner file younger than this may still be being created: the sweep waits
YOUNG_SECONDS = 60.0
#: seconds ssh -O exit may take per socket
EXIT_TIMEOUT = 5.0


def base_dir(tmp: str | None = None, uid: int | None = None) -> Path:
    """``<tmp>/gpustack-ssh-<uid>`` (``$TMPDIR``, else /tmp), or under /tmp when that is too long."""
    name = f"gpustack-ssh-{os.getuid() if uid is None else uid}"
    base = Path(tmp or tempfile.gettempdir()) / name
    return base if len(str(base)) <= MAX_BASE else Path("/tmp") / name


def _private(base: Path) -> Path | None:
    """``base`` created 0700, or None when it exists but is not a private directory of ours (a
    symlink, another user's, open to others): then it is not used, nor swept."""
    with contextlib.suppress(FileExistsError, FileNotFoundError, PermissionError):
        base.mkdir(mode=0o700)
    try:
        st = base.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return base


def start_time(pid: int, proc: Path = Path("/proc")) -> str | None:
    """A process's start time (clock ticks since boot, /proc/<pid>/stat field 22): with the pid,
    it names one process even after the pid is reused. None when it does not exist."""
    try:
        fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    return fields[19] if len(fields) > 19 and fields[0] != "Z" else None


def owner_line(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{pid} {start_time(pid) or '?'}\n"


def owner_alive(text: str, proc: Path = Path("/proc")) -> bool:
    """Whether the process an owner file names still runs (pure but for /proc)."""
    parts = text.split()
    if len(parts) != 2 or not parts[0].isdigit():
        return False
    return start_time(int(parts[0]), proc) == parts[1]


def masters(path: Path, proc: Path = Path("/proc")) -> list[int]:
    """The ssh master processes of the sockets in ``path`` (their title is ``ssh: <socket> [mux]``)."""
    prefix = f"ssh: {path}/"
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if title.startswith(prefix) and "[mux]" in title:
            found.append(int(entry.name))
    return found


def end_masters(path: Path, grace: float = 2.0) -> list[int]:
    """Ask every master in ``path`` to exit (``ssh -O exit``), then SIGTERM, and after ``grace``
    seconds SIGKILL, whichever of them is still there. Returns the pids that had to be signalled."""
    try:
        sockets = [p for p in path.iterdir() if stat.S_ISSOCK(p.lstat().st_mode)]
    except OSError:
        sockets = []
    for sock in sockets:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                ["ssh", "-F", "/dev/null", "-o", f"ControlPath={sock}", "-O", "exit", "gpustack-control"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=EXIT_TIMEOUT,
                check=False,
            )
    left = masters(path)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while masters(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in masters(path):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return left


def is_control_dir(path: Path) -> bool:
    """A directory made by :func:`control_dir` (it holds an owner file)."""
    return (path / OWNER).is_file() and not path.is_symlink()


def close(path: Path) -> None:
    """End the directory's masters and remove it."""
    end_masters(path)
    shutil.rmtree(path, ignore_errors=True)


def sweep(base: Path, now: float | None = None) -> list[Path]:
    """Close every control directory under ``base`` whose owner is gone (a run killed between
    playbooks). Returns the directories closed."""
    closed = []
    now = time.time() if now is None else now
    try:
        entries = [p for p in base.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []
    for path in entries:
        try:
            owner = (path / OWNER).read_text(encoding="utf-8")
        except OSError:
            owner = ""
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime < YOUNG_SECONDS:
                    continue  # being created right now by another run
        if not owner_alive(owner):
            close(path)
            closed.append(path)
    return closed


@contextlib.contextmanager
def control_dir(base: Path | None = None) -> Iterator[Path]:
    """A private control directory for one run (leftovers of dead runs swept first), closed when
    the block ends however it ends."""
    home = _private(base or base_dir())
    if home is None:  # not ours to use: a private directory of its own, nothing to sweep
        path = Path(tempfile.mkdtemp(prefix="gpustack-ssh-", dir="/tmp"))
    else:
        sweep(home)
        path = Path(tempfile.mkdtemp(prefix="run-", dir=home))
    (path / OWNER).write_text(owner_line(), encoding="utf-8")
    try:
        yield path
    finally:
        close(path)


def control_socket(directory: Path, host: object, port: object, user: object) -> Path:
    """The socket Ansible's ssh connection plugin uses for a host in ``directory``: the first 10 hex digits of
    sha1("<host>-<port>-<user>"), ``None`` spelled out (ansible-core's ``Connection._create_control_path``;
    tests/unit/runners/test_sshmux.py holds the two together)."""
    return directory / hashlib.sha1(f"{host}-{port}-{user}".encode()).hexdigest()[:10]


def open_masters(
    directory: Path, hosts: Iterable[Mapping[str, Any]], ssh_args: Sequence[str]
) -> list[subprocess.Popen[bytes]]:
    """Start, in the background, the ControlMaster of every SSH host in ``hosts`` (inventory host variables:
    ``ansible_host``, ``ansible_port``, ``ansible_user``, ``ansible_ssh_private_key_file``) in ``directory``,
    with Ansible's own ``ssh_args``: each ssh logs in, runs ``true`` and leaves its master behind
    (``ControlPersist``), which :func:`close` ends with the others. Never prompts (``BatchMode``); a host it
    cannot reach is Ansible's to report. Hand the processes to :func:`reap`."""
    started: list[subprocess.Popen[bytes]] = []
    for hv in hosts:
        if hv.get("ansible_connection", "ssh") != "ssh" or not hv.get("ansible_host"):
            continue
        host, port, user = hv["ansible_host"], hv.get("ansible_port"), hv.get("ansible_user")
        cmd = [
            "ssh",
            *ssh_args,
            "-o",
            "BatchMode=yes",
            "-o",
            f"ControlPath={control_socket(directory, host, port, user)}",
        ]
        if port is not None:
            cmd += ["-o", f"Port={port}"]
        if user:
            cmd += ["-o", f"User={user}"]
        if hv.get("ansible_ssh_private_key_file"):
            cmd += ["-o", f"IdentityFile={hv['ansible_ssh_private_key_file']}"]
        cmd += ["--", str(host), "true"]
        with contextlib.suppress(OSError):  # no ssh here: Ansible says so
            started.append(
                subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
    return started


def reap(started: Iterable[subprocess.Popen[bytes]], timeout: float = 2.0) -> None:
    """Collect the clients :func:`open_masters` started (each ends once ``true`` ran or its login failed); one
    still running after ``timeout`` seconds is ended. Their masters stay, for :func:`close`."""
    deadline = time.monotonic() + timeout
    for proc in started:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
