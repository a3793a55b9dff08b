"""A busy GPU cluster's queue (issue 32 item 3): doctor's K07 passes a cluster where every GPU is allocated, jobs wait
for GPUs and finished jobs failed, and still fails what is broken; verify's G10 skips (with the reason) instead of
failing when every GPU is allocated. The cluster is read through the real client from the fake API server."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.constants import GPU_NAMESPACE
from gpustack.diagnose import registry
from gpustack.diagnose.collect import CollectContext
from gpustack.diagnose.collect_workload import all_allocated, collect_workload
from gpustack.diagnose.pod_queue import free_gpus, gpu_requests, insufficient
from gpustack.diagnose.snapshot import Snapshot
from gpustack.runners.kube import Kube
from tests.fakes import scenarios as sc
from tests.fakes.busy_scenarios import QUEUED, busy, failed, gpu_pod, pending
from tests.fakes.kube_api import FakeKubeAPI
from tests.unit.diagnose.test_workload import FAST, on_pod

Obj = dict[str, Any]
NODES = 3  # a control plane (tainted, no GPU pods) and two GPU workers, 8 GPUs each


def k07(api: FakeKubeAPI, kubeconfig: Path, s: sc.Scenario) -> list[Finding]:
    s.load(api)
    return [f for f in sc.run_checks(sc.collect_kube(api, kubeconfig)) if f.id == "K07-pod-failures"]


def test_a_busy_gpu_clusters_queue_and_finished_jobs_pass_k07(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    s = busy()
    snap = Snapshot(kube={"Node": s.nodes(), "Pod": [o for o in s.objects if o["kind"] == "Pod"]})
    free, total, _ = free_gpus([n for n in s.nodes()[1:]], snap.kube["Pod"], "nvidia.com/gpu")
    assert (free, total) == (0, 16), "the scenario allocates every worker GPU"
    [f] = k07(fake_api, kubeconfig, s)
    assert f.status == "pass", f
    assert f.summary == "no failing pod; 2 pod(s) queued for GPUs, 2 workload pod(s) ended Failed"
    assert "queued: ml-team/finetune-3, research/sweep-7" in f.evidence
    assert "finished: inference/eval-9, ml-team/train-old" in f.evidence


def _one_more(s: sc.Scenario, p: Obj, *extra: Obj) -> sc.Scenario:
    s.objects += [p, *extra]
    return s


@pytest.mark.parametrize(("name", "add", "words"), [
    ("pending for memory, not GPUs",
     lambda: pending(gpu_pod("big-mem", "research", 1), "0/3 nodes are available: 3 Insufficient memory."),
     "research/big-mem: Pending"),
    ("more GPUs than any node has",
     lambda: pending(gpu_pod("huge", "research", 16)),
     "requests 16 nvidia.com/gpu (the largest node has 8): no node can ever run it"),
    ("refused by the kubelet's device manager",
     lambda: failed(gpu_pod("admit", "ml-team", 1, node="gpu-node-2"), reason="UnexpectedAdmissionError"),
     "ml-team/admit: UnexpectedAdmissionError"),
    ("a failed pod of the GPU Operator",
     lambda: failed(gpu_pod("nvidia-cuda-validator-x", GPU_NAMESPACE, 1, node="gpu-node-2")),
     "gpu-operator/nvidia-cuda-validator-x: Error"),
    ("a pending system pod, even for GPUs",
     lambda: pending(gpu_pod("nvidia-dcgm-exporter-y", GPU_NAMESPACE, 1)),
     "gpu-operator/nvidia-dcgm-exporter-y: Pending"),
])  # fmt: skip
def test_what_stays_a_failure_on_a_busy_cluster(
    fake_api: FakeKubeAPI, kubeconfig: Path, name: str, add: Any, words: str
) -> None:
    found = k07(fake_api, kubeconfig, _one_more(busy(), add()))
    fails = [f for f in found if f.status == "fail"]
    assert len(fails) == 1 and found == fails, (name, found)
    assert words in f"{fails[0].summary} {fails[0].fix}", (name, fails[0])


def test_a_workload_crash_loop_stays_a_failure(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    s = busy()
    p = gpu_pod("crashy", "research", 1, node="gpu-node-2")
    sc._crashloop(p)
    [f] = k07(fake_api, kubeconfig, _one_more(s, p))
    assert (f.status, f.summary) == ("fail", "research/crashy: CrashLoopBackOff")


def test_scheduler_reasons_and_gpu_requests_are_read_as_the_scheduler_counts() -> None:
    assert insufficient(QUEUED) == {"nvidia.com/gpu"}
    assert insufficient("0/4 nodes are available: 1 Insufficient cpu, 3 Insufficient nvidia.com/mig-1g.10gb.") == {
        "cpu", "nvidia.com/mig-1g.10gb"}  # fmt: skip
    pod = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}},
                                   {"resources": {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}}}],
                    "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}  # fmt: skip
    assert gpu_requests(pod) == {"nvidia.com/gpu": 4}  # max(2 + 1, 4): init containers run one at a time


# --- G10 ------------------------------------------------------------------------------------------------


def _verify_on(kube: Kube, s: sc.Scenario, pods: list[Obj] | None = None) -> Snapshot:
    """verify's workload source on the snapshot the kubernetes source would have read from ``s``."""
    pods = [o for o in s.objects if o["kind"] == "Pod"] if pods is None else pods
    snap = Snapshot(kube={"Node": s.nodes(), "Pod": pods})
    ctx = CollectContext(cfg=Config(), command="verify", kubeconfig=None, extra={"kube": kube, **FAST})
    collect_workload(ctx, snap)
    return snap


def test_g10_skips_with_the_reason_when_every_gpu_is_allocated(fake_api: FakeKubeAPI, kube: Kube) -> None:
    created = on_pod(fake_api, {"phase": "Succeeded"})
    snap = _verify_on(kube, busy())
    assert created == [], "no test pod is queued behind the workloads"
    [f] = registry.run([registry.load_all()["G10-cuda-test-pod"]], snap)
    assert (f.status, f.summary) == ("skip", "CUDA test pod not run (every GPU it may use is allocated)")
    assert "every nvidia.com/gpu is allocated (16 of 16 on 2 node(s) the test pod may go to)" in f.evidence
    assert "ml-team/train-1 (4)" in f.evidence and "G10" in f.fix


def test_g10_runs_the_pod_once_a_gpu_is_free(fake_api: FakeKubeAPI, kube: Kube) -> None:
    s = busy()
    pods = [o for o in s.objects if o["kind"] == "Pod"]
    finished = copy.deepcopy(next(p for p in pods if p["metadata"]["name"].startswith("fill-")))
    finished["status"]["phase"] = "Succeeded"  # one filler job ended: its GPUs are back
    pods = [p for p in pods if p["metadata"]["name"] != finished["metadata"]["name"]] + [finished]
    assert all_allocated(Snapshot(kube={"Node": s.nodes(), "Pod": pods}), "nvidia.com/gpu") == ""
    assert all_allocated(Snapshot(kube={"Node": s.nodes()}), "nvidia.com/gpu") == "", "pods not read: no claim"
    created = on_pod(fake_api, {"phase": "Succeeded", "containerStatuses": [
        {"name": "main", "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]})  # fmt: skip
    ran = _verify_on(kube, s, pods)
    assert len(created) == 1 and ran.workload["cuda"]["phase"] == "Succeeded"
    assert registry.run([registry.load_all()["G10-cuda-test-pod"]], ran)[0].status == "pass"
