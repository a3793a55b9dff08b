"""The testbed's kubeadm/kubectl/kubelet/helm TEST DOUBLES, run in a temporary root.

GPUSTACK_DOUBLES_ROOT prefixes every fixed path the doubles use, so they run here unprivileged
and leave nothing behind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DOUBLES

from gpustack.config import pins
from gpustack.config.model import Config, Node
from gpustack.render.flannel import flannel_manifest
from gpustack.render.kubeadm import render_init_config


def run(root: Path, name: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GPUSTACK_DOUBLES_ROOT=str(root))
    return subprocess.run(
        [sys.executable, str(DOUBLES / name), *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def kubeadm_config(tmp_path: Path, *, nodes: int) -> Path:
    cfg = Config(
        nodes=[Node(name="cp1", address="10.10.0.2", role="control-plane")]
        + [Node(name=f"w{i}", address=f"10.10.0.{i + 2}") for i in range(1, nodes)]
    )
    path = tmp_path / "kubeadm-config.yaml"
    path.write_text(render_init_config(cfg))
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "usr/share/gpustack-doubles").mkdir(parents=True)
    (r / "usr/share/gpustack-doubles/version").write_text("1.36.4\n")
    return r


def log(root: Path, name: str) -> list[list[str]]:
    return [json.loads(line) for line in (root / f"var/log/gpustack-doubles/{name}.log").read_text().splitlines()]


def test_all_doubles_are_labelled() -> None:
    for name in ("kubeadm", "kubectl", "kubelet", "helm", "crictl"):
        head = (DOUBLES / name).read_text().splitlines()[:5]
        assert head[0] == "#!/usr/bin/env python3"
        assert any("TEST DOUBLE" in line for line in head), name
        assert os.access(DOUBLES / name, os.X_OK), name


def test_crictl_gives_the_snapshot_module_a_file_it_verifies(root: Path, tmp_path: Path) -> None:
    """The etcd snapshot module (playbooks/module_utils/gpustack_etcd.py) against the crictl double: the container
    found only where the kubeadm double made the static pods' directory, and a snapshot laid out as etcd writes one (its
    sha256 at the end), which the module's own check accepts -- the real etcd's: tests/controlplane."""
    sys.path.insert(0, str(DOUBLES.parents[2] / "playbooks" / "module_utils"))
    import gpustack_etcd as ge

    def via_double(argv: list[str]) -> tuple[int, str, str]:
        assert argv[0] == "crictl"
        r = run(root, "crictl", *argv[1:])
        return r.returncode, r.stdout, r.stderr

    with pytest.raises(ge.SnapshotError, match="no running etcd container"):
        ge.crictl_etcdctl(via_double)
    (root / "etc/kubernetes/manifests").mkdir(parents=True)
    etcdctl = ge.crictl_etcdctl(via_double)
    assert etcdctl == ["crictl", "exec", "double-etcd", "etcdctl"]
    data = tmp_path / "etcd-data"  # made by the double, as by the kubelet for the static pod's hostPath
    taken = ge.take_snapshot(via_double, etcdctl, node="cp1", data_dir=str(data), dest_dir=str(tmp_path / "kept"))
    assert Path(taken["path"]).stat().st_mode & 0o777 == 0o600 and taken["size"] % 4096 == 32
    assert ge.verify_snapshot(taken["path"])["sha256"] == taken["sha256"]
    saves = [
        c for c in log(root, "crictl") if c[:4] == ["exec", "double-etcd", "etcdctl", f"--endpoints={ge.ENDPOINT}"]
    ]
    assert len(saves) == 1 and saves[0][-3:-1] == ["snapshot", "save"], log(root, "crictl")


def test_crictl_lists_and_stops_the_static_pods_certs_renew_restarts(root: Path) -> None:
    """The certs_renew role's `crictl ps --name REGEX` (its argv read from the role) lists the static pods whose
    manifests the kubeadm double wrote, and `crictl stop` prints the IDs it stopped (under GPUSTACK_DOUBLES_ROOT no
    API server stand-in is started: that is the test bed's, tests/testbed/test_up_single.py)."""
    import yaml

    role = DOUBLES.parents[2] / "playbooks" / "roles" / "certs_renew"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    tasks = yaml.safe_load((role / "tasks" / "main.yml").read_text())
    block = next(t for t in tasks if t.get("name") == "Restart the control-plane pods")["block"]
    argv = block[0]["ansible.builtin.command"]["argv"]
    names = "|".join(defaults["certs_renew_containers"])
    argv = [a.replace("{{ certs_renew_cri_endpoint }}", defaults["certs_renew_cri_endpoint"])
            .replace("{{ certs_renew_containers | join('|') }}", names) for a in argv]  # fmt: skip
    assert argv[0] == "crictl" and "{{" not in " ".join(argv), argv
    assert run(root, *argv).stdout == ""  # no control plane here
    (root / "etc/kubernetes/manifests").mkdir(parents=True)
    for m in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "not-ours"):
        (root / f"etc/kubernetes/manifests/{m}.yaml").write_text("kind: Pod\n")
    listed = run(root, *argv).stdout.split()
    assert listed == ["double-etcd", "double-kube-apiserver", "double-kube-controller-manager",
                      "double-kube-scheduler"]  # fmt: skip
    stopped = run(root, "crictl", "--runtime-endpoint", defaults["certs_renew_cri_endpoint"], "stop", *listed)
    assert (stopped.returncode, stopped.stdout.split()) == (0, listed)


