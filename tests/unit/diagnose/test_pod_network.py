"""verify's pod-network probe against the fake API server: the pod the kubelet runs (here: the
``on_create`` hook gives it the kubelet's verdict and agnhost's output) and the K09 finding for each
outcome agnhost reports -- success, DNS failure, timeout, refused -- plus a stuck image pull. The probe
pod is deleted every time."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.diagnose import registry
from gpustack.diagnose.collect import CollectContext
from gpustack.diagnose.collect_workload import NET_IMAGE, NET_TARGET, VERIFY_NAMESPACE, collect_pod_network, net_pod
from gpustack.diagnose.snapshot import Snapshot
from gpustack.runners.kube import Kube
from tests.fakes.kube_api import FakeKubeAPI

Obj = dict[str, Any]
FAST = {"net_deadline": 3.0, "poll_interval": 0.05, "stuck_grace": 0.3}


def kubelet(api: FakeKubeAPI, exit_code: int | None, stderr: str = "", node: str = "cp1") -> list[Obj]:
    """Every created pod ends with ``exit_code`` (None: stays Pending, image pull back-off)."""
    seen: list[Obj] = []

    def hook(obj: Obj) -> None:
        if obj.get("kind") != "Pod":
            return
        seen.append(obj)
        if exit_code is None:
            obj["status"] = {"phase": "Pending", "containerStatuses": [{"name": "main", "state": {"waiting": {
                "reason": "ImagePullBackOff", "message": f'Back-off pulling image "{NET_IMAGE}"'}}}]}  # fmt: skip
            return
        obj["spec"]["nodeName"] = node
        reason = "Completed" if exit_code == 0 else "Error"
        obj["status"] = {"phase": "Succeeded" if exit_code == 0 else "Failed", "containerStatuses": [
            {"name": "main", "state": {"terminated": {"reason": reason, "exitCode": exit_code}}}]}  # fmt: skip
        api.set_log(obj["metadata"]["namespace"], obj["metadata"]["name"], "main", stderr)

    api.on_create.append(hook)
    return seen


def probe(kube: Kube, command: str = "verify", workload: bool = True) -> Snapshot:
    snap = Snapshot()
    ctx = CollectContext(cfg=Config(), command=command, kubeconfig=None, workload=workload,
                         extra={"kube": kube, **FAST})  # fmt: skip
    collect_pod_network(ctx, snap)
    return snap


def k09(snap: Snapshot) -> list[Finding]:
    return registry.run([registry.load_all()["K09-pod-network-probe"]], snap)


def pods_left(api: FakeKubeAPI) -> list[str]:
    return [k[4] for k in api.objects if k[2] == "pods" and k[3] == VERIFY_NAMESPACE]


def test_probe_pod_is_unprivileged_and_targets_the_api_service_by_name() -> None:
    pod = net_pod()
    [c] = pod["spec"]["containers"]
    assert (
        c["command"][:2] == ["/agnhost", "connect"] and c["command"][-1] == NET_TARGET == "kubernetes.default.svc:443"
    )
    assert "nvidia.com/gpu" not in str(c["resources"]) and "runtimeClassName" not in pod["spec"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False and c["securityContext"]["capabilities"] == {
        "drop": ["ALL"]}  # fmt: skip
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_success_passes_and_deletes(fake_api: FakeKubeAPI, kube: Kube) -> None:
    seen = kubelet(fake_api, 0)
    snap = probe(kube)
    rec = snap.workload["net"]
    assert rec["phase"] == "Succeeded" and rec["deleted"] and rec["node"] == "cp1" and not pods_left(fake_api)
    assert seen[0]["spec"]["containers"][0]["image"] == NET_IMAGE
    [f] = k09(snap)
    assert f.status == "pass"


@pytest.mark.parametrize(
    ("stderr", "summary", "in_fix"),
    [
        ("DNS: lookup kubernetes.default.svc on 10.96.0.10:53: read udp 10.244.0.7:41000->10.96.0.10:53: i/o timeout\n",
         "CoreDNS does not answer pods", "K05"),
        ("TIMEOUT\n", "a pod times out connecting to the API service", "H04,K06"),
        ("REFUSED\n", "the API service refuses connections from pods", "kube-apiserver"),
        ("OTHER: dial tcp 10.96.0.1:443: connect: no route to host\n", "the pod-network probe did not complete",
         "gpustack doctor --layer kubernetes"),
    ],
)  # fmt: skip
def test_each_agnhost_failure_names_its_layer(fake_api: FakeKubeAPI, kube: Kube, stderr: str, summary: str,
                                             in_fix: str) -> None:  # fmt: skip
    kubelet(fake_api, 1, stderr)
    snap = probe(kube)
    assert snap.workload["net"]["phase"] == "Failed" and not pods_left(fake_api)
    [f] = k09(snap)
    assert f.status == "fail" and f.summary == summary and in_fix in f.fix
    assert stderr.strip()[:40] in f.evidence and f.host == "cp1"


def test_image_pull_back_off_is_stuck_and_names_the_image(fake_api: FakeKubeAPI, kube: Kube) -> None:
    kubelet(fake_api, None)
    snap = probe(kube)
    rec = snap.workload["net"]
    assert rec["stuck"] and rec["deleted"] and not pods_left(fake_api)
    [f] = k09(snap)
    assert f.status == "fail" and "stuck (ImagePullBackOff)" in f.summary and f"crictl pull {NET_IMAGE}" in f.fix


def test_not_run_for_doctor_nor_without_workload(fake_api: FakeKubeAPI, kube: Kube) -> None:
    for snap in (probe(kube, command="doctor"), probe(kube, workload=False)):
        assert "net" not in snap.workload
        [f] = k09(snap)
        assert f.status == "skip"
    assert not [r for r in fake_api.requests if r[0] == "POST"]


def test_unreadable_api_means_no_probe(kube: Kube, fake_api: FakeKubeAPI) -> None:
    snap = Snapshot()
    snap.errors["kubernetes"] = "the Kubernetes API is unreachable"
    collect_pod_network(CollectContext(cfg=Config(), command="verify", kubeconfig=None,
                                       extra={"kube": kube, **FAST}), snap)  # fmt: skip
    assert not fake_api.requests
    [f] = k09(snap)
    assert f.status == "skip" and "API unreadable" in f.summary


def test_no_ready_node_means_no_probe(kube: Kube, fake_api: FakeKubeAPI) -> None:
    """A pod no node can run would only wait out the deadline: K01 already names the cause."""
    snap = Snapshot(kube={"Node": [{"metadata": {"name": "cp1"},
                                    "status": {"conditions": [{"type": "Ready", "status": "False"}]}}]})  # fmt: skip
    collect_pod_network(CollectContext(cfg=Config(), command="verify", kubeconfig=None,
                                       extra={"kube": kube, **FAST}), snap)  # fmt: skip
    assert not [r for r in fake_api.requests if r[0] == "POST"]
    [f] = k09(snap)
    assert f.status == "skip" and "no Ready node" in f.summary
