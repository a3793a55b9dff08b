"""verify's CUDA test pods on a cluster that shares GPUs (gpustack/diagnose/collect_sharing.py, collect_workload.py;
checks G10 and G18), through the real client against the fake API server, whose GPU kubelet double
(tests/fakes/gpu_kubelet.py) schedules each pod as kube-scheduler would and prints what ``nvidia-smi -L`` prints for
the device the pod got: one pod per sharing node requesting what that node advertises (a MIG device, a time-sliced
GPU, renamed resources), pinned to it; the whole-GPU pod on a node that shares nothing; a pod that fails names its
node and the fix."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.diagnose import registry
from gpustack.diagnose.collect import CollectContext
from gpustack.diagnose.collect_sharing import collect_sharing_workload, target
from gpustack.diagnose.collect_workload import collect_workload
from gpustack.diagnose.snapshot import Snapshot
from gpustack.runners.kube import Kube
from tests.fakes import scenarios as sc
from tests.fakes import sharing_scenarios as ss
from tests.fakes.gpu_kubelet import GpuKubelet
from tests.fakes.kube_api import FakeKubeAPI

FAST = {"poll_interval": 0.02, "stuck_grace": 0.2, "sharing_deadline": 5.0, "workload_deadline": 5.0}


def verify_pods(api: FakeKubeAPI, kube: Kube, s: sc.Scenario, broken: set[str] | None = None) -> tuple[
    GpuKubelet, dict[str, list[Finding]]]:  # fmt: skip
    """Load the scenario, run verify's two pod sources over its nodes, return the kubelet and G10/G18's findings."""
    s.load(api)
    kubelet = GpuKubelet(api, broken)
    api.on_create.append(kubelet)
    snap = Snapshot(kube={"Node": s.nodes()})
    ctx = CollectContext(cfg=Config(), command="verify", kubeconfig=None, extra={"kube": kube, **FAST})
    collect_workload(ctx, snap)
    collect_sharing_workload(ctx, snap)
    checks = registry.load_all()
    return kubelet, {c: registry.run([checks[c]], snap) for c in ("G10-cuda-test-pod", "G18-shared-gpu-test-pod")}


def pods(kubelet: GpuKubelet) -> list[tuple[str, str, str]]:
    return sorted(kubelet.ran.values())


def test_a_mig_node_gets_a_pod_on_one_of_its_mig_devices(fake_api: FakeKubeAPI, kube: Kube) -> None:
    s = sc.healthy(1)
    ss.make_mig(s)  # mixed: nvidia.com/mig-1g.10gb x 56, nvidia.com/gpu 0
    kubelet, found = verify_pods(fake_api, kube, s)
    assert pods(kubelet) == [("gpu-node-1", "nvidia.com/mig-1g.10gb", "Succeeded")] * 2  # G10's pod: a MIG device
    [g18] = found["G18-shared-gpu-test-pod"]
    assert g18.status == "pass" and g18.host == "gpu-node-1", g18
    assert g18.summary == "gpu-node-1: a CUDA pod ran on mig (nvidia.com/mig-1g.10gb): MIG 1g.10gb"
    assert [f.status for f in found["G10-cuda-test-pod"]] == ["pass"]
    assert not [k for k in fake_api.objects if k[2] == "pods" and k[3] == "gpustack-verify"]  # deleted


def test_a_time_sliced_node_gets_a_pod_on_one_replica(fake_api: FakeKubeAPI, kube: Kube) -> None:
    s = sc.healthy(3)
    node = ss.make_time_sliced(s)
    kubelet, found = verify_pods(fake_api, kube, s)
    name = node["metadata"]["name"]
    # the whole-GPU pod goes to a node that shares nothing and takes it (not the tainted control plane); the shared
    # node gets its own
    assert pods(kubelet) == [("gpu-node-1", "nvidia.com/gpu", "Succeeded"), (name, "nvidia.com/gpu", "Succeeded")]
    [g18] = found["G18-shared-gpu-test-pod"]
    assert g18.status == "pass" and g18.summary.startswith(f"{name}: a CUDA pod ran on time-slicing (nvidia.com/gpu)")
    assert "NVIDIA H100 80GB HBM3 (UUID: GPU-" in g18.summary


def test_a_mixed_cluster_pins_the_whole_gpu_pod_and_the_mig_pod(fake_api: FakeKubeAPI, kube: Kube) -> None:
    # cp-1 and gpu-node-1 share nothing, gpu-node-2 at all-1g.10gb; cp-1 keeps the control plane's NoSchedule taint,
    # which the test pods do not tolerate: the whole-GPU pod goes to gpu-node-1 (before the real scheduler's
    # contract it went to cp-1, where it would have stayed Pending on a real cluster)
    s = sc.healthy(3)
    mig_node = ss.make_mig(s)
    kubelet, found = verify_pods(fake_api, kube, s)
    assert pods(kubelet) == [("gpu-node-1", "nvidia.com/gpu", "Succeeded"),
                             ("gpu-node-2", "nvidia.com/mig-1g.10gb", "Succeeded")]  # fmt: skip
    statuses = [f.status for c in ("G10-cuda-test-pod", "G18-shared-gpu-test-pod") for f in found[c]]
    assert statuses == ["pass", "pass"]
    # under mig.strategy single the MIG node also advertises nvidia.com/gpu: the whole-GPU pod must not land there
    fake_api.objects.clear()
    s = sc.healthy(3)
    ss.make_mig(s, strategy="single")
    kubelet, found = verify_pods(fake_api, kube, s)
    assert pods(kubelet) == [("gpu-node-1", "nvidia.com/gpu", "Succeeded"),
                             ("gpu-node-2", "nvidia.com/gpu", "Succeeded")]  # fmt: skip
    [g18] = found["G18-shared-gpu-test-pod"]
    assert g18.status == "pass" and g18.summary.endswith("MIG 1g.10gb"), g18
    assert mig_node["metadata"]["name"] == "gpu-node-2"


@pytest.mark.parametrize("mode", ["mig", "time-slicing"])
def test_renamed_resources_are_read_from_the_node(fake_api: FakeKubeAPI, kube: Kube, mode: str) -> None:
    """renameByDefault: nvidia.com/gpu.shared, nvidia.com/mig-<profile>.shared (GPU Operator gpu-sharing.rst)."""
    s = sc.healthy(1)
    node = ss.make_mig(s) if mode == "mig" else ss.make_time_sliced(s)
    alloc = node["status"]["allocatable"]
    old = "nvidia.com/mig-1g.10gb" if mode == "mig" else "nvidia.com/gpu"
    alloc[f"{old}.shared"], alloc[old] = alloc[old], "0"
    kubelet, found = verify_pods(fake_api, kube, s)
    assert ("gpu-node-1", f"{old}.shared", "Succeeded") in pods(kubelet)
    [g18] = found["G18-shared-gpu-test-pod"]
    assert g18.status == "pass" and f"({old}.shared)" in g18.summary, g18


def test_a_pod_that_fails_on_one_node_names_that_node_and_the_fix(fake_api: FakeKubeAPI, kube: Kube) -> None:
    s = sc.healthy(3)
    ss.make_mig(s)
    ts = sc.healthy(3)  # a second sharing node, time-sliced, renamed into this cluster
    shared = ss.make_time_sliced(ts)
    shared["metadata"]["name"] = shared["metadata"]["labels"]["kubernetes.io/hostname"] = "gpu-node-9"
    s.objects.append(shared)
    _, found = verify_pods(fake_api, kube, s, broken={"gpu-node-2"})
    bad, good = found["G18-shared-gpu-test-pod"]
    assert (bad.status, bad.host, good.status, good.host) == ("fail", "gpu-node-2", "pass", "gpu-node-9")
    assert bad.summary == "gpu-node-2: the test pod on mig (nvidia.com/mig-1g.10gb) did not complete: phase Failed"
    assert "No devices were found" in bad.evidence and "Error" in bad.evidence
    assert "nvidia.com/mig-1g.10gb on gpu-node-2 but nvidia-smi failed" in bad.fix
    assert "gpustack doctor --layer runtime" in bad.fix


def test_a_node_that_stopped_advertising_its_resource_leaves_the_pod_unschedulable(
    fake_api: FakeKubeAPI, kube: Kube
) -> None:
    s = sc.healthy(1)
    node = ss.make_mig(s)
    s.load(fake_api)
    stored = fake_api.objects[("", "v1", "nodes", "", "gpu-node-1")]
    stored["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "0"  # the device plugin lost them after the snapshot
    kubelet = GpuKubelet(fake_api)
    fake_api.on_create.append(kubelet)
    snap = Snapshot(kube={"Node": [node]})
    collect_sharing_workload(CollectContext(cfg=Config(), command="verify", kubeconfig=None,
                                            extra={"kube": kube, **FAST}), snap)  # fmt: skip
    [f] = registry.run([registry.load_all()["G18-shared-gpu-test-pod"]], snap)
    assert f.status == "fail" and f.host == "gpu-node-1" and "stuck: phase Pending" in f.summary, f
    assert "0/1 nodes are available: 1 Insufficient nvidia.com/mig-1g.10gb" in f.evidence
    assert f.fix.startswith("kubectl describe node gpu-node-1 | grep -A10 Allocatable   # must list nvidia.com/mig-1g")


def test_nodes_that_share_nothing_or_are_not_ready_for_a_pod_get_none() -> None:
    s = sc.healthy(1)
    [plain] = s.nodes()
    assert target(plain) is None
    node = ss.make_mig(s)
    node["metadata"]["labels"]["nvidia.com/mig.config.state"] = "pending"
    assert target(node) is None  # G12 reports the MIG manager's state
    node["metadata"]["labels"]["nvidia.com/mig.config.state"] = "success"
    assert target(node) == {"node": "gpu-node-1", "mode": "mig", "resource": "nvidia.com/mig-1g.10gb",
                            "expect": "MIG 1g.10gb"}  # fmt: skip


def test_the_documented_verify_sample_is_what_the_commands_print() -> None:
    """docs/gpu-sharing.md's verify sample is scripts/sample_sharing.py's output (the real CLI in its own process
    against the fake API server with ``--share mig``), but for the fake server's port."""
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, str(root / "scripts" / "sample_sharing.py"), "--only", "verify"], cwd=root,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    port = re.compile(r"127\.0\.0\.1:\d+")
    printed = port.sub("PORT", proc.stdout.strip())
    assert "G18-shared-gpu-test-pod    │ pass" in printed and "(exit 0)" in printed, printed
    docs = (root / "docs" / "gpu-sharing.md").read_text()
    assert printed in port.sub("PORT", docs), printed
