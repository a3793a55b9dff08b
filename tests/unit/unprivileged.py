"""Run a piece of a test as an ordinary user, where file modes and permissions matter (root reads and
writes through any mode, so a test run as root would pass for the wrong reason).

As root, the function runs in a forked child that first becomes ``nobody`` (uid and gid 65534),
keeping one capability, CAP_DAC_READ_SEARCH (also for the programs it runs), so that it can still
read root's Python installation (a lazy import, ansible-playbook) while every write, every created
file's mode and the umask are an ordinary user's.
As an ordinary user (CI), it runs in a forked child as that user. Either way the child's umask,
working directory and environment stay in the child."""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

NOBODY = 65534


_CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_PR_SET_KEEPCAPS = 8
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_RAISE = 2


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _become_nobody_who_can_read() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_KEEPCAPS)")
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    data = (_CapData * 2)()
    data[0].effective = data[0].permitted = data[0].inheritable = 1 << _CAP_DAC_READ_SEARCH
    if libc.capset(ctypes.byref(_CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    # ambient: the programs it runs (ansible-playbook under root's Python) can read too
    if libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, _CAP_DAC_READ_SEARCH, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAP_AMBIENT_RAISE)")


@contextlib.contextmanager
def shared_dir() -> Iterator[Path]:
    """A directory the unprivileged child owns (pytest's tmp_path is under root's 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="gpustack-nobody-"))
    path.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_unprivileged(fn: Callable[[], Any], *, umask: int | None = None, cwd: Path | None = None) -> Any:
    """``fn()`` in a forked child as an ordinary user; its return value (pickled), or its exception
    raised again here as an AssertionError with the child's traceback."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(read)
            if os.geteuid() == 0:
                _become_nobody_who_can_read()
            if umask is not None:
                os.umask(umask)
            if cwd is not None:
                os.chdir(cwd)
            try:
                payload: tuple[str, Any] = ("ok", fn())
            except BaseException:
                payload = ("error", traceback.format_exc())
            with os.fdopen(write, "wb") as fh:
                pickle.dump(payload, fh)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and data, "the unprivileged child died"
    kind, value = pickle.loads(data)
    if kind == "error":
        raise AssertionError(f"in the unprivileged child:\n{value}")
    return value


def run_cli(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``gpustack ARGV`` in-process through ``main`` (the one error mapping): exit code, stdout, stderr."""
    import io

    from gpustack.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    old_env = dict(os.environ)
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(argv)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.environ.clear()
        os.environ.update(old_env)
    return code, out.getvalue(), err.getvalue()
