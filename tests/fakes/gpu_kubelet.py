"""TEST DOUBLE: the scheduler, kubelet and ``nvidia-smi -L`` for verify's test pods on GPU nodes, behind
:class:`tests.fakes.kube_api.FakeKubeAPI` (an ``on_create`` hook). What the real ones do, for a pod in the
``gpustack-verify`` namespace requesting one extended resource:

- **scheduling** (kube-scheduler 1.36): the pod goes to the node its ``nodeSelector``
  ``kubernetes.io/hostname`` (or ``nodeName``) names, else to the first node that advertises the resource; a
  node whose allocatable lacks it leaves the pod ``Pending`` with condition ``PodScheduled=False``, reason
  ``Unschedulable`` and the scheduler's message: each node's first refusing filter, in the default order
  (``node(s) were unschedulable``, ``node(s) had untolerated taint(s)``, ``node(s) didn't match Pod's node
  affinity/selector``, ``Insufficient <resource>``: pkg/scheduler/framework/plugins nodeunschedulable,
  tainttoleration, nodeaffinity, noderesources/fit.go), counted and sorted, then the PostFilter verdicts
  (:func:`tests.fakes.kube_semantics.unschedulable`); checked against the real kube-scheduler 1.36.5 in
  tests/controlplane/test_golden_paths.py;
- **the container** on a node in :attr:`GpuKubelet.broken` ran ``nvidia-smi`` and failed: phase ``Failed``,
  ``terminated`` reason ``Error``, nvidia-smi's exit code 6 ("a query to find an object was unsuccessful",
  nvidia-smi(1) RETURN VALUE) and its message ``No devices were found``;
- **nvidia-smi -L** otherwise, the devices the device plugin handed the container: a whole or time-sliced GPU is
  one ``GPU 0: <name> (UUID: GPU-...)`` line (the shape of the real H100 capture
  tests/fixtures/gpu-probe/ubuntu2404-h100-80gb-hbm3/commands/nvidia-smi-L.txt); a MIG device (``nvidia.com/mig-<p>``
  under mig.strategy mixed, or ``nvidia.com/gpu`` on a node whose ``nvidia.com/gpu.product`` ends ``-MIG-<p>``:
  single) adds its line under the parent GPU, ``  MIG 1g.10gb     Device  0: (UUID: MIG-...)`` (profile padded to
  11 columns, index to 2: NVIDIA/cloud-native-docs gpu-operator/manifests/output/mig-nvidia-smi.txt @1c9e5bc and
  mig-mixed-nvidia-smi.txt @7554fd8, what ``nvidia-smi -L`` prints on an H100 under MIG). The GPU's name is GPU
  feature discovery's product label with its ``-MIG-<p>`` / ``-SHARED`` suffix removed and dashes read as spaces
  (``NVIDIA-H100-80GB-HBM3`` -> ``NVIDIA H100 80GB HBM3``).

Every pod is recorded in :attr:`GpuKubelet.ran` (name -> (node, resource, phase)).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from gpustack.constants import VERIFY_NAMESPACE
from tests.fakes import kube_semantics as ks
from tests.fakes.kube_api import FakeKubeAPI

Obj = dict[str, Any]
#: nvidia-smi -L's MIG device line (NVIDIA/cloud-native-docs gpu-operator/manifests/output/mig-nvidia-smi.txt)
MIG_LINE = "  MIG {profile:<11} Device {index:>2}: (UUID: MIG-{uuid})"
HOSTNAME = "kubernetes.io/hostname"
PRODUCT = "nvidia.com/gpu.product"


def _uuid(*parts: str) -> str:
    h = hashlib.sha256("/".join(parts).encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def gpu_name(product: str) -> str:
    """nvidia-smi's name of the GPU from GFD's product label (``NVIDIA-H100-80GB-HBM3-MIG-1g.10gb``)."""
    base = re.sub(r"(-MIG-[^-]+)?(-SHARED)?$", "", product) or "NVIDIA-H100-80GB-HBM3"
    return base.replace("-", " ")


def nvidia_smi_l(node: Obj, resource: str, pod: str) -> str:
    """What ``nvidia-smi -L`` prints in a container given one ``resource`` on ``node``."""
    name = str((node.get("metadata") or {}).get("name") or "")
    product = str(((node.get("metadata") or {}).get("labels") or {}).get(PRODUCT) or "")
    lines = [f"GPU 0: {gpu_name(product)} (UUID: GPU-{_uuid(name, pod, 'gpu')})"]
    mig = re.fullmatch(r"nvidia\.com/mig-(?P<p>.+?)(\.shared)?", resource)
    single = re.search(r"-MIG-(?P<p>[^-]+)(-SHARED)?$", product) if resource.startswith("nvidia.com/gpu") else None
    profile = mig["p"] if mig else single["p"] if single else ""
    if profile:
        lines.append(MIG_LINE.format(profile=profile, index=0, uuid=_uuid(name, pod, "mig")))
    return "\n".join(lines) + "\n"


#: the taint effects the scheduler filters on, and the one a cordoned node counts as
HARD_EFFECTS = ("NoSchedule", "NoExecute")
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def _tolerates(spec: Obj, taint: Obj) -> bool:
    """A pod toleration that matches the taint (k8s.io/api core/v1 Toleration.ToleratesTaint)."""
    for tol in spec.get("tolerations") or []:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol.get("key") == taint.get("key"):
                return True
        elif tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


class GpuKubelet:
    """``api.on_create.append(GpuKubelet(api))``; ``broken``: nodes whose GPU containers fail."""

    def __init__(self, api: FakeKubeAPI, broken: set[str] | None = None) -> None:
        self.api = api
        self.broken = broken or set()
        self.ran: dict[str, tuple[str, str, str]] = {}

    def _nodes(self) -> list[Obj]:
        return [o for (_, _, plural, _, _), o in sorted(self.api.objects.items()) if plural == "nodes"]

    @staticmethod
    def _has(node: Obj, resource: str) -> bool:
        alloc = (node.get("status") or {}).get("allocatable") or {}
        try:
            return int(str(alloc.get(resource, "0"))) >= 1
        except ValueError:
            return False

    def _filter(self, node: Obj, spec: Obj, wanted: str | None, resource: str) -> str:
        """The first default filter plugin that refuses ``node`` for the pod (its reason; "" when it fits), in the
        scheduler's order: NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit."""
        if (node.get("spec") or {}).get("unschedulable") and not _tolerates(spec, UNSCHEDULABLE_TAINT):
            return "node(s) were unschedulable"
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") in HARD_EFFECTS]
        if any(not _tolerates(spec, t) for t in taints):
            return "node(s) had untolerated taint(s)"
        if wanted not in (None, node["metadata"]["name"]):
            return "node(s) didn't match Pod's node affinity/selector"
        if not self._has(node, resource):
            return f"Insufficient {resource}"
        return ""

    def __call__(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        if obj.get("kind") != "Pod" or meta.get("namespace") != VERIFY_NAMESPACE:
            return
        spec = obj["spec"]
        limits = spec["containers"][0].get("resources", {}).get("limits", {})
        resource = next((str(k) for k in limits if str(k).startswith("nvidia.com/")), "")
        if not resource:
            return  # not a GPU pod (the pod-network probe): another hook runs it
        nodes = self._nodes()
        wanted = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME)
        verdicts = [self._filter(n, spec, wanted, resource) for n in nodes]
        fits = [n for n, why in zip(nodes, verdicts, strict=True) if not why]
        if not fits:
            counts: dict[str, int] = {}
            for why in verdicts:
                counts[why] = counts.get(why, 0) + 1
            parts = sorted(f"{n} {why}" for why, n in counts.items())  # FitError: the reasons' histogram, sorted
            obj["status"] = {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": ks.unschedulable(len(nodes), parts)}]}  # fmt: skip
            self.ran[meta["name"]] = (str(wanted or ""), resource, "Pending")
            return
        node = fits[0]
        name = node["metadata"]["name"]
        spec["nodeName"] = name
        if name in self.broken:
            state, phase, log = {"exitCode": 6, "reason": "Error"}, "Failed", "No devices were found\n"
        else:
            state, phase = {"exitCode": 0, "reason": "Completed"}, "Succeeded"
            log = nvidia_smi_l(node, resource, meta["name"])
        obj["status"] = {"phase": phase, "containerStatuses": [
            {"name": "main", "ready": False, "restartCount": 0, "state": {"terminated": state}}]}  # fmt: skip
        self.api.set_log(VERIFY_NAMESPACE, meta["name"], "main", log)
        self.ran[meta["name"]] = (name, resource, phase)
