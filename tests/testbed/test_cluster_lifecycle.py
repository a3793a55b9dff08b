"""The life of a three-host cluster (cp the control plane, w1 and w2 workers) on one set of real
hosts, in order: a fresh three-host `up` costs minutes on the 2-core CI machine, so the upgrade
starts from the cluster the first test built instead of building its own.

1. `gpustack up` (Kubernetes 1.35) through the failures users meet: unknown host keys, a preflight
   error, a failing apt source, a host whose sshd dies mid-way; then converged, and a host whose
   sshd is down stops the run at the host-key gate.
2. `gpustack upgrade --to 1.36` of that cluster: refused by `up`, then control plane first and the
   workers one at a time; interrupted by Ctrl-C right after `kubeadm upgrade apply` finished
   (before its step was recorded: the resumed run must not apply again), then failed (kubeadm
   upgrade node fails once on the last worker), and resumed by running the same command again. A
   worker left as a run interrupted between its marker and its records leaves it gets its records.

The `cluster` fixture (module scope) boots the hosts and holds what step 1 leaves: ``converged``
is None before it ran, False if it failed, True once the cluster converged. Step 2 on its own
(node id) converges the cluster with one plain `up` first; after a failed step 1 it fails at once,
naming it, rather than upgrade a half-built cluster.

kubeadm/kubelet/kubectl/helm are TEST DOUBLES; everything else on the hosts is real. A directory
bind-mounted into every host plays the API server (tests/testbed/doubles: the cluster version, each
node's kubelet version and schedulability, one event log across hosts), and the doubles refuse what
the real tools refuse: `upgrade node` before `upgrade apply`, a skipped minor, a kubelet newer than
the API server. Two apt repositories (v1.35, v1.36) signed by one key, as pkgs.k8s.io's are.
w1 has the nouveau module loaded (a preflight error every run here ignores once step 1 has seen it
stop the run), w2 a swap line in fstab, cp a firewall rule of its own."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack.config import pins

from .cluster import HOST_LAYER_ONLY, UpRun, doubles_log, run_gpustack, up, write_config
from .hosts import Host, Testbed
from .prepare import boot_iptables_rule, compose, fake_loaded_modules, fstab_swap
from .services import HttpServer, Sources, build_k8s_repo

NAMES = ["cp", "w1", "w2"]  # cp: control plane
SHARED = "/var/lib/gpustack-doubles-cluster"
OLD, NEW = pins.KUBERNETES["1.35"], pins.KUBERNETES["1.36"]  # the pinned patches of the two minors
IGNORE_NOUVEAU = ("--ignore-preflight", "nouveau")

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


@dataclass
class Cluster:
    bed: Testbed
    #: the module's directory: the configurations, known_hosts, the bind-mounted cluster (``shared``)
    work: Path
    shared: Path
    #: Kubernetes 1.35 from the two-minor repository, no proxy, ``known_hosts`` (empty at first)
    cfg: Path
    known_hosts: Path
    state: Path
    http_url: str
    #: None: step 1 has not run; False: it failed; True: the cluster converged
    converged: bool | None = None

    def require_converged(self) -> None:
        """The cluster as step 1 leaves it: converged at 1.35 (built now if step 1 did not run)."""
        if self.converged is None:
            built = up(self.cfg, self.state, "--accept-new-host-keys", *IGNORE_NOUVEAU)
            assert built.rc == 0, built.output
            self.converged = True
        if not self.converged:
            pytest.fail("the cluster never converged: test_three_nodes_through_failures_to_convergence failed")


@pytest.fixture(scope="module")
def cluster(
    rootfs: Path,
    testbed_network: str,
    sources: Sources,
    http_server: HttpServer,
    testbed_doubles: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("cluster")
    gnupg = Path(tempfile.mkdtemp(prefix="gs-ug-")) / "gnupg"  # short: gpg's socket path limit
    try:
        base = http_server.root / "upgrade"
        repo = build_k8s_repo(testbed_doubles, OLD, base, "1.35", gnupg_home=gnupg)
        assert build_k8s_repo(testbed_doubles, NEW, base, "1.36", gnupg_home=gnupg).fingerprint == repo.fingerprint
    finally:
        shutil.rmtree(gnupg.parent)
    shared = work / "cluster"
    (shared / "fail-once").mkdir(parents=True)
    prepare = {
        "cp": boot_iptables_rule(*FOREIGN_RULE),
        "w1": fake_loaded_modules(["nouveau"]),
        "w2": compose(fstab_swap()),
    }
    nspawn_args = {n: [f"--bind={shared}:{SHARED}"] for n in NAMES}
    with Testbed(NAMES, work / "bed", prepare=prepare, nspawn_args=nspawn_args, rootfs=rootfs) as bed:
        repos = {
            "kubernetes_apt_url": f"{http_server.url}/upgrade/k8s/v{{minor}}/deb/",
            "kubernetes_apt_key_url": f"{http_server.url}/upgrade/k8s/v{{minor}}/deb/Release.key",
            "kubernetes_apt_key_fingerprint": repo.fingerprint,
        }
        known_hosts = work / "known_hosts"
        known_hosts.touch()
        extra = {"versions": {"kubernetes": "1.35"}, "sources": repos, "ssh": {"known_hosts": str(known_hosts)}}
        cfg = write_config(bed, work / "gpustack.yaml", sources, via_proxy=False, extra=extra)
        yield Cluster(bed, work, shared, cfg, known_hosts, work / "state", http_server.url)


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


def test_three_nodes_through_failures_to_convergence(cluster: Cluster) -> None:
    bed, cfg, state, known_hosts = cluster.bed, cluster.cfg, cluster.state, cluster.known_hosts
    cp, w1, w2 = bed.hosts
    cluster.converged = False  # until the end of this test: the upgrade needs the whole of it

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
    broken["sources"]["kubernetes_apt_url"] = cluster.http_url.rstrip("/") + "/nowhere/v{minor}/deb/"
    broken_cfg = cluster.work / "broken.yaml"
    broken_cfg.write_text(yaml.safe_dump(broken))
    r = up(broken_cfg, state, "--ignore-preflight", "nouveau")
    assert r.rc == 1, r.output
    assert "preflight failed: 3 problem(s) on cp, w1, w2; nothing was changed" in r.stderr, r.stderr
    flat = " ".join(r.stdout.split())
    assert "P24-package-sources" in flat and "/nowhere/v1.35/deb/InRelease (direct): HTTP 404" in flat, r.stdout
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
    for h in bed.hosts:
        assert h.run("kubeadm version -o short", check=True).stdout.strip() == f"v{OLD}", h.name

    # 6. a host whose sshd is down before the run: stopped at the host-key gate, nothing runs
    w2.stop_sshd()
    r = up(cfg, state, "--ignore-preflight", "nouveau")
    assert r.rc == 1 and "cannot reach SSH" in r.stderr and w2.address in r.stderr, r.output
    w2.start_sshd()
    cluster.converged = True


def test_upgrade_1_35_to_1_36_on_three_hosts_interrupted_and_resumed(cluster: Cluster) -> None:
    cluster.require_converged()
    bed, cfg, state, shared = cluster.bed, cluster.cfg, cluster.state, cluster.shared
    for h in bed.hosts:
        assert h.run("kubeadm version -o short", check=True).stdout.strip() == f"v{OLD}"

    # `up` with the new version on the live cluster: refused before anything changes
    newer = yaml.safe_load(cfg.read_text())
    newer["versions"]["kubernetes"] = "1.36"
    cfg136 = cluster.work / "gpustack-136.yaml"
    cfg136.write_text(yaml.safe_dump(newer))
    refused = up(cfg136, state, *IGNORE_NOUVEAU)
    assert refused.rc == 2, refused.output
    assert f"gpustack upgrade --to {NEW}" in refused.stderr
    assert bed.hosts[0].run("kubeadm version -o short", check=True).stdout.strip() == f"v{OLD}"

    # Ctrl-C right after `kubeadm upgrade apply` finished on cp, before Ansible saw its result
    t_intr = time.monotonic()
    interrupted = interrupt_after_apply(cfg, state, shared)
    assert interrupted.returncode == 130, interrupted.stdout + interrupted.stderr
    assert json.loads((shared / "api.json").read_text())["version"] == f"v{NEW}", "the apply itself finished"
    cp_steps = json.loads(bed.host("cp").sudo("cat /var/lib/gpustack/upgrade.json", check=True).stdout)
    assert cp_steps == {"target": NEW, "steps": ["kubeadm"]}, "the apply is not recorded"
    assert json.loads((state / "clusters" / "gpustack" / "upgrade.json").read_text())["status"] == "running"
    wait_no_module(bed.host("cp"))
    print(f"test_upgrade: the interrupted run took {time.monotonic() - t_intr:.1f}s")

    # resumed, and failed: kubeadm upgrade node fails once on the last worker
    (shared / "fail-once" / "w2-upgrade-node").write_text("")
    first = run_gpustack(cfg, state, "upgrade", "--to", "1.36", "--yes", *IGNORE_NOUVEAU)
    assert first.rc == 1, first.output
    assert "continues" in first.stderr
    # the API server already ran the target: the resumed run did not apply again
    assert count(events(shared), "cp", "kubeadm", "upgrade", "apply") == 1
    progress = json.loads((state / "clusters" / "gpustack" / "upgrade.json").read_text())
    assert (progress["status"], progress["from"], progress["to"]) == ("failed", OLD, NEW)
    assert {n: v["status"] for n, v in progress["nodes"].items()} == {"cp": "done", "w1": "done", "w2": "pending"}
    w2_record = json.loads(bed.host("w2").sudo("cat /var/lib/gpustack/upgrade.json", check=True).stdout)
    assert w2_record == {"target": NEW, "steps": ["kubeadm"]}
    # the half-done worker stays cordoned until its upgrade finishes
    assert json.loads((shared / "nodes" / "w2.json").read_text())["unschedulable"] is True

    # w1 as a run interrupted between its marker and its records leaves it: its marker names the
    # target, its own progress lacks "done", this machine's record still says pending
    bed.host("w1").sudo(
        """python3 -c 'import json; p="/var/lib/gpustack/upgrade.json"; d=json.load(open(p)); """
        """d["steps"].remove("done"); json.dump(d, open(p, "w"))'""",
        check=True,
    )
    local = state / "clusters" / "gpustack" / "upgrade.json"
    torn = json.loads(local.read_text())
    torn["nodes"]["w1"] = {**torn["nodes"]["w1"], "status": "pending", "version": OLD}
    local.write_text(json.dumps(torn))

    # resumed: the same command continues with w2; cp and w1 are not touched again
    second = run_gpustack(cfg, state, "upgrade", "--to", "1.36", "--yes", *IGNORE_NOUVEAU)
    assert second.rc == 0, second.output
    evs = events(shared)
    assert count(evs, "cp", "kubeadm", "upgrade", "apply") == 1
    assert count(evs, "cp", "kubectl", "drain", "w1") == 1
    assert count(evs, "w2", "kubeadm", "upgrade", "node") == 2  # the failed one and the resumed one

    # the order: plan and apply on the control plane, then each worker in turn, one at a time
    plan_at = index(evs, "cp", "kubeadm", "upgrade", "plan")
    apply_at = index(evs, "cp", "kubeadm", "upgrade", "apply")
    assert plan_at < apply_at < index(evs, "cp", "kubectl", "drain", "cp")
    for w in ("w1", "w2"):
        drain = index(evs, "cp", "kubectl", "drain", w)
        node = index(evs, w, "kubeadm", "upgrade", "node", last=True)
        uncordon = index(evs, "cp", "kubectl", "uncordon", w, last=True)
        assert apply_at < drain < node < uncordon, w
    assert index(evs, "cp", "kubectl", "uncordon", "w1") < index(evs, "cp", "kubectl", "drain", "w2")

    for h in bed.hosts:
        versions = h.run("dpkg-query -W -f='${Package}=${Version} ' kubeadm kubelet kubectl", check=True).stdout
        assert sorted(versions.split()) == [f"kubeadm={NEW}-1.1", f"kubectl={NEW}-1.1", f"kubelet={NEW}-1.1"], h.name
        assert set(h.run("apt-mark showhold", check=True).stdout.split()) >= {"kubeadm", "kubelet", "kubectl"}
        assert "/v1.36/deb/" in h.sudo("cat /etc/apt/sources.list.d/kubernetes.list", check=True).stdout
        marker = json.loads(h.sudo("cat /etc/gpustack/installed.json", check=True).stdout)
        assert marker["kubernetes_version"] == NEW and marker["managed_by"] == "gpustack"
        node = json.loads((shared / "nodes" / f"{h.name}.json").read_text())
        assert (node["kubelet"], node["ready"], node["unschedulable"]) == (f"v{NEW}", True, False), h.name
    assert json.loads((shared / "api.json").read_text())["version"] == f"v{NEW}"
    done = json.loads((state / "clusters" / "gpustack" / "upgrade.json").read_text())
    assert done["status"] == "done" and done["attempts"] == 3 and done["started"] == progress["started"]
    assert {n: v["status"] for n, v in done["nodes"].items()} == {"cp": "done", "w1": "done", "w2": "done"}
    for h in bed.hosts:  # every node's own record ends with "done", w1's too
        steps = json.loads(h.sudo("cat /var/lib/gpustack/upgrade.json", check=True).stdout)["steps"]
        assert steps[-1] == "done" and steps.count("done") == 1, (h.name, steps)

    # a converged re-run changes nothing on the hosts: every node is at the target (preflight's
    # read-only probes still call `kubectl get`, and the host facts `kubelet --version`)
    third = run_gpustack(cfg, state, "upgrade", "--to", "1.36", "--yes", *IGNORE_NOUVEAU)
    assert third.rc == 0, third.output
    new = events(shared)[len(evs) :]
    assert [e for e in new if e["tool"] == "kubeadm" or not {"drain", "uncordon", "cordon"}.isdisjoint(e["argv"])] == []
    read_only = [e for e in new if (e["tool"], e["argv"][:1]) == ("kubelet", ["--version"])]
    assert read_only, "the preflight's facts read each kubelet's version"
    assert all(e["tool"] == "kubectl" and "get" in e["argv"] for e in new if e not in read_only), new


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
    """`gpustack upgrade --to 1.36`, SIGINT once the kubeadm double on cp finished `upgrade apply`
    (it waits in its hold until the hold is lifted: the apply done, its result not yet returned)."""
    (shared / "hold").mkdir(exist_ok=True)
    (shared / "hold" / "cp-upgrade-apply").write_text("")
    env = {**os.environ, "GPUSTACK_STATE_DIR": str(state), "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("GPUSTACK_CONFIG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpustack", "upgrade", "--to", "1.36", "--yes", *IGNORE_NOUVEAU, "-c", str(cfg)],
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
