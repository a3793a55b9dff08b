"""``gpustack verify --load`` end to end: the CUDA pod and the dcgmproftester pod created through the fake
API server (real ``kubernetes`` client), Tensor Core activity read from a REAL Prometheus scraping the
replayed dcgm-exporters, reached through the fake API server's service proxy as verify reaches it, and
the M11 check that reads the result.

A small stand-in for the kubelet (an ``on_create`` hook) runs the verify pods on ``node-a``: the CUDA pod
succeeds at once; the load pod runs for a few seconds, and dcgm-exporter attributes its GPU to it after a
short lag (as it learns pods from the kubelet's pod-resources API) -- with the Tensor Cores saturated when
the load works, idle when it does not (e.g. profiling unavailable to the pod).
"""

from __future__ import annotations

import contextlib
import io
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.constants import MONITORING_NAMESPACE
from gpustack.diagnose.collect_prometheus import PROMETHEUS_PORT, PROMETHEUS_SERVICE
from gpustack.diagnose.collect_workload import TENSOR, VERIFY_NAMESPACE
from gpustack.diagnose.engine import DiagnoseOptions, diagnose
from gpustack.diagnose.snapshot import Snapshot
from gpustack.paths import kubeconfig_path
from tests.fakes import scenarios as sc
from tests.fakes.kube_api import FakeKubeAPI

from .harness import Stack, running_stack
from .releases import Release
from .replay_exporter import TENSOR_UNDER_LOAD, PodRef

pytestmark = [pytest.mark.prometheus]

NODE, LOAD_GPU = "node-a", 7  # node-a's free GPU; its other GPUs are busy with training and inference
ATTRIBUTION_LAG = 1.5  # s before dcgm-exporter labels the load pod's GPU with the pod
RUN_SECONDS = 6.0  # how long the fake dcgmproftester runs
KNOBS = {"workload_deadline": 10.0, "load_deadline": 30.0, "poll_interval": 0.2, "load_poll": 0.5, "stuck_grace": 5.0}
PROXY = f"/api/v1/namespaces/{MONITORING_NAMESPACE}/services/{PROMETHEUS_SERVICE}:{PROMETHEUS_PORT}/proxy"


@pytest.fixture(scope="module")
def load_stack(tmp_path_factory: pytest.TempPathFactory, prometheus_release: Release) -> Iterator[Stack]:
    """Its own stack: these tests hand node-a's free GPU to the load pod."""
    with running_stack(tmp_path_factory.mktemp("prometheus-load"), release=prometheus_release) as running:
        running.wait_until_scraped(samples=2)
        yield running


