"""A fake cluster's objects (tests/fakes/scenarios.py) made real: what a real control plane needs to end up
holding the same cluster, its controllers doing the rest.

The scenarios describe a cluster as the fake API server stores it after ``gpustack up``: nodes, every pod
Running and Ready, DaemonSet and Deployment status, Endpoints. A real API server takes the *inputs* instead and
its controllers make the rest: :func:`inputs` turns a scenario into them --

- Nodes for kwok (:mod:`tests.controlplane.nodes`'s label and annotation; no conditions: kwok reports them; no pod
  CIDR: the node IPAM controller assigns it);
- DaemonSets, Deployments and StatefulSets with the pod template their scenario pods show (containers, init
  containers, images, labels); the real controllers create the pods, the real scheduler binds them, kwok runs
  them, and the controllers write the status the checks read;
- the control plane's static pods as the kubelet mirrors them (``kubernetes.io/config.mirror``, owned by their Node);
- Services with their selectors (the real endpoints controller writes Endpoints and EndpointSlices), Secrets, the
  monitoring custom resources, the ClusterPolicy;

and :func:`statuses` the status the operators would write (the Prometheus and ClusterPolicy status
subresources). What only a container could do stays out: pod logs (kwok serves none) and image digests.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from tests.controlplane.nodes import KWOK_ANNOTATION, KWOK_LABEL, machine_id
from tests.fakes.scenarios import Scenario

Obj = dict[str, Any]
#: namespaces every cluster has
BUILTIN_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}
#: objects a real cluster makes itself (the apiserver's own Service and Endpoints)
SKIP = {("Service", "default", "kubernetes"), ("Endpoints", "default", "kubernetes")}
MIRROR = "kubernetes.io/config.mirror"
#: every pod template tolerates every taint, as the scenarios' pods sit on every node (flannel, kube-proxy and the
#: GPU Operator's operands do the same)
TOLERATE_ALL = [{"operator": "Exists"}]


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _owner(pod: Obj) -> tuple[str, str] | None:
    for ref in _meta(pod).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind")), str(ref.get("name"))
    return None


def node_for_kwok(node: Obj) -> Obj:
    out = copy.deepcopy(node)
    meta = out["metadata"]
    meta["labels"] = {**meta.get("labels", {}), **KWOK_LABEL}
    meta["annotations"] = {**meta.get("annotations", {}), **KWOK_ANNOTATION}
    spec = {k: v for k, v in (out.get("spec") or {}).items() if k not in ("podCIDR", "podCIDRs")}
    out["spec"] = spec
    status = out.get("status") or {}
    status.pop("conditions", None)
    info = status.get("nodeInfo")
    if isinstance(info, dict):
        info["machineID"] = machine_id(meta["name"])
    out["status"] = status
    return out


def _template(pods: list[Obj], labels: Obj, *, tolerate: bool = True) -> Obj:
    """The pod template the controller's pods show (the first pod's containers and images); ``tolerate``: every
    taint (the cluster's own DaemonSets and Deployments run on the control plane too)."""
    spec = copy.deepcopy(pods[0]["spec"]) if pods else {"containers": [{"name": "main"}]}
    spec.pop("nodeName", None)
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            c.setdefault("image", "registry.k8s.io/pause:3.10.1")
    if tolerate:
        spec["tolerations"] = TOLERATE_ALL
    spec.setdefault("terminationGracePeriodSeconds", 0)
    return {"metadata": {"labels": dict(labels)}, "spec": spec}


def _controller(obj: Obj, pods: list[Obj]) -> Obj:
    out = {k: copy.deepcopy(v) for k, v in obj.items() if k != "status"}
    selector = out["spec"]["selector"]["matchLabels"]
    template = _template(
        pods, {**selector, **(out["spec"].get("template", {}).get("metadata", {}).get("labels") or {})}
    )
    given = (out["spec"].get("template") or {}).get("spec") or {}
    if given.get("containers") and all(c.get("image") for c in given["containers"]):  # a full template (Grafana)
        template["spec"]["containers"] = copy.deepcopy(given["containers"])
    out["spec"]["template"] = template
    return out


def _statefulset(name: str, ns: str, pods: list[Obj]) -> Obj:
    labels = dict(_meta(pods[0]).get("labels") or {})
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"replicas": len(pods), "serviceName": name, "selector": {"matchLabels": labels},
                     "template": _template(pods, labels, tolerate=False)}}  # fmt: skip