def test_kubeadm_certs_is_the_real_kubeadms(root: Path) -> None:
    """`kubeadm certs ...` is handed to the real kubeadm on a test-bed host; without it the double refuses, never
    answering with a made-up expiry."""
    r = run(root, "kubeadm", "certs", "check-expiration", "-o", "json")
    assert r.returncode == 1 and "real kubeadm" in r.stderr and r.stdout == ""
    assert log(root, "kubeadm") == [["certs", "check-expiration", "-o", "json"]]


def test_kubeadm_version(root: Path) -> None:
    assert run(root, "kubeadm", "version", "-o", "short").stdout == "v1.36.4\n"
    assert 'GitVersion:"v1.36.4"' in run(root, "kubeadm", "version").stdout
    assert log(root, "kubeadm")[0] == ["version", "-o", "short"]


def test_init_single_node(root: Path, tmp_path: Path) -> None:
    cfg = kubeadm_config(tmp_path, nodes=1)
    r = run(root, "kubeadm", "init", "--config", str(cfg), "--skip-token-print")
    assert r.returncode == 0, r.stderr
    assert "--token <value withheld>" in r.stdout
    admin = (root / "etc/kubernetes/admin.conf").read_text()
    assert "server: https://10.10.0.2:6443" in admin
    assert "current-context: kubernetes-admin@gpustack" in admin
    assert (root / "etc/kubernetes/pki/ca.crt").read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert sorted(p.name for p in (root / "etc/kubernetes/manifests").iterdir()) == [
        "etcd.yaml",
        "kube-apiserver.yaml",
        "kube-controller-manager.yaml",
        "kube-scheduler.yaml",
    ]
    assert "cgroupDriver: systemd" in (root / "var/lib/kubelet/config.yaml").read_text()
    node = json.loads((root / "var/lib/gpustack-doubles/nodes/cp1.json").read_text())
    assert node["taints"] == []
    # the --config file was recorded
    assert (root / "var/log/gpustack-doubles/kubeadm-config-1.yaml").read_text() == cfg.read_text()

    again = run(root, "kubeadm", "init", "--config", str(cfg))
    assert again.returncode == 1
    assert "[ERROR FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml]" in again.stderr
    assert (root / "var/log/gpustack-doubles/kubeadm-config-2.yaml").exists()


def test_init_multi_node_keeps_taint_and_join(root: Path, tmp_path: Path) -> None:
    cfg = kubeadm_config(tmp_path, nodes=2)
    assert run(root, "kubeadm", "init", "--config", str(cfg)).returncode == 0
    node = json.loads((root / "var/lib/gpustack-doubles/nodes/cp1.json").read_text())
    assert node["taints"] == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]

    r = run(root, "kubeadm", "token", "create", "--print-join-command", "--ttl", "30m")
    assert r.returncode == 0
    m = re.fullmatch(
        r"kubeadm join 10\.10\.0\.2:6443 --token ([a-z0-9]{6}\.[a-z0-9]{16}) "
        r"--discovery-token-ca-cert-hash (sha256:[0-9a-f]{64}) \n",
        r.stdout,
    )
    assert m, r.stdout

    worker = root.parent / "worker"
    join = [
        *r.stdout.split()[1:],
        "--node-name",
        "w1",
        "--cri-socket",
        "unix:///run/containerd/containerd.sock",
    ]
    j = run(worker, "kubeadm", *join)
    assert j.returncode == 0, j.stderr
    assert "server: https://10.10.0.2:6443" in (worker / "etc/kubernetes/kubelet.conf").read_text()
    state = json.loads((worker / "var/lib/gpustack-doubles/join.json").read_text())
    assert state["node_name"] == "w1"
    again = run(worker, "kubeadm", *join)
    assert again.returncode == 1
    assert "[ERROR FileAvailable--etc-kubernetes-kubelet.conf]" in again.stderr


def test_token_needs_a_cluster(root: Path) -> None:
    r = run(root, "kubeadm", "token", "create", "--print-join-command")
    assert r.returncode == 1
    assert "admin.conf" in r.stderr


def test_join_rejects_a_malformed_token(root: Path) -> None:
    r = run(
        root,
        "kubeadm",
        "join",
        "1.2.3.4:6443",
        "--token",
        "nope",
        "--discovery-token-ca-cert-hash",
        "sha256:" + "0" * 64,
    )
    assert r.returncode == 1


