"""A GPU cluster for the node patch tests, as objects for the fake API server (tests/fakes/kube_api.py): the
nodes of tests/unit/nodes_cluster.py with allocatable GPUs and a boot id, GPU jobs, and the GPU Operator's pods
on a node (labels as the GPU Operator's DaemonSets set them; gpustack/diagnose/checks_gpu.py reads the same)."""

from __future__ import annotations

from typing import Any

from gpustack.constants import GPU_NAMESPACE

from .nodes_cluster import node, pdb, pod

Obj = dict[str, Any]

OPERATOR_APPS = ("nvidia-driver-daemonset", "nvidia-device-plugin-daemonset", "nvidia-dcgm-exporter",
                 "nvidia-operator-validator")  # fmt: skip


def gpu_node(name: str, *, gpus: int = 8, boot: str = "boot-1", ready: bool = True, cordoned: bool = False) -> Obj:
    obj = node(name, ready=ready, cordoned=cordoned)
    obj["status"]["allocatable"] = {"cpu": "64", "nvidia.com/gpu": str(gpus)}
    obj["status"]["nodeInfo"]["bootID"] = boot
    return obj


def gpu_pod(name: str, on: str, *, owner: tuple[str, str] | None = ("Job", "train"), phase: str = "Running") -> Obj:
    obj = pod(name, on, owner=owner, phase=phase, labels={"app": name})
    obj["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return obj


def operator_pods(on: str, *, ready: bool = True) -> list[Obj]:
    out = []
    for app in OPERATOR_APPS:
        p = pod(f"{app}-{on}", on, ns=GPU_NAMESPACE, owner=("DaemonSet", app), labels={"app": app})
        if not ready:
            p["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        out.append(p)
    return out


def gpu_cluster(*, allowed: int = 1) -> list[Obj]:
    """cp1, g1 and g2 (8 GPUs each, the GPU Operator's pods Ready); web (a budget of ``allowed``) on g1 and g2."""
    return [
        node("cp1", cp=True),
        gpu_node("g1"),
        gpu_node("g2"),
        *operator_pods("g1"),
        *operator_pods("g2"),
        pod("web-6c9f-a", "g1", labels={"app": "web"}),
        pod("web-6c9f-b", "g2", labels={"app": "web"}),
        pdb("web", "web", allowed=allowed),
    ]
