"""control-plane, workers, network and helm converge for real in a sandbox, twice.

See sandbox.py: private mount and network namespaces, overlays, TEST DOUBLES for kubeadm,
kubectl, kubelet and helm. Skipped where that is not possible (not root, no overlay). Set
GPUSTACK_SKIP_SANDBOX=1 to skip on purpose (each scenario takes about a minute).
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest
import yaml
from sandbox import Sandbox, available

from gpustack.config.model import Cluster, Config, Node
from gpustack.render.flannel import flannel_manifest

reason = available()
pytestmark = pytest.mark.skipif(reason is not None, reason=f"sandbox unavailable: {reason}")

TOKEN_RE = re.compile(r"[a-z0-9]{6}\.[a-z0-9]{16}")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def assert_converged(run: object) -> None:
    recap = run.recap()  # type: ignore[attr-defined]
    assert recap, run.output  # type: ignore[attr-defined]
    for host, counts in recap.items():
        assert counts["failed"] == 0 and counts["unreachable"] == 0, run.output  # type: ignore[attr-defined]
        assert counts["changed"] == 0, f"{host} not idempotent:\n{run.output}"  # type: ignore[attr-defined]


def cis_file_verdicts(box: Sandbox) -> set[str]:
    """doctor's CIS file checks over the control plane's files as the facts module reads them (its ``describe``)."""
    from conftest import PLAYBOOKS, load_path

    from gpustack.diagnose import checks_security_files as files
    from gpustack.diagnose.snapshot import Snapshot

    collector = load_path("gpustack_cis_files", PLAYBOOKS / "module_utils/gpustack_cis_files.py")
    found = {p: collector.describe(box.cp_file(p).stat()) for p in collector.FILES if box.cp_file(p).exists()}
    pki = box.cp_file(collector.PKI)
    tree = {collector.PKI: collector.describe(pki.stat())}
    tree |= {f"{collector.PKI}/{q.relative_to(pki)}": collector.describe(q.stat()) for q in sorted(pki.rglob("*"))}
    snap = Snapshot(hosts={"cp1": {"cis_files": {"files": found, "pki": tree}}})
    return {f.status for rule in files.RULES if rule.cis != "1.1.12" for f in files.judge(rule, snap)} - {"skip"}


def test_single_node(tmp_path: Path) -> None:
    cfg = Config(
        nodes=[Node(name="cp1", address="10.10.0.2", role="control-plane")],
        cluster=Cluster(flannel_iface="eth9"),
    )
    box = Sandbox(tmp_path / "sb", cfg)
    first = box.converge()
    assert first.rc == 0, first.output
    assert first.recap()["cp1"]["changed"] > 0

    # control plane
    kubeadm_cfg = box.cp_file("/etc/gpustack/kubeadm-config.yaml")
    assert mode(kubeadm_cfg) == 0o600
    assert (
        kubeadm_cfg.read_text() == yaml.safe_load((box.base / "extravars.json").read_text())["gpustack_kubeadm_config"]
    )
    # the API server's hardening files (gpustack/render/security.py): root's, 0600 in 0700 directories
    ev = yaml.safe_load((box.base / "extravars.json").read_text())
    enc = box.cp_file("/etc/kubernetes/enc/encryption-config.yaml")
    assert enc.read_text() == ev["gpustack_encryption_config"] and "secretbox" in enc.read_text()
    assert "REDACTED" not in enc.read_text()
    for path, text in ev["gpustack_security_files"].items():
        assert box.cp_file(path).read_text() == text
    for path in [enc, *(box.cp_file(p) for p in ev["gpustack_security_files"])]:
        assert (mode(path), mode(path.parent)) == (0o600, 0o700), path
    assert mode(box.cp_file("/var/log/kubernetes/audit")) == 0o700
    marker = json.loads(box.cp_file("/etc/gpustack/installed.json").read_text())
    assert marker == {
        "cluster_name": "gpustack",
        "control_plane": "cp1",
        "kubernetes_version": cfg.versions.kubernetes,
        "managed_by": "gpustack",
        "pod_cidr": "10.244.0.0/16",
        "service_cidr": "10.96.0.0/12",
    }
    admin = box.cp_file("/etc/kubernetes/admin.conf").read_text()
    user_kubeconfig = box.cp_file("/root/.kube/config")
    assert user_kubeconfig.read_text() == admin and mode(user_kubeconfig) == 0o600
    assert box.kubeconfig_dest.read_text() == admin and mode(box.kubeconfig_dest) == 0o600
    inits = [a for a in box.doubles_log("kubeadm") if a[:1] == ["init"]]
    assert inits == [["init", "--config", "/etc/gpustack/kubeadm-config.yaml", "--skip-token-print"]]
    # single node: no control-plane taint (kubeadm skipped it: taints: [])
    node = json.loads(box.cp_file("/var/lib/gpustack-doubles/nodes/cp1.json").read_text())
    assert node["taints"] == []

    # network
    manifest = box.cp_file("/etc/gpustack/flannel/kube-flannel.yml").read_text()
    assert manifest == flannel_manifest(cfg), "gpustack's rendering, written as it is (nothing downloaded)"
    assert "--iface=eth9" in manifest
    assert not list(box.cp_file("/etc/gpustack/flannel").glob("upstream-*"))
    applies = [a for a in box.doubles_log("kubectl") if "apply" in a]
    assert len(applies) == 1

    # helm
    helm = box.cp_file("/usr/local/bin/helm")
    assert mode(helm) == 0o755

    # CIS file checks (doctor's security layer) on the files the control plane has now: kubeadm's config.yaml
    # (0644, as the real kubeadm writes it) made 0600 by the role; nothing fails
    assert mode(box.cp_file("/var/lib/kubelet/config.yaml")) == 0o600
    assert cis_file_verdicts(box) == {"pass"}

    second = box.converge()
    assert second.rc == 0, second.output
    assert_converged(second)
    assert len([a for a in box.doubles_log("kubeadm") if a[:1] == ["init"]]) == 1
    # kubectl apply runs every time, and reports "unchanged"
    assert len([a for a in box.doubles_log("kubectl") if "apply" in a]) == 2
    assert not TOKEN_RE.search(first.output + second.output)


def test_single_node_repairs_a_tainted_control_plane(tmp_path: Path) -> None:
    cfg = Config(nodes=[Node(name="cp1", address="10.10.0.2", role="control-plane")])
    box = Sandbox(tmp_path / "sb", cfg)
    assert box.converge("control-plane").rc == 0
    state = box.cp_file("/var/lib/gpustack-doubles/nodes/cp1.json")
    node = json.loads(state.read_text())
    node["taints"] = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    state.write_text(json.dumps(node))
    run = box.converge("control-plane")
    assert run.rc == 0, run.output
    assert run.recap()["cp1"]["changed"] == 1, run.output
    assert json.loads(state.read_text())["taints"] == []
    assert_converged(box.converge("control-plane"))


def test_control_plane_and_two_workers(tmp_path: Path) -> None:
    cfg = Config(
        nodes=[
            Node(name="cp1", address="10.10.0.2", role="control-plane"),
            Node(name="w1", address="10.10.0.3"),
            Node(name="w2", address="10.10.0.4"),
        ]
    )
    box = Sandbox(tmp_path / "sb", cfg)
    first = box.converge()
    assert first.rc == 0, first.output

    # multi-node: the control plane keeps its taint
    node = json.loads(box.cp_file("/var/lib/gpustack-doubles/nodes/cp1.json").read_text())
    assert node["taints"] == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    assert not any(a[:1] == ["taint"] for a in box.doubles_log("kubectl"))

    # one token for both workers, made on the control plane
    tokens = [a for a in box.doubles_log("kubeadm") if a[:2] == ["token", "create"]]
    assert tokens == [["token", "create", "--print-join-command", "--ttl", "30m"]]
    for w in ("w1", "w2"):
        joins = [a for a in box.doubles_log("kubeadm", worker=w) if a[:1] == ["join"]]
        assert len(joins) == 1
        assert joins[0][1] == "10.10.0.2:6443"
        assert joins[0][-4:] == [
            "--node-name",
            w,
            "--cri-socket",
            "unix:///run/containerd/containerd.sock",
        ]
        assert box.worker_file(w, "/etc/kubernetes/kubelet.conf").exists()
        assert json.loads(box.worker_file(w, "/var/lib/gpustack-doubles/join.json").read_text())["node_name"] == w
    # the token never shows in Ansible's output
    assert not TOKEN_RE.search(first.output), first.output

    second = box.converge()
    assert second.rc == 0, second.output
    assert_converged(second)
    assert len([a for a in box.doubles_log("kubeadm") if a[:2] == ["token", "create"]]) == 1


def test_firewall_disabled_removes_only_our_chain(tmp_path: Path) -> None:
    """firewall.enabled: false deletes GPUSTACK-INPUT, GPUSTACK-PREROUTING and their jumps, nothing else.

    (The enabled path needs systemd for its unit: covered by the nspawn testbed; the script
    itself is tested in test_firewall_script.py.) Through Ansible's linear strategy (``ssh.mitogen: false``);
    the other sandbox runs go through Mitogen, as `up` runs its stages by default.
    """
    cfg = Config(nodes=[Node(name="cp1", address="10.10.0.2", role="control-plane")])
    box = Sandbox(tmp_path / "sb", cfg, mitogen=False)
    before = """
        iptables -w -P INPUT DROP
        iptables -w -A INPUT -p tcp --dport 22 -j ACCEPT
        iptables -w -N GPUSTACK-INPUT
        iptables -w -A GPUSTACK-INPUT -p tcp --dport 6443 -j ACCEPT
        iptables -w -A GPUSTACK-INPUT -j RETURN
        iptables -w -I INPUT 1 -j GPUSTACK-INPUT
        iptables -w -t mangle -N GPUSTACK-PREROUTING
        iptables -w -t mangle -A GPUSTACK-PREROUTING -p tcp --dport 30000:32767 -j DROP
        iptables -w -t mangle -I PREROUTING 1 -j GPUSTACK-PREROUTING
        iptables -w -t mangle -A PREROUTING -p tcp --dport 7777 -j MARK --set-mark 7
        mkdir -p /usr/local/sbin && echo '#!/bin/sh' > /usr/local/sbin/gpustack-firewall
    """
    after = 'echo "== RULES"; iptables -w -S; echo "== MANGLE"; iptables -w -t mangle -S; echo "== END"'
    run = box.converge("firewall", extra={"gpustack_firewall_enabled": False}, before=before, after=after)
    assert run.rc == 0, run.output
    rules = run.output.split("== RULES\n")[1].split("== MANGLE")[0].splitlines()
    mangle = run.output.split("== MANGLE\n")[1].split("== END")[0].splitlines()
    assert [r for r in mangle if "PREROUTING" in r] == [
        "-P PREROUTING ACCEPT",
        "-A PREROUTING -p tcp -m tcp --dport 7777 -j MARK --set-xmark 0x7/0xffffffff",
    ], "the NodePort chain and its jump gone, the site's mangle rule kept"
    assert rules == [
        "-P INPUT DROP",
        "-P FORWARD ACCEPT",
        "-P OUTPUT ACCEPT",
        "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT",
    ]
    assert run.recap()["cp1"]["changed"] >= 3  # jump, flush, chain, script
    # the script (created in the sandbox by `before`) is gone again
    assert not box.cp_file("/usr/local/sbin/gpustack-firewall").exists()

    # nothing of ours left: a second run changes nothing
    again = box.converge(
        "firewall",
        extra={"gpustack_firewall_enabled": False},
        before="""
        iptables -w -P INPUT DROP
        iptables -w -A INPUT -p tcp --dport 22 -j ACCEPT
    """,
    )
    assert again.rc == 0, again.output
    assert_converged(again)
