"""Load a scenario into the real control plane (:mod:`tests.controlplane.realize`) and wait until its controllers
and kwok have made it: every node Ready, every DaemonSet, Deployment and StatefulSet fully ready.

Custom resources get their real CustomResourceDefinitions where upstream publishes them through a registry this
machine reaches: prometheus-operator's, from its Go module at the version the pinned kube-prometheus-stack deploys
(``example/prometheus-operator-crd``: the files the chart's ``charts/crds`` copies). The GPU Operator's module is not
served by the Go module proxy, so ClusterPolicy gets a stand-in CRD (:data:`CLUSTERPOLICY_CRD`: the group, kind and
scope of NVIDIA's, no schema), named as a double in docs/testing.md. gpustack's own objects (the ServiceMonitor and
PrometheusRule) go in by server-side apply with gpustack's field manager, as ``up`` applies them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import yaml

from gpustack.runners.kube import ApiUnreachable, Kube
from tests.contract.upstream import facts
from tests.fakes.scenarios import Scenario
from tests.realbin.gobuild import download

from . import realize, written

Obj = dict[str, Any]
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator"
CLUSTERPOLICY_CRD: Obj = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterpolicies.nvidia.com"},
    "spec": {"group": "nvidia.com", "scope": "Cluster",
             "names": {"kind": "ClusterPolicy", "listKind": "ClusterPolicyList", "plural": "clusterpolicies",
                       "singular": "clusterpolicy"},
             "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}  # fmt: skip


def prometheus_operator_version() -> str:
    """The prometheus-operator the pinned kube-prometheus-stack deploys (tests/contract/upstream/versions.yaml)."""
    from gpustack.config import pins

    chart = pins.CHARTS["kube-prometheus-stack"].version
    return str(facts("versions")["kube-prometheus-stack"][chart]["prometheus_operator"])


def monitoring_crds() -> list[Obj]:
    """prometheus-operator's CRDs, from its Go module at :func:`prometheus_operator_version`."""
    root = download(PROMETHEUS_OPERATOR, prometheus_operator_version()) / "example" / "prometheus-operator-crd"
    return [yaml.load(p.read_text(), Loader=_CrdLoader) for p in sorted(root.glob("monitoring.coreos.com_*.yaml"))]


class _CrdLoader(yaml.SafeLoader):
    """PyYAML's safe loader, reading a plain ``=`` as the string it is (YAML 1.1's ``!!value`` tag, which PyYAML
    resolves but cannot construct: the CRDs list ``=`` among an enum's values)."""


_CrdLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


def until(probe: Callable[[], Any], what: Callable[[], str], timeout: float, every: float = 0.5) -> Any:
    """``probe()`` every ``every`` seconds until it is true; an API server too busy to answer one probe in time
    (ApiUnreachable: a loaded machine at 1,000 nodes) is asked again, not failed, until the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = probe()
        except ApiUnreachable:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            try:
                waiting = what()
            except ApiUnreachable as exc:
                waiting = f"an API server that does not answer ({exc})"
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {waiting}")
        time.sleep(every)


def _ready(kind: str, obj: Obj) -> bool:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"].get("generation"):
        return False
    if kind == "DaemonSet":
        want = status.get("desiredNumberScheduled")
        return bool(want) and status.get("numberReady") == want == status.get("updatedNumberScheduled")
    want = spec.get("replicas", 1)
    return status.get("readyReplicas") == want and status.get("replicas") == want


def settled(kube: Kube) -> str:
    """What is not ready yet ("" when everything is)."""
    pending = []
    for api, kind in (("apps/v1", "DaemonSet"), ("apps/v1", "Deployment"), ("apps/v1", "StatefulSet")):
        pending += [f"{kind} {o['metadata']['namespace']}/{o['metadata']['name']}"
                    for o in kube.list_all(f"/apis/{api}/{kind.lower()}s") if not _ready(kind, o)]  # fmt: skip
    nodes = kube.list_all("/api/v1/nodes")
    pending += [f"Node {n['metadata']['name']}" for n in nodes if not any(
        c["type"] == "Ready" and c["status"] == "True" for c in (n.get("status") or {}).get("conditions") or [])]  # fmt: skip
    return ", ".join(pending[:8]) + (f" and {len(pending) - 8} more" if len(pending) > 8 else "")


def load(
    kube: Kube, scenario: Scenario, *, timeout: float = 300, crds: bool = True, write_daemonset_pods: bool = False
) -> dict[str, float]:
    """Create the scenario's inputs (first the CRDs, unless ``crds`` is off: a second scenario in the same
    cluster), wait for its controllers; seconds each step took. ``write_daemonset_pods``: the DaemonSets' pods and
    status written as their controller and kubelet would (:mod:`tests.controlplane.written`; the control plane
    must run without the daemonset-controller: ``written.CONTROLLER_ARGS``)."""
    took: dict[str, float] = {}
    t = time.monotonic()
    if crds:
        defs = [*monitoring_crds(), CLUSTERPOLICY_CRD]
        kube.apply(defs)
        kube.wait_for_crds([c["metadata"]["name"] for c in defs], time.monotonic() + 60)
    took["crds"] = time.monotonic() - t
    objs = realize.inputs(scenario)
    t = time.monotonic()
    for obj in objs:
        if obj["kind"] in ("Namespace", "Node"):
            kube.apply_one(obj)
    nodes = {n["metadata"]["name"]: n["metadata"]["uid"] for n in kube.list_all("/api/v1/nodes")}
    for obj in objs:
        if obj["kind"] in ("Namespace", "Node"):
            continue
        if obj["kind"] == "Pod":  # a mirror pod: created as the kubelet does (a create, owned by its node)
            pod = realize.own(obj, nodes)
            kube.request("POST", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", body=pod)
            continue
        kube.apply_one(obj)
    for obj in realize.statuses(scenario):
        res = kube.resource(obj["apiVersion"], obj["kind"])
        assert res is not None, obj["kind"]
        path = res.path(obj["metadata"]["name"], obj["metadata"].get("namespace")) + "/status"
        kube.request("PATCH", path, body={"status": obj["status"]}, content_type="application/merge-patch+json")
    if write_daemonset_pods:
        written.write_daemonset_pods(kube, scenario)
    took["create"] = time.monotonic() - t
    t = time.monotonic()
    # each probe LISTs every node and workload: every 0.5 s at a few nodes, every 5 s at 1,000 (the probe's own
    # LISTs of 1,000 nodes twice a second kept the API server busy enough that kwok's Lease renewals fell behind)
    every = min(5.0, max(0.5, len(nodes) / 200))
    until(lambda: not settled(kube), lambda: "the controllers and kwok: " + settled(kube), timeout, every)
    took["settle"] = time.monotonic() - t
    return took
