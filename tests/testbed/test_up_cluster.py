"""`gpustack up` on three real hosts (1 control plane, 2 workers), through the failures users
meet: unknown host keys, a preflight error, a failing apt source, a host whose sshd dies mid-way.
kubeadm/kubelet/kubectl/helm are TEST DOUBLES; everything else on the hosts is real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from .cluster import HOST_LAYER_ONLY, UpRun, doubles_log, up, write_config
from .hosts import Host, Testbed
from .prepare import boot_iptables_rule, compose, fake_loaded_modules, fstab_swap
from .pytest_plugin import TestbedFactory
from .services import Sources

FOREIGN_RULE = (
    "-A",
    "INPUT",
    "-p",
    "tcp",
    "--dport",
    "7777",
    "-m",
    "comment",
    "--comment",
    "users-own-rule",
    "-j",
    "ACCEPT",
)


@pytest.fixture
def bed(testbed_factory: TestbedFactory) -> Testbed:
    return testbed_factory(
        ["cp", "w1", "w2"],
        prepare={
            "cp": boot_iptables_rule(*FOREIGN_RULE),
            "w1": fake_loaded_modules(["nouveau"]),
            "w2": compose(fstab_swap()),
        },
    )


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
            "--ignore-preflight",
            "nouveau",
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


def test_three_nodes_through_failures_to_convergence(
    bed: Testbed,
    tmp_path: Path,
    sources: Sources,
) -> None:
    cp, w1, w2 = bed.hosts
    state = tmp_path / "state"
    known_hosts = tmp_path / "known_hosts"
    known_hosts.touch()
    cfg = write_config(bed, tmp_path / "gpustack.yaml", sources, via_proxy=False)
    data = yaml.safe_load(cfg.read_text())
    data["ssh"]["known_hosts"] = str(known_hosts)
    cfg.write_text(yaml.safe_dump(data))

    # 1. unknown host keys: stop before anything connects, show fingerprints and the opt-in
    r = up(cfg, state)
    assert r.rc == 1, r.output
    assert "unknown SSH host key" in r.stderr and "--accept-new-host-keys" in r.stderr
    assert all(h.address in r.stderr for h in bed.hosts)
    assert known_hosts.read_text() == ""
    untouched(bed)

    # 2. keys recorded on explicit opt-in; preflight then stops on w1's nouveau: nothing changed
    r = up(cfg, state, "--accept-new-host-keys")
    assert r.rc == 1, r.output
    assert all(h.address in known_hosts.read_text() for h in bed.hosts)
    assert "P09-nouveau" in r.stdout and "w1" in r.stdout and "blacklist nouveau" in r.stdout
    assert (
        "preflight failed" in r.stderr
        and "nothing was changed" in r.stderr
        and "--ignore-preflight nouveau" in r.stderr
    )
    untouched(bed)

    # 3. a failing apt source (wrong repository path): the preflight finds it on every host (P24,
    #    HTTP 404), nothing changed; told to go on anyway, the run stops at the kubernetes stage,
    #    naming the stage and every host
    broken = yaml.safe_load(cfg.read_text())
    broken["sources"]["kubernetes_apt_url"] = sources.http.url.rstrip("/") + "/nowhere/v{minor}/deb/"
    broken_cfg = tmp_path / "broken.yaml"
    broken_cfg.write_text(yaml.safe_dump(broken))
    r = up(broken_cfg, state, "--ignore-preflight", "nouveau")
    assert r.rc == 1, r.output
    assert "preflight failed: 3 problem(s) on cp, w1, w2; nothing was changed" in r.stderr, r.stderr
    flat = " ".join(r.stdout.split())
    assert "P24-package-sources" in flat and "/nowhere/v1.36/deb/InRelease (direct): HTTP 404" in flat, r.stdout
    untouched(bed)
    r = up(broken_cfg, state, "--ignore-preflight", "nouveau,package-sources")
    assert r.rc == 1, r.output
    assert "stage 'kubernetes' failed on" in r.stderr
    assert all(h.name in r.stderr.split("stage 'kubernetes' failed on", 1)[1].splitlines()[0] for h in bed.hosts)
    assert "resumes safely" in r.stderr
    summary = r.summary()
    assert summary["containerd"]["status"] in {"ok", "changed"} and summary["kubernetes"]["status"] == "failed"
    assert summary["control-plane"]["status"] == "not run"

    # 4. the first full install is cut mid-way: w2's sshd (and every session, so Ansible's
    #    multiplexed connection too) dies once the containerd stage starts. The run fails
    #    naming w2; after sshd is back, the next up converges the whole cluster.
    r = up_interrupted(cfg, state, w2, when_play="containerd")
    assert r.rc == 1, r.output
    assert "w2" in r.stderr and "unreachable" in r.stderr and "stage '" in r.stderr
    failed_stage = r.stderr.split("stage '", 1)[1].split("'", 1)[0]
    assert failed_stage in {"containerd", "kubernetes", "workers"}
    w2.start_sshd()
    r = up(cfg, state, "--ignore-preflight", "nouveau")
    assert r.rc == 0, r.output
    assert "(ignored)" in r.stdout
    inits = [
        c
        for c in doubles_log(cp.sudo("cat /var/log/gpustack-doubles/kubeadm.log", check=True).stdout)
        if c[:1] == ["init"]
    ]
    assert len(inits) == 1
    for w in (w1, w2):
        joins = [
            c
            for c in doubles_log(w.sudo("cat /var/log/gpustack-doubles/kubeadm.log", check=True).stdout)
            if c[:1] == ["join"]
        ]
        assert len(joins) == 1, w.name
        join = joins[0]
        assert join[1] == f"{cp.address}:6443"
        assert join[join.index("--node-name") + 1] == w.name
        assert "--token" in join and "--discovery-token-ca-cert-hash" in join
        assert w.sudo("test -s /etc/kubernetes/kubelet.conf", check=False).returncode == 0
        # workers run no control plane
        assert w.sudo("test -e /etc/kubernetes/admin.conf", check=False).returncode == 1
    # multi-node: the control-plane taint stays
    taints = cp.sudo(
        "kubectl --kubeconfig /etc/kubernetes/admin.conf get node cp -o jsonpath='{.spec.taints}'", check=True
    ).stdout
    assert "node-role.kubernetes.io/control-plane" in taints
    kubeadm_cfg = cp.sudo("cat /etc/gpustack/kubeadm-config.yaml", check=True).stdout
    assert "taints: []" not in kubeadm_cfg
    # the join token never reaches logs on this machine
    token = next(a for a in join if a.count(".") == 1 and len(a) == 23)
    run_dir = r.last_run_dir()
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert token not in path.read_text(errors="replace"), path
    # the user's own firewall rule survives, after our single jump
    for h in bed.hosts:
        rules = h.sudo("iptables -S INPUT", check=True).stdout.splitlines()
        assert rules.count("-A INPUT -j GPUSTACK-INPUT") == 1
        chain = h.sudo("iptables -S GPUSTACK-INPUT", check=True).stdout
        for other in bed.hosts:
            assert f"-s {other.address}/32" in chain and "--dport 8472" in chain
    cp_rules = cp.sudo("iptables -S INPUT", check=True).stdout
    assert "users-own-rule" in cp_rules
    # swap commented out on w2 with a backup
    assert "#" in next(line for line in w2.sudo("cat /etc/fstab", check=True).stdout.splitlines() if "swap.img" in line)

    # 5. converged: a second run changes nothing on any host
    r = up(cfg, state, "--ignore-preflight", "nouveau")
    assert r.rc == 0, r.output
    assert all(v == 0 for v in r.changed().values()), r.changed()

    # 6. a host whose sshd is down before the run: stopped at the host-key gate, nothing runs
    w2.stop_sshd()
    r = up(cfg, state, "--ignore-preflight", "nouveau")
    assert r.rc == 1 and "cannot reach SSH" in r.stderr and w2.address in r.stderr, r.output
    w2.start_sshd()
    shutil.rmtree(state / "runs", ignore_errors=True)
