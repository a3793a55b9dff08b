"""Interruptions on a real host: Ctrl-C (SIGINT) and SIGKILL of gpustack in the middle of `up`.

After each: no ansible-playbook, Ansible worker or module process is left (on this machine or on
the host), no SSH master (``ssh: <run's control dir>/… [mux]``) and no control directory, the summary says which stage was interrupted and which never ran, a concurrent run is
refused by the cluster lock while one runs, and the next `up` finishes the job; the one after it
changes nothing. kubeadm/kubelet/kubectl/helm on the host are the test bed's doubles."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import HOST_LAYER_ONLY, UpRun, run_gpustack, up, write_config
from .hosts import Host, Testbed
from .pytest_plugin import TestbedFactory
from .services import Sources


@pytest.fixture
def bed(testbed_factory: TestbedFactory) -> Testbed:
    return testbed_factory(["intr"])


@pytest.fixture
def tmpdir_short() -> Iterator[Path]:
    """The interrupted runs' TMPDIR: their SSH control directories live under <it>/gpustack-ssh-<uid>
    (short: a socket path has 108 bytes), apart from any other run on this machine."""
    path = Path(tempfile.mkdtemp(prefix="gs-intr-"))
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


def _start_up(cfg: Path, state: Path, tmp: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "GPUSTACK_STATE_DIR": str(state), "NO_COLOR": "1", "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}
    env["TMPDIR"] = str(tmp)
    env.pop("GPUSTACK_CONFIG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "gpustack", "up", "--yes", *HOST_LAYER_ONLY, "-c", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def _wait_for_line(proc: subprocess.Popen[str], marker: str, timeout: float = 600) -> list[str]:
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            return seen
        assert time.monotonic() < deadline, "".join(seen)
    raise AssertionError(f"{marker!r} never printed:\n{''.join(seen)}")


def _pgrep(pattern: str) -> str:
    """This machine's processes whose command line matches ``pattern`` (``pgrep -af``)."""
    return subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True, check=False).stdout


def _ssh_masters(tmp: Path) -> str:
    """OpenSSH's masters of the runs' control directories (titled ``ssh: <socket> [mux]``)."""
    return _pgrep(f"^ssh: {tmp / f'gpustack-ssh-{os.getuid()}'}/")


#: Mitogen's connections (the stages' strategy, config ssh.mitogen): here, the ssh processes it started (their
#: command line carries its first stage, mitogen/parent.py ``get_boot_command``); on the host, its interpreters
#: (argv[0] ``<python>(mitogen:<name>)``, the same file's first stage)
MITOGEN_HERE = "binascii.a2b_base64"
MITOGEN_THERE = "[m]itogen:"


def _no_stray_processes(state: Path, host: Host, tmp: Path) -> None:
    """Nothing of the interrupted run is left: here, ansible-playbook processes of its run
    directories (their guard is named after them), SSH masters of its control directory and the
    directory itself, Mitogen's SSH connections; on the host, Ansible's module processes and Mitogen's
    interpreters."""
    deadline = time.monotonic() + 20
    base = tmp / f"gpustack-ssh-{os.getuid()}"
    while True:
        here = _pgrep(f"{state / 'runs'}|{MITOGEN_HERE}").strip()
        masters = _ssh_masters(tmp).strip()
        dirs = sorted(p.name for p in base.iterdir()) if base.is_dir() else []
        there = host.sudo(f"pgrep -af '[A]nsiballZ|[a]nsible-tmp|{MITOGEN_THERE}' || true", check=True).stdout.strip()
        if not here and not masters and not dirs and not there:
            return
        assert time.monotonic() < deadline, (
            f"left behind:\nhere: {here}\nssh masters: {masters}\ncontrol dirs: {dirs}\nhost: {there}"
        )
        time.sleep(0.5)