class Kubelet:
    """Runs the verify pods on node-a (an ``on_create`` hook of the fake API server)."""

    def __init__(self, api: FakeKubeAPI, stack: Stack, *, tensor_rises: bool) -> None:
        self.api, self.replay, self.tensor_rises = api, stack.exporters[NODE], tensor_rises
        self.timers: list[threading.Timer] = []
        self.load_pods: list[str] = []

    def later(self, seconds: float, fn: Callable[[], None]) -> None:
        timer = threading.Timer(seconds, fn)
        timer.daemon = True
        self.timers.append(timer)
        timer.start()

    def __call__(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if obj.get("kind") != "Pod" or meta.get("namespace") != VERIFY_NAMESPACE:
            return
        name, role = meta["name"], meta["labels"]["gpustack/verify"]
        obj["spec"]["nodeName"] = NODE
        if role == "gpustack-cuda":
            obj["status"] = {"phase": "Succeeded", "containerStatuses": [
                {"name": "main", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}  # fmt: skip
            self.api.set_log(VERIFY_NAMESPACE, name, "main", "GPU 0: NVIDIA H100 80GB HBM3\n")
            return
        self.load_pods.append(name)
        obj["status"] = {"phase": "Running", "containerStatuses": [
            {"name": "main", "ready": True, "state": {"running": {"startedAt": sc.STAMP}}}]}  # fmt: skip
        pod = PodRef(VERIFY_NAMESPACE, name, "main", load=self.tensor_rises, idle=not self.tensor_rises)
        self.later(ATTRIBUTION_LAG, lambda: self.replay.assign(LOAD_GPU, pod))
        self.later(RUN_SECONDS, lambda: self.finish(name))

    def finish(self, name: str) -> None:
        self.replay.assign(LOAD_GPU, None)
        with contextlib.suppress(KeyError):  # verify deletes the pod as soon as it has seen the load
            self.api.set_status("v1", "Pod", name, VERIFY_NAMESPACE, {"phase": "Succeeded", "containerStatuses": [
                {"name": "main", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]})  # fmt: skip

    def stop(self) -> None:
        for timer in self.timers:
            timer.cancel()
        self.replay.assign(LOAD_GPU, None)


def verify_load(stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *,
                tensor_rises: bool) -> tuple[int, dict[str, Any], Snapshot, FakeKubeAPI, Kubelet]:  # fmt: skip
    """``verify --load --check G10,M11`` with the admin kubeconfig pointing at a fake API server whose
    service proxy leads to the real Prometheus. Returns (exit code, findings by id, snapshot, api, kubelet)."""
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    nodes = [sc._node(i, 2) for i in range(2)]
    for node, name in zip(nodes, ("node-a", "node-b"), strict=True):
        node["metadata"]["name"] = name
    prometheus = sc.service(PROMETHEUS_SERVICE, MONITORING_NAMESPACE, {"app": PROMETHEUS_SERVICE},
                            [(PROMETHEUS_PORT, 9090)], "10.96.20.90")  # fmt: skip
    with FakeKubeAPI.running() as api:
        api.seed([*nodes, prometheus])
        api.proxy_upstreams[(MONITORING_NAMESPACE, PROMETHEUS_SERVICE, PROMETHEUS_PORT)] = stack.prometheus.url
        kubelet = Kubelet(api, stack, tensor_rises=tensor_rises)
        api.on_create.append(kubelet)
        kc = kubeconfig_path("gpustack", tmp_path / "state")
        kc.parent.mkdir(parents=True)
        api.write_kubeconfig(kc)
        try:
            opts = DiagnoseOptions(command="verify", checks=("G10", "M11"), load=True, extra=dict(KNOBS))
            code, findings, snap = diagnose(Config(), opts, Console(stream=io.StringIO(), color=False))
        finally:
            kubelet.stop()
    return code, {f.id.split("-", 1)[0]: f for f in findings}, snap, api, kubelet


def _load_queries(api: FakeKubeAPI) -> list[str]:
    return [p for m, p, _ in api.requests if m == "GET" and p.startswith(PROXY + "/api/v1/query")]


def test_tensor_activity_rises_under_load_and_m11_passes(
    load_stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, by_id, snap, api, kubelet = verify_load(load_stack, tmp_path, monkeypatch, tensor_rises=True)

    assert code == 0, by_id
    assert by_id["G10"].status == "pass" and by_id["M11"].status == "pass", by_id
    load = snap.workload["load"]
    assert load["error"] == "" and load["before"] == 0.0, load
    assert load["during"] == pytest.approx(TENSOR_UNDER_LOAD), load
    pod = load["pod"]
    assert pod["pod"] == kubelet.load_pods[0] and pod["node"] == NODE and pod["deleted"]
    assert pod["elapsed"] < RUN_SECONDS, "stopped as soon as the load showed, before the run ended"
    queries = _load_queries(api)
    assert any(TENSOR in q and kubelet.load_pods[0] in q for q in queries), "the load pod's GPU, through the proxy"
    assert not [k for k in api.objects if k[2] == "pods" and k[3] == VERIFY_NAMESPACE], "every verify pod deleted"


def test_flat_tensor_activity_fails_m11_with_a_fix(
    load_stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load pod holds its GPU but its Tensor Cores stay idle, while the node's other GPUs are busy:
    their activity must not be mistaken for the load's."""
    code, by_id, snap, _, _ = verify_load(load_stack, tmp_path, monkeypatch, tensor_rises=False)

    assert code == 1
    assert by_id["G10"].status == "pass"
    finding = by_id["M11"]
    assert finding.status == "fail", snap.workload["load"]
    assert finding.summary == "Tensor Core activity did not rise under load"
    assert "before=0.0 during=0.0" in finding.evidence and "phase=Succeeded" in finding.evidence
    assert "gpustack doctor --check M08" in finding.fix
    assert snap.workload["load"]["pod"]["elapsed"] >= RUN_SECONDS - 0.5, "waited for the whole run"
