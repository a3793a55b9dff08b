"""A cluster for diag and health tests: the fake API server (real HTTP, the real ``kubernetes`` client) with
GPU nodes, and the Job simulator on a virtual clock that the runner's ``sleep`` advances."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpustack.runners.kube import Kube
from gpustack.runners.kubeconfig import kube_from_file
from tests.fakes.kube_api import FakeKubeAPI, JobSimulator, PodPlan

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgmi"


def fixture_log(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


class VirtualClock:
    """Monotonic seconds that only move when someone sleeps."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


def gpu_node(name: str, gpus: int = 8, *, allocatable: int | None = None, taints: list | None = None,
             unschedulable: bool = False, annotations: dict | None = None, labels: dict | None = None) -> dict:  # fmt: skip
    alloc = gpus if allocatable is None else allocatable
    spec: dict = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true", **(labels or {})},
                     "annotations": dict(annotations or {})},
        "spec": spec,
        "status": {"capacity": {"cpu": "96", "nvidia.com/gpu": str(gpus)},
                   "allocatable": {"cpu": "95", "nvidia.com/gpu": str(alloc)},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


def cpu_node(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "8"}}}  # fmt: skip


def workload_pod(node: str, gpus: int, name: str = "train-0", ns: str = "ml") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "trainer",
                                                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running"}}  # fmt: skip


@dataclass
class Cluster:
    api: FakeKubeAPI
    kube: Kube
    clock: VirtualClock
    jobs: JobSimulator
    kubeconfig: Path


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    clock = VirtualClock()
    with FakeKubeAPI.running() as api:
        api.seed([gpu_node("gpu-node-1"), gpu_node("gpu-node-2"), cpu_node("cpu-1")])
        sim = JobSimulator(api, {}, clock=clock).install()
        kc = api.write_kubeconfig(tmp_path / "kubeconfig")
        yield Cluster(api, kube_from_file(kc), clock, sim, kc)


def plan(log_fixture: str, *, seconds: float = 130.0, phase: str = "Succeeded", exit_code: int = 0) -> PodPlan:
    return PodPlan(log=fixture_log(log_fixture), phase=phase, exit_code=exit_code, run_seconds=seconds)
