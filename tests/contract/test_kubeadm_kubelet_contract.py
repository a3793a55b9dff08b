"""Contract: the test bed's kubeadm and kubelet doubles (tests/testbed/doubles) print what kubeadm and kubelet
1.36 print where the playbooks read it: the worker join command, the control-plane taint, the versions and
``kubeadm config images list``. The real binaries cannot run here (they need a node); their answers are upstream
facts (tests/contract/upstream/kubeadm.yaml, each with its source)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpustack.config import pins
from tests.contract.upstream import facts

DOUBLES = Path(__file__).resolve().parents[1] / "testbed" / "doubles"
F = facts("kubeadm")
VERSION = pins.KUBERNETES["1.36"]
CONFIG = """apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: 10.0.0.10
nodeRegistration:
  name: cp1
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: kubernetes
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "usr/share/gpustack-doubles").mkdir(parents=True)
    (tmp_path / "usr/share/gpustack-doubles/version").write_text(f"{VERSION}-1.1\n")
    return tmp_path


def run(root: Path, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUSTACK_DOUBLES_ROOT": str(root), "GPUSTACK_DOUBLES_CLUSTER": str(root / "no-cluster")}
    return subprocess.run(
        [sys.executable, str(DOUBLES / tool), *args], capture_output=True, text=True, env=env, timeout=30
    )


def test_the_worker_join_command_reads_as_kubeadms(root: Path) -> None:
    (root / "kubeadm.yaml").write_text(CONFIG)
    assert run(root, "kubeadm", "init", "--config", str(root / "kubeadm.yaml"), "--skip-token-print").returncode == 0
    out = run(root, "kubeadm", "token", "create", "--print-join-command", "--ttl", "30m").stdout
    assert out.count("\n") == 1, "one line: token.go removes the template's line continuations"
    got = out.split()
    token, ca_hash = got[got.index("--token") + 1], got[got.index("--discovery-token-ca-cert-hash") + 1]
    assert re.fullmatch(F["join_command"]["token_pattern"], token)
    assert re.fullmatch(F["join_command"]["hash_pattern"], ca_hash)
    upstream = F["join_command"]["template"].format(endpoint="10.0.0.10:6443", token=token, hash=ca_hash)
    one_line = upstream.replace("\\\n", "").replace("\t", "")
    assert got == one_line.split(), "the playbooks split the line into an argv"


def test_init_keeps_or_drops_the_control_plane_taint(root: Path) -> None:
    (root / "kubeadm.yaml").write_text(CONFIG)
    run(root, "kubeadm", "init", "--config", str(root / "kubeadm.yaml"))
    node = json.loads((root / "var/lib/gpustack-doubles/nodes/cp1.json").read_text())
    assert node["taints"] == [{"key": F["control_plane_taint"]["key"], "effect": F["control_plane_taint"]["effect"]}]


def test_versions(root: Path) -> None:
    assert (
        run(root, "kubeadm", "version", "-o", "short").stdout
        == F["version"]["kubeadm_short"].format(version=VERSION) + "\n"
    )
    assert run(root, "kubelet", "--version").stdout == F["version"]["kubelet"].format(version=VERSION) + "\n"


def test_config_images_list(root: Path) -> None:
    lines = run(root, "kubeadm", "config", "images", "list", "--kubernetes-version", f"v{VERSION}").stdout.split()
    for component in F["images"]["components"]:
        assert f"registry.k8s.io/{component}:v{VERSION}" in lines
    names = {line.rsplit(":", 1)[0].removeprefix("registry.k8s.io/") for line in lines}
    assert names == set(F["images"]["components"]) | set(F["images"]["others"])
    assert f"registry.k8s.io/pause:{pins.KUBERNETES_LINES['1.36'].pause}" in lines