def _mirror(pod: Obj) -> Obj:
    """A static pod as the kubelet mirrors it (the Node owner is filled in once the Node exists: :func:`own`)."""
    out = {"apiVersion": "v1", "kind": "Pod", "metadata": copy.deepcopy(_meta(pod)), "spec": copy.deepcopy(pod["spec"])}
    meta = out["metadata"]
    meta.pop("ownerReferences", None)
    meta["annotations"] = {
        **meta.get("annotations", {}),
        MIRROR: "gpustack-test",
        "kubernetes.io/config.source": "file",
    }
    for c in out["spec"]["containers"]:
        c.setdefault("image", "registry.k8s.io/pause:3.10.1")
    out["spec"]["tolerations"] = TOLERATE_ALL
    return out


def inputs(scenario: Scenario) -> list[Obj]:
    """What to create, in order (namespaces first, then nodes, then what lives on them)."""
    objs = scenario.objects
    pods_of: dict[tuple[str, str, str], list[Obj]] = {}
    bare: list[Obj] = []
    for o in objs:
        if o["kind"] != "Pod":
            continue
        owner = _owner(o)
        if owner is None:
            bare.append(o)
            continue
        kind, name = owner
        if kind == "ReplicaSet":  # Deployment <name>-<hash>: the Deployment's pods
            kind, name = "Deployment", name.rsplit("-", 1)[0]
        pods_of.setdefault((kind, _meta(o).get("namespace", ""), name), []).append(o)
    namespaces = sorted(
        {str(_meta(o).get("namespace")) for o in objs if _meta(o).get("namespace")} - BUILTIN_NAMESPACES
    )
    out: list[Obj] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in namespaces]
    out += [node_for_kwok(o) for o in objs if o["kind"] == "Node"]
    made = set()
    for o in objs:
        kind, ns, name = o["kind"], _meta(o).get("namespace", ""), _meta(o).get("name", "")
        if (kind, ns, name) in SKIP or kind in ("Node", "Pod", "Endpoints", "Event"):
            continue
        if kind in ("DaemonSet", "Deployment"):
            out.append(_controller(o, pods_of.get((kind, ns, name), [])))
            made.add((kind, ns, name))
        elif kind == "Service":
            svc = copy.deepcopy(o)
            svc["spec"].pop("clusterIP", None)  # the allocator's choice: the scenario's may be taken
            out.append(svc)
        else:
            out.append({k: copy.deepcopy(v) for k, v in o.items() if k != "status"})
    for (kind, ns, name), pods in sorted(pods_of.items()):
        if kind == "StatefulSet":
            out.append(_statefulset(name, ns, pods))
    out += [_mirror(p) for p in bare]
    # the RuntimeClasses pods name, and the one the ClusterPolicy makes the GPU Operator create ("nvidia"): the
    # RuntimeClass admission refuses a pod naming one that does not exist
    handlers = sorted({str(p["spec"]["runtimeClassName"]) for p in objs if p["kind"] == "Pod"
                       and (p.get("spec") or {}).get("runtimeClassName")}
                      | {str(o["spec"]["operator"]["runtimeClass"]) for o in objs if o["kind"] == "ClusterPolicy"
                         and ((o.get("spec") or {}).get("operator") or {}).get("runtimeClass")})  # fmt: skip
    out[len(namespaces):len(namespaces)] = [{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                             "metadata": {"name": h}, "handler": h} for h in handlers]  # fmt: skip
    return out


def statuses(scenario: Scenario) -> list[Obj]:
    """The status subresources operators write for the custom resources (Prometheus, ClusterPolicy)."""
    return [o for o in scenario.objects if o["kind"] in ("Prometheus", "ClusterPolicy") and o.get("status")]


def own(obj: Obj, nodes: dict[str, str]) -> Obj:
    """A mirror pod owned by its Node (``nodes``: name -> uid), as the kubelet creates it."""
    node = obj["spec"]["nodeName"]
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": nodes[node],
                                           "controller": True}]  # fmt: skip
    return obj


def kinds(objs: Iterable[Obj]) -> list[str]:
    return sorted({o["kind"] for o in objs})
