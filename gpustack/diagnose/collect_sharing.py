"""The ``sharing-workload`` source (``verify`` only; ``--no-workload`` starts nothing): one CUDA test pod on each
node whose GPUs are shared, requesting what that node advertises, pinned to it, running ``nvidia-smi -L``
(G18-shared-gpu-test-pod reads ``snap.workload["sharing"]``).

- a MIG node (``nvidia.com/mig.config`` applied): under the mixed strategy one ``nvidia.com/mig-<profile>`` (the
  first the node advertises, as the operator's plugin validator picks it: gpu-operator cmd/nvidia-validator
  getGPUResourceName), under single one ``nvidia.com/gpu``; the pod must see exactly one ``MIG <profile>`` device
  (nvidia-smi -L prints ``MIG 1g.10gb Device 0: (UUID: MIG-...)``; NVIDIA docs gpu-operator-mig.rst);
- a time-sliced / MPS node (``nvidia.com/device-plugin.config``): one ``nvidia.com/gpu`` (or ``.shared``); the pod
  must see one GPU.

At most :data:`MAX_NODES` nodes, one pod at a time within the source's deadline; each pod is deleted whatever
happened (:func:`gpustack.diagnose.collect_workload.run_pod`).
"""

from __future__ import annotations

import time

from gpustack.diagnose import sharing as sh
from gpustack.diagnose.collect import CollectContext, source
from gpustack.diagnose.collect_prometheus import kube_client
from gpustack.diagnose.collect_workload import CUDA_IMAGE, gpu_pod, run_pod
from gpustack.diagnose.objects import items, labels_of, name_of
from gpustack.diagnose.snapshot import Obj, Snapshot

MAX_NODES = 4
SOURCE_TIMEOUT = 600.0


def targets(snap: Snapshot) -> list[Obj]:
    """One record per sharing node (without the pod): node, mode, resource, what nvidia-smi -L must show."""
    out: list[Obj] = []
    for node in items(snap, "Node"):
        labels, alloc = labels_of(node), sh.allocatable(node)
        if sh.mig_on(labels) and labels.get(sh.MIG_STATE) == "success":
            mig = sorted(k for k, v in alloc.items() if k.startswith(sh.MIG_PREFIX) and v > 0)
            product = str(labels.get(sh.PRODUCT) or "")
            if mig:
                resource, profile = mig[0], mig[0].removeprefix(sh.MIG_PREFIX)
            elif "-MIG-" in product and alloc.get(sh.GPU, 0) > 0:
                resource, profile = sh.GPU, product.rsplit("-MIG-", 1)[1].removesuffix("-SHARED")
            else:
                continue  # nothing to request: G14/G15 say why
            out.append({"node": name_of(node), "mode": "mig", "resource": resource, "expect": f"MIG {profile}"})
        elif labels.get(sh.PLUGIN_CONFIG):
            shared = sorted(k for k, v in alloc.items() if k.startswith(sh.GPU) and v > 0)
            if shared:
                mode = str(labels.get(sh.SHARING_STRATEGY) or "shared")
                out.append({"node": name_of(node), "mode": mode, "resource": shared[-1], "expect": "GPU "})
    return out[:MAX_NODES]


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
