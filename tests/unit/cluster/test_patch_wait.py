"""gpustack/cluster/patch_wait.py: which pods are GPU jobs, what "the GPU stack is back" means, the wait loop
(pure; the objects are those the fake API server serves, tests/unit/patch_cluster.py)."""

from __future__ import annotations

from gpustack.cluster import patch_wait as pw

from ..nodes_cluster import pod
from ..patch_cluster import gpu_node, gpu_pod, operator_pods


def test_gpu_jobs_are_running_gpu_pods_of_a_job_or_of_no_controller() -> None:
    pods = [
        gpu_pod("train-x", "g1"),
        gpu_pod("notebook", "g1", owner=None),
        gpu_pod("done", "g1", phase="Succeeded"),
        gpu_pod("failed", "g1", phase="Failed"),
        gpu_pod("serve", "g1", owner=("ReplicaSet", "serve-1")),  # a service: the drain moves it
        pod("cpu-job", "g1", owner=("Job", "etl")),  # no GPU
        *operator_pods("g1"),
    ]
    assert pw.gpu_jobs(pods) == ["default/notebook", "default/train-x"]


def test_mig_and_shared_gpus_count_as_gpus() -> None:
    mig = gpu_pod("mig", "g1")
    mig["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/mig-1g.10gb": "1"}}
    assert pw.gpu_jobs([mig]) == ["default/mig"]
    node = gpu_node("g1")
    node["status"]["allocatable"] = {"nvidia.com/gpu.shared": "16", "nvidia.com/mig-1g.10gb": "7", "cpu": "8"}
    assert pw.gpu_allocatable(node) == 23
    assert pw.gpu_allocatable(None) == 0


def test_the_baseline_is_what_the_node_had() -> None:
    base = pw.GpuBaseline.read(gpu_node("g1", gpus=4, boot="b1"), operator_pods("g1"))
    assert base == pw.GpuBaseline(4, ["dcgm-exporter", "device-plugin", "driver", "validator"], "b1")
    assert pw.GpuBaseline.from_record(base.as_record()) == base


def test_not_back_names_each_missing_part_until_everything_is_back() -> None:
    base = pw.GpuBaseline(8, ["device-plugin", "driver", "validator"], "b1")
    # right after the reboot: the API server still has the old status, the host says it booted as b2
    stale = gpu_node("g1", boot="b1")
    assert pw.not_back(base, stale, operator_pods("g1"), host_boot="b2") == [
        "the kubelet has not reported since the host booted (the Node's boot id is the old one)"
    ]
    down = gpu_node("g1", boot="b2", ready=False, gpus=0)
    got = pw.not_back(base, down, operator_pods("g1", ready=False)[:2], host_boot="b2")
    assert got == [
        "the node is not Ready",
        "0 of 8 GPU resource(s) allocatable (nvidia.com/gpu)",
        "device-plugin pod gpu-operator/nvidia-device-plugin-daemonset-g1 not Ready",
        "driver pod gpu-operator/nvidia-driver-daemonset-g1 not Ready",
        "no validator pod on the node",
    ]
    assert pw.not_back(base, gpu_node("g1", boot="b2"), operator_pods("g1"), host_boot="b2") == []
    assert pw.not_back(base, None, [], host_boot="b2") == ["the Node object is gone"]


def test_a_node_without_gpus_needs_only_to_be_ready() -> None:
    base = pw.GpuBaseline(0, [], "b1")
    plain = gpu_node("w1", gpus=0, boot="b1")
    assert pw.not_back(base, plain, [], host_boot="b1") == []
    # a driver preinstalled on the host: no driver pod before, none wanted after
    preinstalled = pw.GpuBaseline(8, ["device-plugin"], "b1")
    assert pw.not_back(preinstalled, gpu_node("g1", boot="b1"), operator_pods("g1")[1:2], host_boot="b1") == []


def test_wait_until_returns_what_is_left_at_the_deadline_and_reports_changes() -> None:
    t = [0.0]
    seen: list[str] = []
    answers = iter([["a", "b"], ["a", "b"], ["a"], ["a"], ["a"]])

    def sleep(s: float) -> None:
        t[0] += s

    left = pw.wait_until(lambda: next(answers), timeout=25, interval=10, clock=lambda: t[0], sleep=sleep,
                         progress=seen.append)  # fmt: skip
    assert left == ["a"] and t[0] == 25
    assert seen == ["waiting: a; b", "waiting: a"]
    done = iter([["x"], []])
    assert pw.wait_until(lambda: next(done), timeout=100, interval=1, clock=lambda: 0.0, sleep=lambda s: None) == []
