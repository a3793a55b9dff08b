"""Each run's own SSH control directory (gpustack/runners/sshmux.py): made private with its owner,
its masters ended and the directory removed when the run ends, by the guard when gpustack is gone,
or by the next run's sweep. A master is stood for by a process titled as OpenSSH titles one
(``ssh: <socket> [mux]``, its setproctitle) -- TEST DOUBLE: ``bash -c 'exec -a TITLE sleep'``; real
masters are ended on the test hosts (tests/testbed/test_interrupt.py)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from gpustack.runners import ansible as ar
from gpustack.runners import guard, sshmux


def fake_master(directory: Path) -> subprocess.Popen[bytes]:
    title = f"ssh: {directory}/0123456789 [mux]"
    proc = subprocess.Popen(["bash", "-c", f'exec -a "{title}" sleep 300'])
    deadline = time.monotonic() + 10
    while proc.pid not in sshmux.masters(directory):
        assert time.monotonic() < deadline, "the fake master never showed its title"
        time.sleep(0.02)
    return proc


def gone(proc: subprocess.Popen[bytes]) -> bool:
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return True


def dead_owner() -> str:
    """The owner line of a process that has ended."""
    proc = subprocess.Popen(["sleep", "30"])
    line = sshmux.owner_line(proc.pid)
    proc.kill()
    proc.wait()
    return line


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return tmp_path / "cp"


def test_a_run_gets_a_private_directory_its_masters_end_with_it(base: Path) -> None:
    with sshmux.control_dir(base) as path:
        assert path.parent == base and path.stat().st_mode & 0o777 == 0o700
        assert base.stat().st_mode & 0o777 == 0o700
        assert sshmux.owner_alive((path / sshmux.OWNER).read_text())
        master = fake_master(path)
    assert gone(master), "the run's master outlived it"
    assert not path.exists()


def test_the_directory_is_closed_when_the_run_raises(base: Path) -> None:
    with pytest.raises(KeyboardInterrupt), sshmux.control_dir(base) as path:
        master = fake_master(path)
        raise KeyboardInterrupt
    assert gone(master) and not path.exists()


def test_a_master_of_another_directory_is_left_alone(base: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    stranger = fake_master(other)
    try:
        with sshmux.control_dir(base):
            pass
        assert stranger.poll() is None, "a master that is not the run's was ended"
    finally:
        stranger.kill()
        stranger.wait()


def test_the_sweep_closes_what_dead_runs_left_and_keeps_live_and_new_ones(base: Path) -> None:
    base.mkdir(mode=0o700)
    dead, live, young, old = (base / n for n in ("run-dead", "run-live", "run-young", "run-old"))
    for d in (dead, live, young, old):
        d.mkdir(mode=0o700)
    (dead / sshmux.OWNER).write_text(dead_owner())
    (live / sshmux.OWNER).write_text(sshmux.owner_line())
    os.utime(old, (time.time() - 3600, time.time() - 3600))  # no owner, and not being created any more
    master = fake_master(dead)
    with sshmux.control_dir(base) as mine:  # a new run sweeps first
        assert gone(master), "the dead run's master is ended by the next run"
        assert not dead.exists() and not old.exists()
        assert live.exists() and young.exists() and mine.exists()


def test_the_guard_closes_the_directory_of_a_gpustack_that_is_gone(base: Path) -> None:
    base.mkdir(mode=0o700)
    path = base / "run-x"
    path.mkdir(mode=0o700)
    (path / sshmux.OWNER).write_text(dead_owner())
    master = fake_master(path)
    guard.end_control_dir(str(path))
    assert gone(master) and not path.exists()


def test_the_guard_ends_the_masters_of_a_live_run_and_keeps_its_directory(base: Path) -> None:
    with sshmux.control_dir(base) as path:
        master = fake_master(path)
        guard.end_control_dir(str(path))
        assert gone(master) and path.exists()


def test_the_guard_touches_no_directory_gpustack_did_not_make(tmp_path: Path) -> None:
    foreign = tmp_path / "cp"  # e.g. ~/.ansible/cp: no owner file
    foreign.mkdir()
    master = fake_master(foreign)
    try:
        guard.end_control_dir(str(foreign))
        guard.end_control_dir(None)
        assert master.poll() is None and foreign.exists()
    finally:
        master.kill()
        master.wait()


def test_a_base_that_is_not_private_is_neither_used_nor_swept(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    stale = shared / "run-stale"
    stale.mkdir()
    (stale / sshmux.OWNER).write_text(dead_owner())
    with sshmux.control_dir(shared) as path:
        assert path.parent != shared and path.stat().st_mode & 0o777 == 0o700
    assert stale.exists() and not path.exists()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "cp-real")
    (tmp_path / "cp-real").mkdir(mode=0o700)
    with sshmux.control_dir(link) as path:
        assert path.parent != link


def test_the_base_fits_a_socket_path() -> None:
    assert sshmux.base_dir("/tmp", uid=0) == Path("/tmp/gpustack-ssh-0")
    assert sshmux.base_dir("/x" * 40, uid=1000) == Path("/tmp/gpustack-ssh-1000")
    # <base>/run-XXXXXXXX/<10 hex digits> plus ssh's 17-character temporary suffix, within sun_path
    assert len(str(sshmux.base_dir("/y" * 24, uid=4294967294))) + len("/run-12345678/0123456789") + 17 < 108


def test_owner_lines_name_one_process() -> None:
    assert sshmux.owner_alive(sshmux.owner_line())
    assert not sshmux.owner_alive(dead_owner())
    pid, _start = sshmux.owner_line().split()
    assert not sshmux.owner_alive(f"{pid} 1")  # the same pid, another process (reused)
    assert not sshmux.owner_alive("") and not sshmux.owner_alive("x y")


def test_ansible_uses_the_runs_control_directory(tmp_path: Path) -> None:
    env = ar.ansible_env(ar.AnsibleSettings(known_hosts=tmp_path / "k", control_dir=tmp_path / "cp"))
    assert env["ANSIBLE_SSH_CONTROL_PATH_DIR"] == str(tmp_path / "cp")
    assert "ControlPersist" in env["ANSIBLE_SSH_ARGS"]
    assert "ANSIBLE_SSH_CONTROL_PATH_DIR" not in ar.ansible_env(ar.AnsibleSettings(known_hosts=tmp_path / "k"))


@pytest.mark.parametrize(
    ("host", "port", "user"), [("10.0.0.5", 22, "gpustack"), ("gpu-1.example", 2222, None), ("::1", None, "root")]
)
def test_the_early_master_sits_where_ansible_looks(
    tmp_path: Path, host: str, port: int | None, user: str | None
) -> None:
    """Contract: ansible-core's ssh connection plugin names the socket of (host, port, user) in the control
    directory with ``Connection._create_control_path`` -- the installed ansible-core's, not a copy."""
    from ansible.plugins.connection.ssh import Connection

    expected = Connection._create_control_path(host, port, user) % {"directory": str(tmp_path)}
    assert str(sshmux.control_socket(tmp_path, host, port, user)) == expected


