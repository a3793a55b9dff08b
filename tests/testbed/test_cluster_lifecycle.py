"""The life of a three-host cluster (cp the control plane, w1 and w2 workers) on one set of real
hosts, in order: a fresh three-host `up` costs minutes on the 2-core CI machine, so each step starts
from the cluster the one before left instead of building its own.

1. `gpustack up` (Kubernetes 1.35) through the failures users meet: unknown host keys, a preflight
   error, a failing apt source, a host whose sshd dies mid-way; then converged, and a host whose
   sshd is down stops the run at the host-key gate.
2. The hosts' own firewalls beside gpustack's chain: ufw on w1, firewalld on cp (the tests of `up`
   on a host that already runs a host firewall).
3. `gpustack upgrade --to 1.36` of that cluster: refused by `up`, then control plane first and the
   workers one at a time; interrupted by Ctrl-C right after `kubeadm upgrade apply` finished
   (before its step was recorded: the resumed run must not apply again), then failed (kubeadm
   upgrade node fails once on the last worker), and resumed by running the same command again. A
   worker left as a run interrupted between its marker and its records leaves it gets its records.

The `cluster` fixture (module scope) boots the hosts and holds what step 1 leaves: ``converged``
is None before it ran, False if it failed, True once the cluster converged. Steps 2 and 3 on their
own (node id) converge the cluster with one plain `up` first; after a failed step 1 they fail at
once, naming it, rather than test a half-built cluster.

kubeadm/kubelet/kubectl/helm are TEST DOUBLES; everything else on the hosts is real. A directory
bind-mounted into every host plays the API server (tests/testbed/doubles: the cluster version, each
node's kubelet version and schedulability, one event log across hosts), and the doubles refuse what
the real tools refuse: `upgrade node` before `upgrade apply`, a skipped minor, a kubelet newer than
the API server. Two apt repositories (v1.35, v1.36) signed by one key, as pkgs.k8s.io's are.
The hosts as many real servers come: cp runs firewalld; w1 runs ufw and has the nouveau module loaded
(a preflight error every run here ignores once step 1 has seen it stop the run); w2 has a swap line in
fstab and an iptables rule of its own."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpustack.config import pins

from .cluster import doubles_log, run_gpustack, up, write_config
from .hosts import Host, Testbed
from .lifecycle import (
    ETCD_RULE,
    GONE,
    IGNORE_NOUVEAU,
    POD_CIDR,
    assert_our_chain,
    count,
    events,
    firewalld_zone,
    index,
    interrupt_after_apply,
    untouched,
    up_interrupted,
    wait_no_module,
)
from .prepare import boot_iptables_rule, compose, enable_firewalld, enable_ufw, fake_loaded_modules, fstab_swap
from .realkubeadm import with_real_kubeadm
from .services import HttpServer, Sources, build_k8s_repo

NAMES = ["cp", "w1", "w2"]  # cp: control plane
SHARED = "/var/lib/gpustack-doubles-cluster"
OLD, NEW = pins.KUBERNETES["1.35"], pins.KUBERNETES["1.36"]  # the pinned patches of the two minors

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
    #: before any run: ufw's jumps in w1's INPUT, and cp's firewalld default zone (``firewall-cmd --list-all``)
    ufw_jumps_before: list[str]
    default_zone: str
    default_zone_before: str
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
        # firewalld (re)starting replaces iptables rules added before it: the host's own rule lives on w2
        "cp": enable_firewalld(),
        "w1": compose(fake_loaded_modules(["nouveau"]), enable_ufw("default deny incoming", "allow 22/tcp")),
        "w2": compose(fstab_swap(), boot_iptables_rule(*FOREIGN_RULE)),
    }
    nspawn_args = with_real_kubeadm(NAMES, {n: [f"--bind={shared}:{SHARED}"] for n in NAMES})
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
        ufw_jumps, zone, zone_before = host_firewalls_before(bed.host("cp"), bed.host("w1"))
        yield Cluster(
            bed, work, shared, cfg, known_hosts, work / "state", http_server.url, ufw_jumps, zone, zone_before
        )


def host_firewalls_before(cp: Host, w1: Host) -> tuple[list[str], str, str]:
    """The hosts' own firewalls as they booted: ufw active on w1 (its jumps in INPUT returned), firewalld
    running on cp with the nftables backend (its default zone and that zone's settings returned) and a
    ``gpustack`` zone as an earlier gpustack left it with a node that has since left the cluster (node
    remove, or taken out of gpustack.yaml): its address bound, its etcd rule there."""
    status = w1.sudo("ufw status verbose", check=True).stdout
    assert "Status: active" in status and "deny (incoming)" in status, status
    ufw_jumps = [r for r in w1.sudo("iptables -w -S INPUT", check=True).stdout.splitlines() if "-j ufw-" in r]
    assert ufw_jumps, "ufw hooked its chains into INPUT"
    state = cp.sudo("firewall-cmd --state", check=False)
    if state.stdout.strip() != "running":
        journal = cp.sudo("journalctl -b -u firewalld --no-pager | tail -40", check=False).stdout
        pytest.fail(f"firewalld is not running on cp: {state.stdout}{state.stderr}\n{journal}")
    backend = cp.sudo("grep -E '^FirewallBackend=' /etc/firewalld/firewalld.conf", check=True).stdout.strip()
    assert backend == "FirewallBackend=nftables"
    zone = cp.sudo("firewall-cmd --get-default-zone", check=True).stdout.strip()
    zone_before = cp.sudo(f"firewall-cmd --zone={zone} --list-all", check=True).stdout
    cp.sudo(
        "firewall-cmd --permanent --new-zone=gpustack && firewall-cmd --permanent --zone=gpustack"
        f" --add-source={GONE} && firewall-cmd --permanent --zone=gpustack --add-rich-rule='{ETCD_RULE.format(GONE)}'"
        " && firewall-cmd --reload",
        check=True,
    )
    return ufw_jumps, zone, zone_before


def test_three_nodes_through_failures_to_convergence(cluster: Cluster) -> None:
    bed, cfg, state, known_hosts = cluster.bed, cluster.cfg, cluster.state, cluster.known_hosts
    cp, w1, w2 = bed.hosts
    cluster.converged = False  # until the end of this test: the later steps start from its cluster

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
    w2_rules = w2.sudo("iptables -S INPUT", check=True).stdout
    assert "users-own-rule" in w2_rules
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


def test_hosts_firewalls_ufw_and_firewalld_kept_beside_gpustacks_chain(cluster: Cluster) -> None:
    """The cluster step 1 built, on hosts that already ran a host firewall: ufw active on w1 (deny
    incoming, SSH allowed), firewalld on cp (nftables backend, which filters in its own nftables table
    as well). The firewall role keeps its own iptables chain GPUSTACK-INPUT behind one jump at the top of
    INPUT: with ufw that jump precedes ufw's chains and leaves ufw's own rules alone; with firewalld the
    role also binds the pod network and the node addresses to a firewalld zone ``gpustack`` that opens
    the cluster ports, and forgets a node that left. Both firewalls are installed in the bed's root but
    masked; the fixture's prepare hooks enable one at boot."""
    cluster.require_converged()
    bed = cluster.bed
    cp, w1 = bed.host("cp"), bed.host("w1")
    nodes = {h.address for h in bed.hosts}

    # --- ufw (w1). INPUT: policy, our jump, then ufw's jumps unchanged and in their order
    input_rules = assert_our_chain(w1)
    assert input_rules[0] == "-P INPUT DROP", input_rules
    assert [r for r in input_rules if "-j ufw-" in r] == cluster.ufw_jumps_before
    assert all(i > 1 for i, r in enumerate(input_rules) if "-j ufw-" in r)
    # ufw still active with its own rules
    status = w1.sudo("ufw status verbose", check=True).stdout
    assert "Status: active" in status and "deny (incoming)" in status, status
    assert any(line.startswith("22/tcp") and "ALLOW IN" in line for line in status.splitlines()), status
    assert w1.sudo("iptables -w -S ufw-user-input", check=True).stdout.count("--dport 22") >= 1

    # --- firewalld (cp, the control plane)
    assert cp.sudo("firewall-cmd --state", check=True).stdout.strip() == "running"
    for permanent in (True, False):
        zone = firewalld_zone(cp, permanent=permanent)
        assert set(zone["sources"]) == {POD_CIDR, *nodes}, (permanent, zone)
        assert {"6443/tcp", "10250/tcp", "8472/udp"} <= set(zone["ports"]), (
            permanent,
            zone,
        )
        # the nodes keep SSH (they left the default zone); pods and nodes may forward to each other
        assert "ssh" in zone["services"] and zone["forward"] == ["yes"], (permanent, zone)
        # the node that left is accepted no more: only the control-plane node (cp) has etcd's rule
        flag = "--permanent " if permanent else ""
        rules = cp.sudo(f"firewall-cmd {flag}--zone=gpustack --list-rich-rules", check=True).stdout.splitlines()
        assert rules == [ETCD_RULE.format(cp.address)], (permanent, rules)
    # firewalld's own nftables table carries the zone (no nft CLI in the root: libnftables)
    list_table = "import nftables; print(nftables.Nftables().cmd('list table inet firewalld')[1])"
    ruleset = cp.sudo(f'python3 -c "{list_table}"', check=True).stdout
    assert "gpustack" in ruleset and POD_CIDR in ruleset
    # the default zone keeps what it had (ssh ...); no NodePorts (monitoring is not exposed by default);
    # the API server's port for the machine gpustack runs from (the bridge address), one rich rule
    default_after = cp.sudo(f"firewall-cmd --zone={cluster.default_zone} --list-all", check=True).stdout
    services = next(line for line in cluster.default_zone_before.splitlines() if line.strip().startswith("services:"))
    assert services in default_after
    assert "30090/tcp" not in default_after
    assert 'rule family="ipv4" source address="10.213.0.1" port port="6443" protocol="tcp" accept' in default_after
    # ...and our iptables chain is there as well
    assert_our_chain(cp)

    # --- ufw reloading its rules (stop + start of its chains) leaves our jump on top; a converged run
    # changes nothing and keeps both firewalls as they are
    w1.sudo("ufw reload", check=True)
    assert_our_chain(w1)
    again = up(cluster.cfg, cluster.state, *IGNORE_NOUVEAU)
    assert again.rc == 0, again.output
    assert all(v == 0 for v in again.changed().values()), again.changed()
    assert_our_chain(w1)
    assert_our_chain(cp)
    assert set(firewalld_zone(cp, permanent=False)["sources"]) == {POD_CIDR, *nodes}


def test_upgrade_1_35_to_1_36_on_three_hosts_interrupted_and_resumed(cluster: Cluster) -> None:
    cluster.require_converged()
    bed, cfg, state, shared = cluster.bed, cluster.cfg, cluster.state, cluster.shared
    # the cluster the steps before left: every host at 1.35
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
    # --no-snapshot: the snapshot stage runs on the bed in test_up_single.py's reset (the crictl double finds the etcd
    # container since crictl is installed from its release archive, docs/testing.md); not rerun here with it yet
    first = run_gpustack(cfg, state, "upgrade", "--to", "1.36", "--yes", "--no-snapshot", *IGNORE_NOUVEAU)
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
    second = run_gpustack(cfg, state, "upgrade", "--to", "1.36", "--yes", "--no-snapshot", *IGNORE_NOUVEAU)
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

    # a converged re-run upgrades nothing: every node is at the target (preflight's read-only probes still call
    # `kubectl get`, the host facts `kubelet --version` and, on the control plane, the real kubeadm's
    # `certs check-expiration`); an upgrade to the version the cluster runs renews the control plane's certificates
    # (docs/lifecycle.md: the real kubeadm's `certs renew all`, the containers restarted through crictl) unless the
    # first resumed run renewed them under 2 minutes before (gpustack/cluster/renewal.py counts them renewed).
    # It takes its etcd snapshot first (issue 27: before every upgrade), through the etcd container's etcdctl on cp
    # (the crictl double), fetched into this machine's state directory 0600
    snapshots = state / "clusters" / "gpustack" / "etcd-snapshots"
    kept = set(snapshots.glob("*.db")) if snapshots.is_dir() else set()
    third = run_gpustack(cfg, state, "upgrade", "--to", "1.36", "--yes", *IGNORE_NOUVEAU)
    assert third.rc == 0, third.output
    (taken,) = set(snapshots.glob("etcd-cp-*.db")) - kept
    assert taken.stat().st_mode & 0o777 == 0o600 and taken.stat().st_size > 0, taken
    crictl = doubles_log(bed.host("cp").sudo("cat /var/log/gpustack-doubles/crictl.log", check=True).stdout)
    assert any(c[:1] == ["exec"] and c[-3:-1] == ["snapshot", "save"] for c in crictl), crictl
    new = events(shared)[len(evs) :]
    checked = [e for e in new if e["argv"][:2] == ["certs", "check-expiration"]]
    assert {e["host"] for e in checked} == {"cp"}, "the preflight's certificate facts, on the control plane only"
    renewed = [e for e in new if e["tool"] == "kubeadm" and e["argv"][:3] == ["certs", "renew", "all"]]
    assert [e["host"] for e in renewed] in (["cp"], []), new
    acted = [e for e in new if e not in checked and e not in renewed]
    assert [
        e for e in acted if e["tool"] == "kubeadm" or not {"drain", "uncordon", "cordon"}.isdisjoint(e["argv"])
    ] == []
    read_only = [e for e in acted if (e["tool"], e["argv"][:1]) == ("kubelet", ["--version"])]
    assert read_only, "the preflight's facts read each kubelet's version"
    assert all(e["tool"] == "kubectl" and "get" in e["argv"] for e in acted if e not in read_only), new
