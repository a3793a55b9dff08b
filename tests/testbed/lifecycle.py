"""Helpers of tests/testbed/test_cluster_lifecycle.py: runs interrupted on purpose, the shared
cluster's event log (tests/testbed/doubles), and what the hosts' firewalls look like."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .cluster import HOST_LAYER_ONLY, UpRun
from .hosts import Host, Testbed

IGNORE_NOUVEAU = ("--ignore-preflight", "nouveau")
POD_CIDR = "10.244.0.0/16"
API_SERVICE_IP = "10.96.0.1"
JUMP = "-A INPUT -j GPUSTACK-INPUT"
#: the address of a node that left the cluster
GONE = "10.213.0.99"
#: etcd's ports opened to one control-plane address, as firewalld lists the rich rule
ETCD_RULE = 'rule family="ipv4" source address="{}" port port="2379-2380" protocol="tcp" accept'


def _play_started(events: Path, play: str) -> bool:
    """Whether ansible-runner has recorded the start of `play` (partial files come and go)."""
    for path in events.glob("*.json"):
        try:
            if f'"play": "{play}"' in path.read_text(errors="replace"):
                return True
        except FileNotFoundError:
            continue
    return False


def up_interrupted(cfg: Path, state: Path, victim: Host, *, when_play: str) -> UpRun:
    """Run `up` and kill every sshd process on `victim` as soon as the play `when_play` starts."""
    env = {**os.environ, "GPUSTACK_STATE_DIR": str(state), "NO_COLOR": "1", "COLUMNS": "200"}
    before = set((state / "runs").iterdir()) if (state / "runs").exists() else set()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpustack",
            "up",
            "--yes",
            *HOST_LAYER_ONLY,
            *IGNORE_NOUVEAU,
            "-c",
            str(cfg),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 600
    killed = False
    while proc.poll() is None and time.monotonic() < deadline and not killed:
        new = set((state / "runs").iterdir()) - before if (state / "runs").exists() else set()
        for run_dir in new:
            events = run_dir / "ansible" / "artifacts" / "site" / "job_events"
            if events.is_dir() and _play_started(events, when_play):
                victim.console_run("systemctl stop ssh.service; pkill -KILL sshd; true", check=True)
                killed = True
        time.sleep(0.2)
    out, err = proc.communicate(timeout=900)
    assert killed, "the run ended before the play started: " + out + err
    return UpRun(proc.returncode, out, err, state)


def untouched(bed: Testbed) -> None:
    for h in bed.hosts:
        assert h.sudo("test -e /etc/modules-load.d/gpustack.conf", check=False).returncode == 1, h.name
        assert "GPUSTACK-INPUT" not in h.sudo("iptables -S", check=True).stdout, h.name


def events(shared: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (shared / "events.log").read_text().splitlines() if line.strip()]


def index(evs: list[dict[str, Any]], host: str, tool: str, *words: str, last: bool = False) -> int:
    """Position of the first (or last) call on ``host`` of ``tool`` whose argv contains ``words`` in order."""

    def match(e: dict[str, Any]) -> bool:
        argv = e["argv"]
        return (
            e["host"] == host
            and e["tool"] == tool
            and any(argv[i : i + len(words)] == list(words) for i in range(len(argv)))
        )

    found = [i for i, e in enumerate(evs) if match(e)]
    assert found, f"no {tool} {' '.join(words)} on {host}"
    return found[-1] if last else found[0]


def count(evs: list[dict[str, Any]], host: str, tool: str, *words: str) -> int:
    return sum(
        1
        for e in evs
        if e["host"] == host
        and e["tool"] == tool
        and any(e["argv"][i : i + len(words)] == list(words) for i in range(len(e["argv"])))
    )


def interrupt_after_apply(cfg: Path, state: Path, shared: Path) -> subprocess.CompletedProcess[str]:
    """`gpustack upgrade --to 1.36 --no-snapshot` (the bed has no etcd to snapshot), SIGINT once the kubeadm double on cp finished `upgrade apply`
    (it waits in its hold until the hold is lifted: the apply done, its result not yet returned)."""
    (shared / "hold").mkdir(exist_ok=True)
    (shared / "hold" / "cp-upgrade-apply").write_text("")
    env = {**os.environ, "GPUSTACK_STATE_DIR": str(state), "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("GPUSTACK_CONFIG", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpustack",
            "upgrade",
            "--to",
            "1.36",
            "--yes",
            "--no-snapshot",
            *IGNORE_NOUVEAU,
            "-c",
            str(cfg),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 600
        while not (shared / "held" / "cp-upgrade-apply").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "kubeadm upgrade apply never ran"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        (shared / "hold" / "cp-upgrade-apply").unlink(missing_ok=True)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def wait_no_module(host: Host) -> None:
    """The held kubeadm returned and the interrupted run's module process on the host is gone."""
    deadline = time.monotonic() + 60
    while host.sudo("pgrep -af '[A]nsiballZ|[a]nsible-tmp' || true", check=True).stdout.strip():
        assert time.monotonic() < deadline, "the interrupted run's module outlived the hold"
        time.sleep(0.5)


def assert_our_chain(host: Host) -> list[str]:
    """GPUSTACK-INPUT exists, its single jump is the first rule of INPUT; returns INPUT's rules."""
    rules = host.sudo("iptables -w -S", check=True).stdout
    assert "-N GPUSTACK-INPUT" in rules
    ours = [r for r in rules.splitlines() if r.startswith("-A GPUSTACK-INPUT")]
    assert any(f"-s {POD_CIDR} -d {host.address}/32 -p tcp" in r and "--dport 6443" in r for r in ours), ours
    assert any(
        f"-s {POD_CIDR} -d {API_SERVICE_IP}/32 -p tcp" in r and "--dport 443" in r and r.endswith("-j ACCEPT")
        for r in ours
    ), ours
    assert ours[-1] == "-A GPUSTACK-INPUT -j RETURN"
    input_rules = host.sudo("iptables -w -S INPUT", check=True).stdout.splitlines()
    assert input_rules[1] == JUMP, input_rules
    assert input_rules.count(JUMP) == 1, input_rules
    return input_rules


def firewalld_zone(host: Host, *, permanent: bool) -> dict[str, list[str]]:
    flag = "--permanent " if permanent else ""
    text = host.sudo(f"firewall-cmd {flag}--zone=gpustack --list-all", check=True).stdout
    out: dict[str, list[str]] = {}
    for line in text.splitlines()[1:]:
        key, _, value = line.strip().partition(":")
        out[key.strip()] = value.split()
    return out
