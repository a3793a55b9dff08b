"""kwok nodes carrying what the GPU Operator writes on a GPU node.

A node here is the Node the kubelet registers on a gpustack GPU host (``tests.fakes.scenarios`` builds it: the
pinned kubelet and containerd versions, 64 CPUs, 8 GPUs) with GPU feature discovery's labels
(``nvidia.com/gpu.product``, ``gpu.count``, the driver labels, ``nvidia.com/mig.*`` on MIG nodes) and the device
plugin's ``nvidia.com/gpu`` (or ``nvidia.com/mig-<profile>``) capacity, plus the label and annotation that hand it
to kwok (``type=kwok``, ``kwok.x-k8s.io/node: fake``). kwok adds the conditions, keeps them fresh through a Lease
and runs the pods bound to it; everything else comes from the real API server and controllers.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from tests.fakes import scenarios as sc

Obj = dict[str, Any]
KWOK_LABEL = {"type": "kwok"}
KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}


def gpu_node(name: str, *, index: int = 1, product: str = "NVIDIA-H100-80GB-HBM3", gpus: int = 8,
             mig: dict[str, int] | None = None, control_plane: bool = False) -> Obj:  # fmt: skip
    """One GPU node for kwok; ``mig``: MIG profile -> count (``mixed`` strategy resources, GFD's MIG labels)."""
    node = copy.deepcopy(sc._node(index, index + 2))
    meta = node["metadata"]
    meta["name"] = name
    meta["labels"].update({"kubernetes.io/hostname": name, "nvidia.com/gpu.product": product,
                           "nvidia.com/gpu.count": str(gpus), **KWOK_LABEL})  # fmt: skip
    if control_plane:
        meta["labels"]["node-role.kubernetes.io/control-plane"] = ""
    else:
        meta["labels"].pop("node-role.kubernetes.io/control-plane", None)
    meta["annotations"] = dict(KWOK_ANNOTATION)
    node["spec"] = {}  # the node IPAM controller assigns the pod CIDR
    status = node["status"]
    status.pop("conditions", None)  # kwok's node-initialize stage reports them
    resources = dict(status["capacity"], **{"nvidia.com/gpu": str(gpus)})
    if mig:
        meta["labels"].update({"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config": "custom",
                               "nvidia.com/mig.config.state": "success"})  # fmt: skip
        resources["nvidia.com/gpu"] = "0"
        resources.update({f"nvidia.com/mig-{profile}": str(n) for profile, n in mig.items()})
    status["capacity"], status["allocatable"] = dict(resources), dict(resources)
    status["addresses"] = [{"type": "Hostname", "address": name}]
    status["nodeInfo"]["machineID"] = machine_id(name)
    return node


def machine_id(name: str) -> str:
    """A machine id for kwok: its node-initialize stage writes ``nodeInfo.machineID`` back unquoted, so an all-digit
    id would become a number and fail its patch: this one starts with a hex letter, as most real ids hold one."""
    return "a" + hashlib.md5(name.encode()).hexdigest()[1:]
