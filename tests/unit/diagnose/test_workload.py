"""verify's CUDA test pod against the fake API server: success, unschedulable, image pull failure and
timeout -- the pod is deleted every time -- and the G10 finding each produces."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.diagnose import registry
from gpustack.diagnose.collect import CollectContext
from gpustack.diagnose.collect_workload import CUDA_IMAGE, VERIFY_NAMESPACE, collect_workload, cuda_pod, run_pod
from gpustack.diagnose.snapshot import Snapshot
from gpustack.runners.kube import Kube
from tests.fakes.kube_api import FakeKubeAPI

Obj = dict[str, Any]
FAST = {"workload_deadline": 3.0, "poll_interval": 0.05, "stuck_grace": 0.3}


def on_pod(fake_api: FakeKubeAPI, status: Obj, log: str = "", node: str = "gpu-1") -> list[str]:
    """Give every created test pod ``status`` (the kubelet's verdict); return the names created."""
    created: list[str] = []

    def hook(obj: Obj) -> None:
        if obj.get("kind") != "Pod":
            return
        meta = obj["metadata"]
        created.append(meta["name"])
        obj["status"] = status
        if status.get("phase") != "Pending":
            obj["spec"]["nodeName"] = node
        if log:
            fake_api.set_log(meta["namespace"], meta["name"], "main", log)

    fake_api.on_create.append(hook)
    return created


def pods_left(fake_api: FakeKubeAPI) -> list[str]:
    return [k[4] for k in fake_api.objects if k[2] == "pods" and k[3] == VERIFY_NAMESPACE]


def g10(snap: Snapshot) -> list[Finding]:
    return registry.run([registry.load_all()["G10-cuda-test-pod"]], snap)


def verify(kube: Kube, **extra: object) -> Snapshot:
    snap = Snapshot()
    ctx = CollectContext(cfg=Config(), command="verify", kubeconfig=None, extra={"kube": kube, **FAST, **extra})
    collect_workload(ctx, snap)
    return snap


def test_success_records_logs_and_deletes(fake_api: FakeKubeAPI, kube: Kube) -> None:
    created = on_pod(fake_api, {"phase": "Succeeded", "containerStatuses": [
        {"name": "main", "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]},
        log="| NVIDIA-SMI 595.91.07  Driver Version: 595.91.07  CUDA Version: 13.1 |\n")  # fmt: skip
    snap = verify(kube)
    rec = snap.workload["cuda"]
    assert rec["phase"] == "Succeeded" and rec["deleted"] and not rec["error"], rec
    assert "NVIDIA-SMI" in rec["logs"] and rec["image"] == CUDA_IMAGE and rec["node"] == "gpu-1"
    assert created and created[0].startswith("gpustack-cuda-") and not pods_left(fake_api)
    [f] = g10(snap)
    assert f.status == "pass"
    posted = [r for r in fake_api.requests if r[0] == "POST" and r[1].endswith(f"/namespaces/{VERIFY_NAMESPACE}/pods")]
    assert len(posted) == 1


def test_insufficient_gpu_fails_fast_and_deletes(fake_api: FakeKubeAPI, kube: Kube) -> None:
    on_pod(fake_api, {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
        "reason": "Unschedulable", "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}]})  # fmt: skip
    start = time.monotonic()
    snap = verify(kube, workload_deadline=30.0)
    assert time.monotonic() - start < 10  # stuck_grace, not the deadline
    rec = snap.workload["cuda"]
    assert rec["stuck"] and rec["deleted"] and not pods_left(fake_api)
    [f] = g10(snap)
    assert f.status == "fail" and "Insufficient nvidia.com/gpu" in f.evidence and "Allocatable" in f.fix


def test_image_pull_failure(fake_api: FakeKubeAPI, kube: Kube) -> None:
    on_pod(fake_api, {"phase": "Pending", "containerStatuses": [{"name": "main", "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": f'Back-off pulling image "{CUDA_IMAGE}"'}}}]})  # fmt: skip
    snap = verify(kube)
    assert snap.workload["cuda"]["reason"] == "ImagePullBackOff" and not pods_left(fake_api)
    assert g10(snap)[0].status == "fail"


def test_timeout_deletes(fake_api: FakeKubeAPI, kube: Kube) -> None:
    on_pod(fake_api, {"phase": "Running"})
    snap = verify(kube, workload_deadline=0.5)
    rec = snap.workload["cuda"]
    assert rec["timed_out"] and rec["deleted"] and not pods_left(fake_api)
    [f] = g10(snap)
    assert f.status == "fail" and "timed out" in f.summary


def test_api_failure_still_deletes(fake_api: FakeKubeAPI, kube: Kube) -> None:
    on_pod(fake_api, {"phase": "Pending"})
    fake_api.fail(r"/namespaces/gpustack-verify/pods/gpustack-cuda-", 500, method="GET")  # polling the pod fails
    snap = verify(kube)
    fake_api.clear_faults()
    rec = snap.workload["cuda"]
    assert rec["error"] and rec["pod"] and rec["deleted"] and not pods_left(fake_api)
    assert g10(snap)[0].status == "fail"


def test_skipped_for_doctor_and_no_workload(kube: Kube) -> None:
    snap = Snapshot()
    collect_workload(CollectContext(cfg=Config(), command="doctor", kubeconfig=None, extra={"kube": kube}), snap)
    assert snap.workload == {"skipped": "doctor"}
    [f] = g10(snap)
    assert f.status == "skip"


def test_run_pod_uses_its_clock() -> None:
    """The wait is bounded by the injected clock, never by wall time."""
    now = [0.0]

    class FakeKube:
        def __init__(self) -> None:
            self.deleted: list[str] = []

        def apply_one(self, obj: Obj) -> Obj:
            return obj

        def resource(self, api_version: str, kind: str) -> Any:
            class R:
                def path(self, name: str | None, ns: str | None) -> str:
                    return f"/api/v1/namespaces/{ns}/pods"

            return R()

        def request(self, method: str, path: str, body: Obj) -> Obj:
            return {"metadata": {"name": "p1"}, "status": {"phase": "Pending"}}

        def get(self, *args: Any) -> Obj:
            return {"metadata": {"name": "p1"}, "status": {"phase": "Pending"}}

        def delete(self, api_version: str, kind: str, name: str, ns: str) -> bool:
            self.deleted.append(name)
            return True

    def sleep(s: float) -> None:
        now[0] += s

    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    fake = FakeKube()
    rec = run_pod(fake, cuda_pod(), deadline=100.0, interval=10.0, clock=clock, sleep=sleep)
    assert rec["timed_out"] and fake.deleted == ["p1"] and now[0] == 100.0


def test_no_allocatable_gpu_means_no_pod_is_started() -> None:
    from gpustack.diagnose.collect_workload import allocatable_gpus

    assert allocatable_gpus([{"status": {"allocatable": {"nvidia.com/gpu": "8"}}}, {"status": {}}]) == 8
    assert (
        allocatable_gpus(
            [{"status": {"allocatable": {"cpu": "4"}}}, {"status": {"allocatable": {"nvidia.com/gpu": "x"}}}]
        )
        == 0
    )
    assert allocatable_gpus([]) == 0


def test_gpu_test_pods_go_only_where_the_scheduler_would_take_them() -> None:
    """kube-scheduler's NodeUnschedulable and TaintToleration filters, for verify's GPU test pods: a control plane
    keeping its NoSchedule taint and a cordoned node never take them; the GPU taint they tolerate does not stop
    them, nor does a PreferNoSchedule taint (found against the real scheduler: tests/controlplane)."""
    from gpustack.diagnose.collect_workload import takes_gpu_pods

    def node(**spec: object) -> dict:
        return {"metadata": {"name": "n"}, "spec": spec}

    assert takes_gpu_pods(node())
    assert takes_gpu_pods(node(taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]))
    assert takes_gpu_pods(node(taints=[{"key": "x", "effect": "PreferNoSchedule"}]))
    assert not takes_gpu_pods(node(taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]))
    assert not takes_gpu_pods(node(taints=[{"key": "gpustack.io/quarantine", "value": "true", "effect": "NoExecute"}]))
    assert not takes_gpu_pods(node(unschedulable=True))
