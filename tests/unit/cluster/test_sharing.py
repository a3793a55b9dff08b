"""The cluster stage's GPU sharing step (gpustack/cluster/sharing.py) with the real kubernetes client against the fake
API server and its MIG manager double (tests/fakes/mig_manager.py): labels as the GPU Operator reads them, a MIG
change drains GPU pods first and waits for nvidia.com/mig.config.state, a converged run changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack.cluster import sharing as cs
from gpustack.config.model import Config
from gpustack.constants import GPU_NAMESPACE
from gpustack.render.sharing import device_plugin_configmap
from gpustack.runners.kube import Kube
from tests.fakes.kube_api import FakeKubeAPI
from tests.fakes.mig_manager import FakeMigManager

from ..nodes_cluster import node, pod

H100, A30 = "0x2330", "0x20b7"
FAST: dict[str, Any] = {"interval": 0.0, "mig_timeout": 5.0}


def config(**sharing: dict[str, Any] | None) -> Config:
    nodes = [{"name": "cp", "address": "192.0.2.10", "role": "control-plane"}]
    for i, (name, s) in enumerate(sharing.items()):
        nodes.append({"name": name, "address": f"192.0.2.{11 + i}", **({"gpu_sharing": s} if s else {})})
    return Config.model_validate({"nodes": nodes})


def gpu_pod(name: str, on: str, resource: str = "nvidia.com/gpu", **kw: Any) -> dict[str, Any]:
    p = pod(name, on, **kw)
    p["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"}}
    return p


def labels(api: FakeKubeAPI, name: str) -> dict[str, str]:
    return dict(api.get("v1", "Node", name)["metadata"]["labels"])  # type: ignore[index]


def seed(api: FakeKubeAPI, *extra: dict[str, Any]) -> None:
    api.seed([node("cp", cp=True), node("w1"), node("w2"), *extra])


def test_mig_change_drains_gpu_pods_waits_for_success_and_uncordons(fake_api: FakeKubeAPI, kube: Kube) -> None:
    seed(fake_api, gpu_pod("train-0", "w1"), gpu_pod("mig-0", "w1", "nvidia.com/mig-3g.40gb", owner=("Job", "j")),
         pod("web-0", "w1"), gpu_pod("other-0", "w2"))  # fmt: skip
    mm = FakeMigManager(fake_api, {"w1": (H100, 8)})
    result = cs.converge_sharing(config(w1={"mode": "mig", "profile": "all-1g.10gb"}), kube, **FAST)
    [w1] = result.nodes
    assert w1.changed == {"nvidia.com/mig.config": "all-1g.10gb"} and w1.state == "success"
    assert sorted(w1.evicted) == ["default/mig-0", "default/train-0"]  # GPU pods only
    pods = {k[4] for k in fake_api.objects if k[2] == "pods"}
    assert {"web-0", "other-0"} <= pods and not {"train-0", "mig-0"} & pods
    got = labels(fake_api, "w1")
    assert got["nvidia.com/mig.config"] == "all-1g.10gb" and got["nvidia.com/mig.config.state"] == "success"
    w1_node = fake_api.get("v1", "Node", "w1")
    assert not w1_node["spec"].get("unschedulable")  # type: ignore[index]
    assert w1_node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "56"  # type: ignore[index]
    assert mm.applied == {"w1": "all-1g.10gb"}
    assert "1 node" not in result.detail() and "2 GPU pod(s) evicted -> success" in result.detail()

    fake_api.reset_requests()
    again = cs.converge_sharing(config(w1={"mode": "mig", "profile": "all-1g.10gb"}), kube, **FAST)
    assert not again.changed and fake_api.mutating_requests() == []  # converged: one GET, nothing written


def test_failed_mig_change_is_an_error_with_the_mig_manager_hint(fake_api: FakeKubeAPI, kube: Kube) -> None:
    seed(fake_api)
    FakeMigManager(fake_api, {"w1": (A30, 1)})
    cfg = config(w1={"mode": "mig", "profile": "all-1g.10gb"})  # the A30 has no 1g.10gb
    with pytest.raises(cs.MigChangeError) as ei:
        cs.converge_sharing(cfg, kube, **FAST)
    assert "nvidia.com/mig.config.state=failed" in ei.value.message and ei.value.hosts == ("w1",)
    assert ei.value.hint and "app=nvidia-mig-manager" in ei.value.hint and "G12" in ei.value.hint
    assert not fake_api.get("v1", "Node", "w1")["spec"].get("unschedulable")  # type: ignore[index]
    with pytest.raises(cs.MigChangeError, match="state=failed"):  # a re-run does not hide it
        cs.converge_sharing(cfg, kube, **FAST)


def test_pending_past_the_deadline_names_the_stuck_client(fake_api: FakeKubeAPI, kube: Kube) -> None:
    seed(fake_api)
    FakeMigManager(fake_api, {"w1": (H100, 1)}, stuck=True)
    with pytest.raises(cs.MigChangeError) as ei:
        cs.converge_sharing(config(w1={"mode": "mig", "profile": "all-3g.40gb"}), kube, interval=0.01,
                            mig_timeout=0.3)  # fmt: skip
    assert "state=pending" in ei.value.message and "gpu.deploy.client" in (ei.value.hint or "")


def test_an_unmanaged_gpu_pod_stops_the_change_before_the_label(fake_api: FakeKubeAPI, kube: Kube) -> None:
    seed(fake_api, gpu_pod("loose", "w1", owner=None))
    with pytest.raises(cs.MigChangeError, match="default/loose"):
        cs.converge_sharing(config(w1={"mode": "mig", "profile": "all-1g.10gb"}), kube, **FAST)
    assert "nvidia.com/mig.config" not in labels(fake_api, "w1")
    assert not fake_api.get("v1", "Node", "w1")["spec"].get("unschedulable")  # type: ignore[index]


def test_time_slicing_labels_without_a_drain_and_leaving_mig(fake_api: FakeKubeAPI, kube: Kube) -> None:
    w2 = node("w2")
    w2["metadata"]["labels"].update({"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "success"})
    fake_api.seed([node("cp", cp=True), node("w1"), w2, gpu_pod("train-0", "w1")])
    FakeMigManager(fake_api, {"w2": (H100, 8)})
    cfg = config(w1={"mode": "time-slicing", "replicas": 4}, w2={"mode": "none"})
    result = cs.converge_sharing(cfg, kube, **FAST)
    assert labels(fake_api, "w1")["nvidia.com/device-plugin.config"] == "time-slicing-4"
    assert fake_api.get("v1", "Pod", "train-0", "default") is not None  # a label switch moves no pod
    assert labels(fake_api, "w2")["nvidia.com/mig.config"] == "all-disabled"  # leaving MIG: the manager turns it off
    assert labels(fake_api, "w2")["nvidia.com/mig.config.state"] == "success"
    assert [n.changed for n in result.nodes] == [{"nvidia.com/device-plugin.config": "time-slicing-4"},
                                                 {"nvidia.com/mig.config": "all-disabled"}]  # fmt: skip
    # back to whole GPUs: the label goes, and the ConfigMap nobody uses is deleted
    cm = device_plugin_configmap(cfg)
    assert cm is not None
    fake_api.seed([cm])
    result = cs.converge_sharing(config(w1={"mode": "none"}, w2={"mode": "none"}), kube, **FAST)
    assert "nvidia.com/device-plugin.config" not in labels(fake_api, "w1")
    assert result.configmap_deleted and fake_api.get("v1", "ConfigMap", cm["metadata"]["name"], GPU_NAMESPACE) is None


def test_nodes_without_gpu_sharing_are_left_alone(fake_api: FakeKubeAPI, kube: Kube) -> None:
    w1 = node("w1")
    w1["metadata"]["labels"]["nvidia.com/mig.config"] = "all-2g.20gb"  # set by hand, not by gpustack
    fake_api.seed([node("cp", cp=True), w1])
    fake_api.reset_requests()
    result = cs.converge_sharing(config(w1=None), kube, **FAST)
    assert result.nodes == [] and fake_api.mutating_requests() == []
    assert labels(fake_api, "w1")["nvidia.com/mig.config"] == "all-2g.20gb"


def test_the_cluster_default_reaches_gpu_nodes_only_and_yields_to_a_nodes_own(
    fake_api: FakeKubeAPI, kube: Kube
) -> None:
    gpu_labelled = node("w3")
    gpu_labelled["metadata"]["labels"]["feature.node.kubernetes.io/pci-10de.present"] = "true"
    fake_api.seed([node("cp", cp=True), node("w1"), node("w2"), gpu_labelled, node("w4")])
    FakeMigManager(fake_api, {"w1": (H100, 8)})
    cfg = Config.model_validate({
        "nodes": [{"name": "cp", "address": "192.0.2.10", "role": "control-plane"},
                  {"name": "w1", "address": "192.0.2.11"}, {"name": "w2", "address": "192.0.2.12"},
                  {"name": "w3", "address": "192.0.2.13"},
                  {"name": "w4", "address": "192.0.2.14", "gpu_sharing": {"mode": "time-slicing", "replicas": 2}}],
        "gpu_sharing": {"default": {"mode": "time-slicing", "replicas": 4}},
    })  # fmt: skip
    # w1: a GPU node by its host facts; w3: by NFD's NVIDIA PCI label; w2 and cp: no GPU anywhere; w4: its own
    result = cs.converge_sharing(cfg, kube, gpu_nodes=("w1",), **FAST)
    by = {n.node: n for n in result.nodes}
    plugin = "nvidia.com/device-plugin.config"
    assert by["w1"].changed == {plugin: "time-slicing-4"} and labels(fake_api, "w1")[plugin] == "time-slicing-4"
    assert by["w3"].changed == {plugin: "time-slicing-4"}
    assert by["w4"].changed == {plugin: "time-slicing-2"}
    for cpu in ("cp", "w2"):
        assert by[cpu].note == cs.NO_GPU_NOTE and not by[cpu].changed and plugin not in labels(fake_api, cpu)
    assert "w2: no NVIDIA GPU" in result.detail()
    # `node add w2` later, once it has GPUs (its host facts say so): only w2 is visited, the ConfigMap kept
    fake_api.reset_requests()
    added = cs.converge_sharing(cfg, kube, gpu_nodes=("w2",), only=("w2",), **FAST)
    assert [n.node for n in added.nodes] == ["w2"] and added.nodes[0].changed == {plugin: "time-slicing-4"}
    assert not added.configmap_deleted
