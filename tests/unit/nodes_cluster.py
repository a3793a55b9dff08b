"""A small running cluster for the node add/remove and status tests, as objects for the fake API
server (tests/fakes/kube_api.py): nodes, the pods on them, a PodDisruptionBudget."""

from __future__ import annotations

from typing import Any

from gpustack.config import pins
from gpustack.constants import CONTROL_PLANE_LABEL

Obj = dict[str, Any]


def node(
    name: str,
    *,
    cp: bool = False,
    ready: bool = True,
    kubelet: str = f"v{pins.KUBERNETES['1.36']}",
    cordoned: bool = False,
    containerd: str = pins.CONTAINERD_VERSION,
    os_image: str = "Debian GNU/Linux 12 (bookworm)",
) -> Obj:
    labels = {"kubernetes.io/hostname": name} | ({CONTROL_PLANE_LABEL: ""} if cp else {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "nodeInfo": {  # every field of v1 NodeSystemInfo (all required)
                "kubeletVersion": kubelet,
                "kubeProxyVersion": kubelet,
                "machineID": f"machine-{name}",
                "systemUUID": f"uuid-{name}",
                "bootID": f"boot-{name}",
                "kernelVersion": "6.1.0-28-amd64",
                "osImage": os_image,
                "containerRuntimeVersion": f"containerd://{containerd}",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def pod(
    name: str,
    on: str,
    *,
    ns: str = "default",
    owner: tuple[str, str] | None = ("ReplicaSet", "web-6c9f"),
    labels: dict[str, str] | None = None,
    phase: str = "Running",
    mirror: bool = False,
    empty_dir: bool = False,
) -> Obj:
    meta: Obj = {"name": name, "namespace": ns, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "controller": True, "uid": f"uid-{owner[1]}"}
        ]
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    spec: Obj = {"nodeName": on, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10.1"}]}
    if empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    status: Obj = {"phase": phase}
    if phase == "Running":  # a running pod of a healthy app is Ready: the eviction API asks its budget only then
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def pdb(name: str, app: str, *, allowed: int, ns: str = "default", healthy: int = 2) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minAvailable": healthy, "selector": {"matchLabels": {"app": app}}},
        "status": {
            "observedGeneration": 1,  # the disruption controller has seen this spec (else evictions are 429)
            "disruptionsAllowed": allowed,
            "desiredHealthy": healthy,
            "currentHealthy": healthy,
            "expectedPods": healthy,
        },
    }


def cluster(*, allowed: int) -> list[Obj]:
    """cp1 (control plane), w1 and w2: web (2 replicas, budget minAvailable 2 -> ``allowed``), one on
    each worker; a DaemonSet pod and a cache pod with an emptyDir on w1; the static pods on cp1."""
    return [
        node("cp1", cp=True),
        node("w1"),
        node("w2"),
        pod("web-6c9f-a", "w1", labels={"app": "web"}),
        pod("web-6c9f-b", "w2", labels={"app": "web"}),
        pod("cache-0", "w1", owner=("StatefulSet", "cache"), labels={"app": "cache"}, empty_dir=True),
        pod("kube-flannel-ds-x", "w1", ns="kube-flannel", owner=("DaemonSet", "kube-flannel-ds")),
        pod("kube-apiserver-cp1", "cp1", ns="kube-system", owner=("Node", "cp1"), mirror=True),
        pdb("web", "web", allowed=allowed),
    ]
