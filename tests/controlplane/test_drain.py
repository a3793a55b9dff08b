"""``node remove``'s drain (gpustack/cluster/drain.py) against the real Eviction API: the pods of a Deployment the
real ReplicaSet controller made, a PodDisruptionBudget whose status the real disruption controller keeps, a
DaemonSet the real DaemonSet controller runs on every node, kwok as the kubelets."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpustack.cluster import drain
from gpustack.runners.kube import Kube
from gpustack.runners.kubeconfig import kube_from_file

from .cluster import ControlPlane, kubectl
from .nodes import gpu_node

NS = "drain-test"
NODES = ("drain-w1", "drain-w2")
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def kube(control_plane: ControlPlane) -> Iterator[Kube]:
    for i, name in enumerate(NODES):
        node = gpu_node(name, index=10 + i)
        if name == "drain-w2":  # the workload starts on w1: w2 joins the schedulable pool once w1 is cordoned
            node["spec"] = {"unschedulable": True}
        kubectl(control_plane, "create", "-f", "-", stdin=json.dumps(node))
    kubectl(control_plane, "create", "namespace", NS)
    client = kube_from_file(control_plane.admin_kubeconfig)
    until(lambda: client.get("v1", "ServiceAccount", "default", NS), "the namespace's default ServiceAccount")
    yield client
    kubectl(control_plane, "delete", "namespace", NS, "--wait=false")
    kubectl(control_plane, "delete", "node", *NODES, "--ignore-not-found")


def until(probe: Callable[[], Any], what: str, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def deployment(name: str, replicas: int) -> Obj:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10.1"}],
                                           "terminationGracePeriodSeconds": 0}}}}  # fmt: skip


def daemonset(name: str) -> Obj:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10.1"}]}}}}  # fmt: skip


def budget(name: str, min_available: int) -> Obj:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": NS},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": name}}}}  # fmt: skip


def ready_pods(kube: Kube, app: str, node: str | None = None) -> list[Obj]:
    pods = kube.list_objects("v1", "Pod", NS, label_selector=f"app={app}")
    return [p for p in pods if not p["metadata"].get("deletionTimestamp") and (node is None or p["spec"].get(
        "nodeName") == node) and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get(
        "conditions") or [])]  # fmt: skip


def observed(kube: Kube, name: str, allowed: int) -> Obj:
    def check() -> Obj | None:
        pdb = kube.get("policy/v1", "PodDisruptionBudget", name, NS) or {}
        status = pdb.get("status") or {}
        ok = status.get("observedGeneration") == pdb["metadata"]["generation"] and status.get(
            "disruptionsAllowed") == allowed  # fmt: skip
        return pdb if ok else None

    return until(check, f"the disruption controller to allow {allowed} disruption(s) of {name}")  # type: ignore[no-any-return]


def test_a_budget_blocks_the_drain_before_anything_moves_then_a_relaxed_one_lets_it_finish(kube: Kube) -> None:
    kube.apply([deployment("web", 2), daemonset("agent"), budget("web", 2)])
    until(lambda: len(ready_pods(kube, "web", "drain-w1")) == 2, "web's two pods Running on drain-w1")
    until(lambda: ready_pods(kube, "agent", "drain-w1") and ready_pods(kube, "agent", "drain-w2"),
          "the DaemonSet's pod on each node")  # fmt: skip
    observed(kube, "web", 0)

    # the dry run: the real server's 429 for each web pod, nothing changed
    preview = drain.preview(kube, "drain-w1")
    assert not preview.ok
    assert sorted(p.name.split("-")[0] for p, _ in preview.blocked) == ["web", "web"]
    for _, why in preview.blocked:
        assert why == ("Cannot evict pod as it would violate the pod's disruption budget.; "
                       "The disruption budget web needs 2 healthy pods and has 2 currently")  # fmt: skip
    assert [why.split(":")[0] for _, why in preview.pods.skipped] == ["DaemonSet pod"]
    assert not (kube.get("v1", "Node", "drain-w1") or {})["spec"].get("unschedulable")

    # a drain that cannot finish: it times out naming the budget, and takes its cordon back
    with pytest.raises(drain.DrainError, match="The disruption budget web needs 2 healthy pods"):
        drain.drain(kube, "drain-w1", timeout=3, interval=0.5)
    node = kube.get("v1", "Node", "drain-w1") or {}
    assert not node["spec"].get("unschedulable")
    assert drain.CORDON_ANNOTATION not in (node["metadata"].get("annotations") or {})
    assert len(ready_pods(kube, "web", "drain-w1")) == 2

    # one pod may go at a time: the drain evicts both as the ReplicaSet controller replaces each on drain-w2
    kubectl_uncordon(kube, "drain-w2")
    kube.apply([budget("web", 1)])
    observed(kube, "web", 1)
    result = drain.drain(kube, "drain-w1", timeout=120, interval=0.5)
    assert sorted(r.split("/")[1].split("-")[0] for r in result.evicted) == ["web", "web"]
    assert result.cordoned
    node = kube.get("v1", "Node", "drain-w1") or {}
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"][drain.CORDON_ANNOTATION] == "gpustack node remove"
    assert ready_pods(kube, "web", "drain-w1") == []
    until(lambda: len(ready_pods(kube, "web", "drain-w2")) == 2, "web's replacements on drain-w2")
    assert ready_pods(kube, "agent", "drain-w1"), "the DaemonSet pod stays"


def kubectl_uncordon(kube: Kube, node: str) -> None:
    kube.request("PATCH", f"/api/v1/nodes/{node}", body={"spec": {"unschedulable": False}},
                 content_type="application/merge-patch+json")  # fmt: skip


def test_a_pod_no_controller_manages_is_refused(kube: Kube) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "loose", "namespace": NS},
           "spec": {"nodeName": "drain-w2", "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10.1"}]}}  # fmt: skip
    kube.request("POST", f"/api/v1/namespaces/{NS}/pods", body=pod)
    with pytest.raises(drain.DrainError, match=f"pods no controller manages: {NS}/loose"):
        drain.drain(kube, "drain-w2", timeout=10, interval=0.5)
    assert not (kube.get("v1", "Node", "drain-w2") or {})["spec"].get("unschedulable")
    assert kube.get("v1", "Pod", "loose", NS) is not None
