"""node-remove.yml's etcd-member play, for real with ansible-playbook on this machine, against the
kubectl TEST DOUBLE (etcdctl in the etcd pod, on the member list the kubeadm double keeps): the
removed control plane's member goes, the others stay, a second run changes nothing. And the
kubeadm double's reset of a control plane removes its own member, as kubeadm's remove-etcd-member
phase does (so after an online removal this play finds nothing left)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import DOUBLES, PLAYBOOKS

from gpustack.config.model import Config, Node
from gpustack.render.kubeadm import render_init_config

MEMBERS = {
    "members": [
        {"ID": 9372538179322589801, "name": "cp1", "peerURLs": ["https://10.0.0.10:2380"]},
        {"ID": 10501334649042878790, "name": "cp2", "peerURLs": ["https://10.0.0.11:2380"]},
        {"ID": 12345678901234567891, "name": "cp3", "peerURLs": ["https://10.0.0.12:2380"]},
    ]
}


def names(root: Path) -> list[str]:
    return [m["name"] for m in json.loads((root / "var/lib/gpustack-doubles/etcd.json").read_text())["members"]]


def play(root: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "kubectl").exists():
        (bin_dir / "kubectl").symlink_to(DOUBLES / "kubectl")
    extra = {
        "gpustack_node_remove_etcd_host": "localhost",
        "gpustack_node_name": "cp1",
        "gpustack_node_remove_members": [{"name": "cp2", "address": "10.0.0.11"}],
        "node_remove_admin_conf": str(root / "etc/kubernetes/admin.conf"),
        "ansible_become": False,
        "ansible_python_interpreter": "/usr/bin/python3",
    }
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        GPUSTACK_DOUBLES_ROOT=str(root),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
    )
    return subprocess.run(
        [
            "ansible-playbook",
            "-i",
            "localhost,",
            "-c",
            "local",
            str(PLAYBOOKS / "node-remove.yml"),
            "--tags",
            "etcd-member",
            "-e",
            json.dumps(extra),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_etcd_member_of_a_removed_control_plane_is_removed_once(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc/kubernetes/manifests").mkdir(parents=True)
    (root / "etc/kubernetes/manifests/etcd.yaml").write_text("# TEST DOUBLE placeholder\n")
    (root / "etc/kubernetes/admin.conf").write_text("apiVersion: v1\nkind: Config\n")
    (root / "var/lib/gpustack-doubles").mkdir(parents=True)
    (root / "var/lib/gpustack-doubles/etcd.json").write_text(json.dumps(MEMBERS))

    first = play(root, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "changed=1" in first.stdout, first.stdout
    assert names(root) == ["cp1", "cp3"]
    calls = [json.loads(line) for line in (root / "var/log/gpustack-doubles/kubectl.log").read_text().splitlines()]
    assert calls[-1][-3:] == ["member", "remove", format(10501334649042878790, "x")]
    assert calls[-1][:7] == [
        "--kubeconfig",
        str(root / "etc/kubernetes/admin.conf"),
        "--namespace",
        "kube-system",
        "exec",
        "etcd-cp1",
        "--",
    ]

    again = play(root, tmp_path)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout
    assert names(root) == ["cp1", "cp3"]


def test_kubeadm_reset_of_a_control_plane_removes_its_own_member(tmp_path: Path) -> None:
    root = tmp_path / "root"
    cfg = tmp_path / "kubeadm-config.yaml"
    cfg.write_text(render_init_config(Config(nodes=[Node(name="cp1", address="10.10.0.2", role="control-plane")])))
    env = dict(os.environ, GPUSTACK_DOUBLES_ROOT=str(root))

    def kubeadm(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(DOUBLES / "kubeadm"), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    assert kubeadm("init", "--config", str(cfg)).returncode == 0
    assert names(root) == ["cp1"]
    reset = kubeadm("reset", "--force")
    assert reset.returncode == 0 and "Removed the etcd member of cp1" in reset.stdout
    assert names(root) == []
