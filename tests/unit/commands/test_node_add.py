"""`gpustack node add`: the sequence, which hosts each stage visits (only the new nodes, and the
firewall everywhere), the guard after the preflight, and the refusals. The real join on real hosts
is tests/testbed/test_nodes.py."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from gpustack import commands
from gpustack.commands import node_add
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.engine.options import RunOptions
from gpustack.engine.stages import stage_hosts
from gpustack.engine.steps import StepContext
from gpustack.errors import ConfigError, StageError, UsageError
from gpustack.paths import kubeconfig_path
from gpustack.render import converge
from tests.fakes.kube_api import FakeKubeAPI

from ..nodes_cluster import node

CFG = Config.model_validate(
    {
        "nodes": [
            {"name": "cp1", "address": "10.0.0.10", "role": "control-plane", "user": "ops"},
            {"name": "w1", "address": "10.0.0.11", "role": "worker", "user": "ops"},
            {"name": "w2", "address": "10.0.0.12", "role": "worker", "user": "ops"},
        ]
    }
)


def marker(version: str = CFG.versions.kubernetes, admin: bool = False) -> dict[str, Any]:
    return {"kubernetes": {"admin_conf": admin, "gpustack_marker": {"kubernetes_version": version}}}


def test_the_sequence_is_ups_host_layer_limited_to_the_new_nodes_then_ready() -> None:
    seq = commands.sequence("node-add")
    assert seq.stage_ids == (
        "preflight",
        "os",
        "firewall",
        "containerd",
        "kubernetes",
        "control-plane",
        "workers",
        "network",
        "helm",
        "ready",
        "kubelet-certs",
        "gpu-sharing",
    )
    assert seq.converges and seq.playbook == "node-add.yml"
    hosts = {s.id: s.hosts for s in seq.stages}
    assert hosts["firewall"] == "all" and hosts["preflight"] == "all"
    assert hosts["gpu-sharing"] == "local"  # through the admin kubeconfig
    assert {s for s, h in hosts.items() if h == "targets"} == set(node_add.NEW_NODES_ONLY) | {"ready"}
    assert set(node_add.stage_nodes(["w2"])) == set(node_add.NEW_NODES_ONLY)


def test_existing_hosts_are_visited_only_by_the_firewall(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
    ids = [s for s in commands.sequence("node-add").stage_ids if s in converge.STAGE_GROUPS]
    opts = RunOptions(stages=(), stage_nodes=node_add.stage_nodes(["w2"]))
    # cp1 and w1 are converged everywhere but in the firewall (the new peer's address is new to them)
    facts = {
        h: {"stages": {s: {"converged": s != "firewall"} for s in converge.STAGE_GROUPS}} for h in ("cp1", "w1")
    } | {"w2": {}}
    patterns, _ = stage_hosts(CFG, opts, ids, facts)
    assert patterns == {
        "os": "w2",
        "firewall": "all",  # not limited, and no node converged there
        "containerd": "w2",
        "kubernetes": "w2",
        "control-plane": converge.NO_HOSTS,
        "workers": "w2",
        "network": converge.NO_HOSTS,
        "helm": converge.NO_HOSTS,
    }
    # with the firewall disabled the stage is converged on them (nothing to add), so only w2 is visited
    facts["cp1"]["stages"]["firewall"]["converged"] = facts["w1"]["stages"]["firewall"]["converged"] = True
    assert stage_hosts(CFG, opts, ids, facts)[0]["firewall"] == "w2"


def test_guard_needs_a_running_control_plane_at_the_configs_version() -> None:
    ok = {"cp1": marker(admin=True), "w1": marker(), "w2": {}}
    node_add.check_cluster(CFG, ok, ["w2"])
    with pytest.raises(node_add.AddRefused, match="no running control plane"):
        node_add.check_cluster(CFG, {"cp1": marker(), "w1": marker(), "w2": {}}, ["w2"])
    with pytest.raises(ConfigError, match="gpustack upgrade"):
        node_add.check_cluster(CFG, {"cp1": marker("1.35.8", admin=True), "w1": marker("1.35.8"), "w2": {}}, ["w2"])


def test_refusals_and_description() -> None:
    with pytest.raises(UsageError, match="no node named w9"):
        node_add.select_new(CFG, ["w9"])
    with pytest.raises(node_add.AddRefused, match="no cluster to add them to"):
        node_add.select_new(CFG, ["cp1", "w1", "w2"])
    with pytest.raises(UsageError):
        node_add.select_new(CFG, [])
    lines = node_add.describe(CFG, node_add.select_new(CFG, ["w2"]))
    assert lines[0] == "new node w2 (10.0.0.12, worker)"
    assert "existing nodes cp1, w1: only gpustack's firewall chain changes (it accepts 10.0.0.12)" in lines[-2]
    off = CFG.model_copy(update={"firewall": CFG.firewall.model_copy(update={"enabled": False})})
    assert "existing nodes cp1, w1: nothing changes there" in node_add.describe(off, node_add.select_new(off, ["w2"]))
    assert node_add.gpu_nodes({"w2": {"nvidia_pci_devices": [{"slot": "0000:01:00.0"}]}, "w1": {}}, ["w2"]) == ["w2"]


def test_the_sharing_stage_labels_the_new_gpu_nodes_with_the_cluster_default(
    fake_api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
    cfg = Config.model_validate(
        {"nodes": CFG.model_dump(mode="json")["nodes"], "gpu_sharing": {"default": {"mode": "mps", "replicas": 4}}}
    )
    ctx0 = StepContext(cfg, RunOptions(stages=()), Console(stream=io.StringIO()), tmp_path, {})
    with pytest.raises(StageError, match="no admin kubeconfig") as ei:
        node_add.sharing_step(["w2"])(ctx0)
    assert ei.value.hint and "up --only cluster" in ei.value.hint
    kubeconfig_path(cfg.cluster.name).parent.mkdir(parents=True)
    fake_api.write_kubeconfig(kubeconfig_path(cfg.cluster.name))
    fake_api.seed([node("cp1", cp=True), node("w1"), node("w2")])
    console = Console(stream=io.StringIO())
    ctx = StepContext(
        cfg,
        RunOptions(stages=()),
        console,
        tmp_path,
        {"w1": {}, "w2": {"nvidia_pci_devices": [{"device_id": "0x2330"}]}},
    )
    [row] = node_add.sharing_step(["w1", "w2"])(ctx)
    plugin = "nvidia.com/device-plugin.config"
    assert row.status == "changed" and row.changed == 1 and "w1: no NVIDIA GPU" in row.note
    assert fake_api.get("v1", "Node", "w2")["metadata"]["labels"][plugin] == "mps-4"  # type: ignore[index]
    assert plugin not in fake_api.get("v1", "Node", "w1")["metadata"]["labels"]  # type: ignore[index]
    assert plugin not in fake_api.get("v1", "Node", "cp1")["metadata"]["labels"]  # type: ignore[index]  # not new
    # converged: nothing changes; and with no sharing at all the stage does not even connect
    assert node_add.sharing_step(["w1", "w2"])(ctx)[0].status == "ok"
    fake_api.reset_requests()
    plain = StepContext(CFG, RunOptions(stages=()), console, tmp_path, {})
    assert node_add.sharing_step(["w2"])(plain)[0].status == "ok" and fake_api.requests == []