def test_early_masters_log_in_as_ansible_would_and_are_reaped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TEST DOUBLE for OpenSSH's ssh (it records its argv; real logins are counted on the test hosts,
    tests/testbed/test_up_single.py): one background ssh per SSH host, with Ansible's options, its socket,
    user, port and key, never prompting, running ``true``; local hosts get none; a client that hangs is ended."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv"
    ssh = bin_dir / "ssh"
    ssh.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\ncase "$*" in *hang*) exec sleep 30;; esac\n')
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    args = ["-o", "ControlMaster=auto", "-o", "StrictHostKeyChecking=yes"]
    hosts = [
        {"ansible_host": "10.0.0.5", "ansible_port": 22, "ansible_user": "gpustack",
         "ansible_ssh_private_key_file": "/k/id"},
        {"ansible_host": "10.0.0.6", "ansible_connection": "local"},
        {"ansible_host": "hang.example", "ansible_port": 2222},
    ]  # fmt: skip
    started = sshmux.open_masters(tmp_path, hosts, args)
    assert len(started) == 2
    t0 = time.monotonic()
    sshmux.reap(started, timeout=1.0)
    assert time.monotonic() - t0 < 5 and all(p.returncode is not None for p in started)
    lines = sorted(log.read_text().splitlines())
    sock = sshmux.control_socket(tmp_path, "10.0.0.5", 22, "gpustack")
    assert lines[0] == (
        f"-o ControlMaster=auto -o StrictHostKeyChecking=yes -o BatchMode=yes -o ControlPath={sock} -o Port=22 "
        "-o User=gpustack -o IdentityFile=/k/id -- 10.0.0.5 true"
    )
    assert lines[1].endswith("-o Port=2222 -- hang.example true") and "User=" not in lines[1]


def test_early_masters_use_ansibles_ssh_options_and_only_with_a_control_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv"
    (bin_dir / "ssh").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\n')
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    host = {"ansible_host": "10.0.0.5", "ansible_port": 22}
    settings = ar.AnsibleSettings(known_hosts=tmp_path / "kh", connect_timeout=7)
    with ar.early_masters(settings, [host]):
        pass
    assert not log.exists(), "no control directory: no early master"
    with ar.early_masters(
        ar.AnsibleSettings(known_hosts=tmp_path / "kh", connect_timeout=7, control_dir=tmp_path), [host]
    ):
        pass  # leaving the block reaps the client
    line = log.read_text().splitlines()[0]
    assert line.startswith(ar.ssh_args(settings) + " -o BatchMode=yes"), line
    assert f"UserKnownHostsFile={tmp_path / 'kh'}" in line and "ConnectTimeout=7" in line
