"""The kubeadm/kubelet/kubectl TEST DOUBLES enforce the order a real upgrade needs, across hosts
that share one cluster directory (the test bed bind-mounts it into every host): `upgrade apply`
only to this kubeadm's version and one minor at a time, `upgrade node` only after `apply`, a
kubelet newer than the API server refused, drain/uncordon seen by `get node -o json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import DOUBLES

from gpustack.config.model import Config, Node
from gpustack.render.kubeadm import render_init_config


class Host:
    def __init__(self, base: Path, name: str, cluster: Path, version: str) -> None:
        self.name, self.root, self.cluster = name, base / name, cluster
        (self.root / "usr/share/gpustack-doubles").mkdir(parents=True)
        self.set_version(version)

    def set_version(self, version: str) -> None:  # a package upgrade
        (self.root / "usr/share/gpustack-doubles/version").write_text(version + "\n")

    def run(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = dict(
            os.environ,
            GPUSTACK_DOUBLES_ROOT=str(self.root),
            GPUSTACK_DOUBLES_CLUSTER=str(self.cluster),
            GPUSTACK_DOUBLES_HOST=self.name,
        )
        return subprocess.run(
            [sys.executable, str(DOUBLES / name), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )


def kubelet_start(h: Host) -> subprocess.CompletedProcess[str]:
    """Start the kubelet double long enough to register (it then sleeps until stopped)."""
    env = dict(os.environ, GPUSTACK_DOUBLES_ROOT=str(h.root), GPUSTACK_DOUBLES_CLUSTER=str(h.cluster),
               GPUSTACK_DOUBLES_HOST=h.name)  # fmt: skip
    try:
        return subprocess.run([sys.executable, str(DOUBLES / "kubelet")], env=env, capture_output=True, text=True,
                              timeout=2, check=False)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(exc.cmd, 0, "", "")


def node(cp: Host, name: str) -> dict[str, object]:
    r = cp.run("kubectl", "--kubeconfig", str(cp.root / "etc/kubernetes/admin.conf"), "get", "node", name, "-o", "json")
    assert r.returncode == 0, r.stderr
    obj: dict[str, object] = json.loads(r.stdout)
    return obj


def test_upgrade_order_is_enforced_across_hosts(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    cp, w = Host(tmp_path, "cp1", cluster, "1.35.8"), Host(tmp_path, "w1", cluster, "1.35.8")
    cfg = Config(
        nodes=[Node(name="cp1", address="10.10.0.2", role="control-plane"), Node(name="w1", address="10.10.0.3")]
    )
    (tmp_path / "kubeadm.yaml").write_text(render_init_config(cfg))
    assert cp.run("kubeadm", "init", "--config", str(tmp_path / "kubeadm.yaml")).returncode == 0
    join = cp.run("kubeadm", "token", "create", "--print-join-command").stdout.split()[1:]
    assert w.run("kubeadm", *join, "--node-name", "w1").returncode == 0
    kubelet_start(cp), kubelet_start(w)
    assert node(cp, "w1")["status"]["nodeInfo"]["kubeletVersion"] == "v1.35.8"  # type: ignore[index]

    # a kubelet newer than the API server is refused
    w.set_version("1.36.4")
    refused = kubelet_start(w)
    assert refused.returncode == 1 and "newer than the API server" in refused.stderr
    assert node(cp, "w1")["status"]["conditions"] == [{"type": "Ready", "status": "False"}]  # type: ignore[index]
    # kubeadm upgrade node before apply: refused
    before = w.run("kubeadm", "upgrade", "node")
    assert before.returncode == 1 and "upgrade apply" in before.stderr

    # apply: only to this kubeadm's version, only with --yes, never skipping a minor
    assert "higher than the kubeadm version" in cp.run("kubeadm", "upgrade", "apply", "v1.36.4", "--yes").stderr
    cp.set_version("1.36.4")
    assert cp.run("kubeadm", "upgrade", "plan", "v1.36.4").returncode == 0
    assert "--yes" in cp.run("kubeadm", "upgrade", "apply", "v1.36.4").stderr
    ok = cp.run("kubeadm", "upgrade", "apply", "v1.36.4", "--yes")
    assert ok.returncode == 0 and "SUCCESS" in ok.stdout
    assert json.loads((cluster / "api.json").read_text())["version"] == "v1.36.4"
    assert "# version: v1.36.4" in (cp.root / "etc/kubernetes/manifests/kube-apiserver.yaml").read_text()

    # now the worker may follow: drain, upgrade node, kubelet, uncordon
    kubeconfig = str(cp.root / "etc/kubernetes/admin.conf")
    assert "--ignore-daemonsets" in cp.run("kubectl", "--kubeconfig", kubeconfig, "drain", "w1").stderr
    assert cp.run("kubectl", "--kubeconfig", kubeconfig, "drain", "w1", "--ignore-daemonsets").returncode == 0
    assert node(cp, "w1")["spec"]["unschedulable"] is True  # type: ignore[index]
    assert w.run("kubeadm", "upgrade", "node").returncode == 0
    assert kubelet_start(w).returncode == 0
    assert node(cp, "w1")["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.4"  # type: ignore[index]
    assert cp.run("kubectl", "--kubeconfig", kubeconfig, "uncordon", "w1").returncode == 0
    assert node(cp, "w1")["spec"]["unschedulable"] is False  # type: ignore[index]

    events = [
        (e["host"], e["tool"], e["argv"][:2])
        for e in map(json.loads, (cluster / "events.log").read_text().splitlines())
    ]
    # every call on every host in one log: the refused `upgrade node`, then apply, then the accepted one
    nodes = [i for i, e in enumerate(events) if e == ("w1", "kubeadm", ["upgrade", "node"])]
    applies = [i for i, e in enumerate(events) if e == ("cp1", "kubeadm", ["upgrade", "apply"])]
    assert nodes[0] < applies[0] < applies[-1] < nodes[-1]


def test_a_skipped_minor_and_a_downgrade_are_refused_by_kubeadm(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    cp = Host(tmp_path, "cp1", cluster, "1.34.11")
    cfg = Config(nodes=[Node(name="cp1", address="10.10.0.2", role="control-plane")])
    (tmp_path / "kubeadm.yaml").write_text(render_init_config(cfg))
    assert cp.run("kubeadm", "init", "--config", str(tmp_path / "kubeadm.yaml")).returncode == 0
    cp.set_version("1.36.4")
    skipped = cp.run("kubeadm", "upgrade", "apply", "v1.36.4", "--yes")
    assert skipped.returncode == 1 and "only 1 minor version at a time" in skipped.stderr
    down = cp.run("kubeadm", "upgrade", "apply", "v1.33.0", "--yes")
    assert down.returncode == 1 and "downgrades are not supported" in down.stderr


def test_fail_once_fails_exactly_once(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    (cluster / "fail-once").mkdir(parents=True)
    (cluster / "api.json").write_text(json.dumps({"version": "v1.36.4"}))
    w = Host(tmp_path, "w1", cluster, "1.36.4")
    (w.root / "etc/kubernetes").mkdir(parents=True)
    (w.root / "etc/kubernetes/kubelet.conf").write_text("x")
    (cluster / "fail-once" / "w1-upgrade-node").write_text("")
    assert w.run("kubeadm", "upgrade", "node").returncode == 1
    assert w.run("kubeadm", "upgrade", "node").returncode == 0


def test_a_control_plane_joins_with_the_uploaded_certificate_key(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    cp1, cp2 = Host(tmp_path, "cp1", cluster, "1.36.4"), Host(tmp_path, "cp2", cluster, "1.36.4")
    cfg = Config(
        nodes=[
            Node(name="cp1", address="10.10.0.2", role="control-plane"),
            Node(name="cp2", address="10.10.0.3", role="control-plane"),
        ]
    )
    (tmp_path / "kubeadm.yaml").write_text(render_init_config(cfg))
    assert cp1.run("kubeadm", "init", "--config", str(tmp_path / "kubeadm.yaml"), "--upload-certs").returncode == 0
    up = cp1.run("kubeadm", "init", "phase", "upload-certs", "--upload-certs")
    key = up.stdout.split()[-1]
    assert up.returncode == 0 and len(key) == 64
    join = cp1.run("kubeadm", "token", "create", "--print-join-command").stdout.split()[1:]
    wrong = cp2.run("kubeadm", *join, "--control-plane", "--certificate-key", "0" * 64, "--node-name", "cp2")
    assert wrong.returncode == 1 and "authentication failed" in wrong.stderr
    ok = cp2.run(
        "kubeadm", *join, "--control-plane", "--certificate-key", key, "--apiserver-advertise-address", "10.10.0.3",
        "--node-name", "cp2",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert (cp2.root / "etc/kubernetes/admin.conf").is_file()
    assert (cp2.root / "etc/kubernetes/manifests/etcd.yaml").is_file()
    assert json.loads((cluster / "nodes" / "cp2.json").read_text())["roles"] == ["control-plane"]