def test_interrupted_and_killed_runs_leave_nothing_behind_and_the_next_run_finishes(
    bed: Testbed, tmp_path: Path, sources: Sources, tmpdir_short: Path
) -> None:
    host = bed.hosts[0]
    cfg = write_config(bed, tmp_path / "gpustack.yaml", sources)
    state = tmp_path / "state"

    # --- SIGTERM during the preflight: nothing ran, nothing is left
    t_early = time.monotonic()
    early = _start_up(cfg, state, tmpdir_short)
    _wait_for_line(early, "▶ preflight")
    early.send_signal(signal.SIGTERM)
    out, err = early.communicate(timeout=120)
    assert early.returncode == 130, out + err
    statuses = {stage: row["status"] for stage, row in UpRun(130, out, err, state).summary().items()}
    assert statuses["preflight"] == "interrupted", statuses
    assert {v for k, v in statuses.items() if k != "preflight"} == {"not run"}, statuses
    _no_stray_processes(state, host, tmpdir_short)
    print(f"test_interrupt: SIGTERM in the preflight, {time.monotonic() - t_early:.1f}s")

    # --- Ctrl-C while the containerd stage runs
    first = _start_up(cfg, state, tmpdir_short)
    _wait_for_line(first, "▶ containerd")
    assert "[mux]" in _ssh_masters(tmpdir_short), "Ansible's SSH masters live in the run's control directory"
    mitogen = _pgrep(MITOGEN_HERE)
    assert host.address in mitogen, f"the stages run through Mitogen (ssh.mitogen defaults to true): {mitogen!r}"
    first.send_signal(signal.SIGINT)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 130, out + err
    assert "interrupted during" in err and "again" in err, err
    run = UpRun(first.returncode, out, err, state)
    statuses = {stage: row["status"] for stage, row in run.summary().items()}
    assert "interrupted" in statuses.values(), statuses
    assert statuses["helm"] == "not run" and statuses["network"] == "not run", statuses
    assert "ok" not in [statuses[s] for s in ("kubernetes", "control-plane", "network", "helm")], statuses
    _no_stray_processes(state, host, tmpdir_short)

    # --- a second run is refused while one holds the lock; then SIGKILL the holder mid-stage
    second = _start_up(cfg, state, tmpdir_short)
    _wait_for_line(second, "▶ kubernetes")
    busy = run_gpustack(cfg, state, "up", "--yes", *HOST_LAYER_ONLY, timeout=120)
    assert busy.rc == 4 and "busy" in busy.stderr and str(second.pid) in busy.stderr, busy.output
    assert "[mux]" in _ssh_masters(tmpdir_short), "the preflight's masters persist into the stages"
    second.send_signal(signal.SIGKILL)
    second.wait(timeout=30)
    _no_stray_processes(state, host, tmpdir_short)

    # --- the next run finishes the job within the minute (the lock of the killed run is not stale)
    t0 = time.monotonic()
    third = up(cfg, state)
    assert third.rc == 0, third.output
    finishing = time.monotonic() - t0
    fourth = up(cfg, state)
    assert fourth.rc == 0, fourth.output
    assert all(v == 0 for v in fourth.changed().values()), fourth.changed()
    print(f"test_interrupt: the run after SIGKILL took {finishing:.1f}s")
    assert finishing < 60, f"the run after SIGKILL took {finishing:.0f}s"

    # --- handlers an interrupted run notified but never ran. What the host looks like when a run is
    # stopped right after writing the Kubernetes repository (before its apt cache update) and right
    # after writing containerd's configuration (before its restart): the stages forgot their stamps,
    # apt's lists lack the repository while the cache looks fresh (so cache_valid_time skips the
    # refresh: "No package matching 'kubectl'"), containerd runs from before its config's last change.
    t_lost = time.monotonic()
    host.sudo(
        "rm -f /var/lib/gpustack/stages/kubernetes.json /var/lib/gpustack/stages/containerd.json"
        " && apt-mark unhold kubectl && dpkg --remove kubectl && rm -f /var/lib/apt/lists/*_k8s_*"
        " && touch /etc/containerd/config.toml",
        check=True,
    )
    started = _containerd_started(host)
    fifth = up(cfg, state)
    assert fifth.rc == 0, fifth.output
    assert host.run("dpkg -s kubectl", check=False).returncode == 0, "kubectl installed again"
    restarted = _containerd_started(host)
    assert restarted != started, "containerd restarted: its config changed after it started"
    sixth = up(cfg, state)
    assert sixth.rc == 0, sixth.output
    assert all(v == 0 for v in sixth.changed().values()), sixth.changed()
    assert _containerd_started(host) == restarted, "and only once"
    print(f"test_interrupt: lost handlers repaired and checked, {time.monotonic() - t_lost:.1f}s")


def _containerd_started(host: Host) -> str:
    out = host.sudo("systemctl show -p InactiveExitTimestampMonotonic containerd", check=True).stdout
    return out.strip()
