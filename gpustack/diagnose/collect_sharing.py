"""The ``sharing-workload`` source (``verify`` only; ``--no-workload`` starts nothing): one CUDA test pod on each
node whose GPUs are shared, requesting what that node advertises, pinned to it, running ``nvidia-smi -L``
(G18-shared-gpu-test-pod reads ``snap.workload["sharing"]``).

- a MIG node (``nvidia.com/mig.config`` applied): under the mixed strategy one ``nvidia.com/mig-<profile>`` (the
  first the node advertises, as the operator's plugin validator picks it: gpu-operator cmd/nvidia-validator
  getGPUResourceName), under single one ``nvidia.com/gpu``; the pod must see exactly one ``MIG <profile>`` device
  under its GPU (nvidia-smi -L prints ``  MIG 1g.10gb     Device  0: (UUID: MIG-...)`` below the ``GPU 0: ...``
  line: NVIDIA/cloud-native-docs gpu-operator/manifests/output/mig-nvidia-smi.txt, mig-mixed-nvidia-smi.txt);
- a time-sliced / MPS node (``nvidia.com/device-plugin.config`` or GFD's ``nvidia.com/gpu.sharing-strategy``): one
  ``nvidia.com/gpu`` (``nvidia.com/gpu.shared`` when renamed); the pod must see one GPU.

Resource names are read from each node's allocatable (:func:`advertised`), never assumed: ``nvidia.com/gpu``,
``nvidia.com/gpu.shared``, ``nvidia.com/mig-<profile>`` and ``nvidia.com/mig-<profile>.shared`` all work. A node that
shares nothing gets no pod here: the workload source's whole-GPU CUDA pod runs on one of those
(:func:`gpustack.diagnose.collect_workload.whole_gpu_node`).

At most :data:`MAX_NODES` nodes, one pod at a time within the source's deadline; each pod is deleted whatever
happened (:func:`gpustack.diagnose.collect_workload.run_pod`).
"""

from __future__ import annotations

import re
import time

from gpustack.diagnose import sharing as sh
from gpustack.diagnose.collect import CollectContext, source
from gpustack.diagnose.collect_prometheus import kube_client
from gpustack.diagnose.collect_workload import CUDA_IMAGE, gpu_pod, run_pod, shares_gpus, takes_gpu_pods
from gpustack.diagnose.objects import items, labels_of, name_of
from gpustack.diagnose.snapshot import Obj, Snapshot

MAX_NODES = 4
SOURCE_TIMEOUT = 600.0


#: what the NVIDIA device plugin advertises (k8s-device-plugin v0.20.0): whole or time-sliced GPUs as
#: ``nvidia.com/gpu``, MIG devices as ``nvidia.com/mig-<profile>`` (mig.strategy mixed), each with ``.shared``
#: appended when shared replicas are renamed (``renameByDefault: true``: api/config/v1/resources.go
#: DefaultSharedRename, consts.go DefaultSharedResourceNameSuffix; GPU Operator docs gpu-sharing.rst
#: ``nvidia.com/gpu.shared``)
GPU_RESOURCE = re.compile(r"nvidia\.com/gpu(?P<shared>\.shared)?")
MIG_RESOURCE = re.compile(r"nvidia\.com/mig-(?P<profile>\d+g\.[^/]+?)(?P<shared>\.shared)?")


def advertised(node: Obj) -> tuple[list[str], list[str]]:
    """(GPU resources, MIG resources) the node has at least one of, sorted, read from its allocatable (so a
    renamed resource is found under its new name)."""
    alloc = {k: v for k, v in sh.allocatable(node).items() if v > 0}
    return sorted(k for k in alloc if GPU_RESOURCE.fullmatch(k)), sorted(k for k in alloc if MIG_RESOURCE.fullmatch(k))


def target(node: Obj) -> Obj | None:
    """The test pod's record for one node (without the pod): node, mode, resource, what nvidia-smi -L must show;
    None when the node shares nothing, or advertises nothing to request (G14/G15 say why)."""
    labels = labels_of(node)
    gpus, migs = advertised(node)
    if sh.mig_on(labels):
        if labels.get(sh.MIG_STATE) != "success":
            return None  # the MIG manager has not finished: G12/G13 report it
        product = str(labels.get(sh.PRODUCT) or "")
        if migs:  # mixed: the first MIG device type it advertises, as the operator's plugin validator picks it
            resource = migs[0]
            match = MIG_RESOURCE.fullmatch(resource)
            profile = match["profile"] if match else ""
        elif "-MIG-" in product and gpus:  # single: every device is a MIG device of one profile
            resource, profile = gpus[-1], product.rsplit("-MIG-", 1)[1].removesuffix("-SHARED")
        else:
            return None
        return {"node": name_of(node), "mode": "mig", "resource": resource, "expect": f"MIG {profile}"}
    if shares_gpus(labels) and gpus:  # time-slicing / MPS: one replica of a GPU (gpu.shared when renamed)
        mode = str(labels.get(sh.SHARING_STRATEGY) or "shared")
        return {"node": name_of(node), "mode": mode, "resource": gpus[-1], "expect": "GPU "}
    return None


def targets(snap: Snapshot) -> list[Obj]:
    """One record per sharing node verify's pods can go to (:func:`takes_gpu_pods`: not cordoned, no untolerated
    taint, e.g. a control plane that keeps its NoSchedule taint), at most :data:`MAX_NODES`."""
    found = (target(node) for node in items(snap, "Node") if takes_gpu_pods(node))
    return [t for t in found if t is not None][:MAX_NODES]


@source("sharing-workload", layers=("gpu-operator",), after=("kubernetes",), timeout=SOURCE_TIMEOUT)
def collect_sharing_workload(ctx: CollectContext, snap: Snapshot) -> None:
    if ctx.command != "verify" or not ctx.workload or "Node" not in snap.kube:
        return  # the workload source records why test pods were skipped; G18 reads it
    wanted = targets(snap)
    if not wanted:
        snap.workload["sharing"] = []
        return
    kube = kube_client(ctx)
    if kube is None:
        snap.errors["sharing-workload"] = "no kubeconfig: cannot create the shared-GPU test pods"
        return
    end = time.monotonic() + float(ctx.extra.get("sharing_deadline", SOURCE_TIMEOUT - 60.0))
    records = []
    for rec in wanted:
        manifest = gpu_pod("gpustack-shared", CUDA_IMAGE, ["nvidia-smi", "-L"], resource=rec["resource"],
                           node=rec["node"])  # fmt: skip
        rec["pod"] = run_pod(kube, manifest, deadline=min(end, time.monotonic() + 240.0),
                             interval=float(ctx.extra.get("poll_interval", 2.0)),
                             stuck_grace=float(ctx.extra.get("stuck_grace", 30.0)))  # fmt: skip
        records.append(rec)
    snap.workload["sharing"] = records