def test_kubectl_taints(root: Path, tmp_path: Path) -> None:
    assert run(root, "kubeadm", "init", "--config", str(kubeadm_config(tmp_path, nodes=2))).returncode == 0
    kc = ["--kubeconfig", str(root / "etc/kubernetes/admin.conf")]
    get = [*kc, "get", "node", "cp1", "-o", "jsonpath={.spec.taints}"]
    r = run(root, "kubectl", *get)
    assert json.loads(r.stdout) == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]

    spec = "node-role.kubernetes.io/control-plane:NoSchedule-"
    r = run(root, "kubectl", *kc, "taint", "nodes", "cp1", spec)
    assert (r.returncode, r.stdout) == (0, "node/cp1 untainted\n")
    assert run(root, "kubectl", *get).stdout == ""
    r = run(root, "kubectl", *kc, "taint", "nodes", "cp1", spec)
    assert r.returncode == 1
    assert 'taint "node-role.kubernetes.io/control-plane:NoSchedule" not found' in r.stderr

    r = run(root, "kubectl", *kc, "get", "node", "nope", "-o", "jsonpath={.spec.taints}")
    assert r.returncode == 1 and "NotFound" in r.stderr


def test_kubectl_needs_a_kubeconfig(root: Path, tmp_path: Path) -> None:
    r = run(root, "kubectl", "--kubeconfig", str(tmp_path / "missing"), "get", "nodes")
    assert r.returncode == 1
    env_home = dict(HOME=str(tmp_path))
    r2 = subprocess.run(
        [sys.executable, str(DOUBLES / "kubectl"), "get", "nodes"],
        env=dict(os.environ, GPUSTACK_DOUBLES_ROOT=str(root), KUBECONFIG="", **env_home),
        capture_output=True,
        text=True,
        check=False,
    )
    assert r2.returncode == 1 and "localhost:8080" in r2.stderr


def test_kubectl_apply(root: Path, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    manifest = tmp_path / "kube-flannel.yml"
    # the manifest the network stage applies (gpustack's rendering), then with an interface set
    text = flannel_manifest(Config(nodes=[Node(name="cp1", address="192.0.2.10", role="control-plane")]))
    manifest.write_text(text)
    apply = ["--kubeconfig", str(kubeconfig), "apply", "-f", str(manifest)]
    first = run(root, "kubectl", *apply).stdout.splitlines()
    assert first == [
        "namespace/kube-flannel created",
        "serviceaccount/flannel created",
        "clusterrole.rbac.authorization.k8s.io/flannel created",
        "clusterrolebinding.rbac.authorization.k8s.io/flannel created",
        "configmap/kube-flannel-cfg created",
        "daemonset.apps/kube-flannel-ds created",
    ]
    second = run(root, "kubectl", *apply).stdout.splitlines()
    assert all(line.endswith(" unchanged") for line in second)
    manifest.write_text(
        flannel_manifest(
            Config(
                nodes=[Node(name="cp1", address="192.0.2.10", role="control-plane")], cluster={"flannel_iface": "eth1"}
            )  # type: ignore[arg-type]
        )
    )
    third = run(root, "kubectl", *apply).stdout.splitlines()
    assert "daemonset.apps/kube-flannel-ds configured" in third
    assert "configmap/kube-flannel-cfg unchanged" in third
    # stdin
    r = run(
        root,
        "kubectl",
        "--kubeconfig",
        str(kubeconfig),
        "apply",
        "-f",
        "-",
        stdin="apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n",
    )
    assert r.stdout == "namespace/x created\n"


def test_kubectl_rollout(root: Path, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    r = run(
        root,
        "kubectl",
        "--kubeconfig",
        str(kubeconfig),
        "-n",
        "kube-flannel",
        "rollout",
        "status",
        "ds/kube-flannel-ds",
        "--timeout=300s",
    )
    assert (r.returncode, r.stdout) == (0, 'daemon set "kube-flannel-ds" successfully rolled out\n')
    r = run(
        root,
        "kubectl",
        "--kubeconfig",
        str(kubeconfig),
        "-n",
        "kube-system",
        "rollout",
        "status",
        "deploy/coredns",
        "--timeout=300s",
    )
    assert r.stdout == 'deployment "coredns" successfully rolled out\n'
    assert log(root, "kubectl")[0][-1] == "--timeout=300s"


def test_helm_version(root: Path) -> None:
    assert run(root, "helm", "version", "--template", "{{ .Version }}").stdout == f"v{pins.HELM_VERSION}"
    assert run(root, "helm", "version", "--template={{.Version}}").stdout == f"v{pins.HELM_VERSION}"
    assert run(root, "helm", "version", "--short").stdout.startswith(f"v{pins.HELM_VERSION}+g")
    assert run(root, "helm", "repo", "add", "x", "y").returncode == 0
    assert log(root, "helm")[-1] == ["repo", "add", "x", "y"]


def test_kubelet_version_and_sleep(root: Path) -> None:
    assert run(root, "kubelet", "--version").stdout == "Kubernetes v1.36.4\n"
    env = dict(os.environ, GPUSTACK_DOUBLES_ROOT=str(root))
    proc = subprocess.Popen([sys.executable, str(DOUBLES / "kubelet"), "--config", "/nonexistent"], env=env)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1)
    finally:
        proc.terminate()
    assert proc.wait(timeout=10) == 0
