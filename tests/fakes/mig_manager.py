"""TEST DOUBLE: the GPU Operator's MIG manager (k8s-mig-manager v0.15.0, pinned by gpu-operator v26.7.0) and what the
device plugin advertises after it, run as a controller inside :class:`tests.fakes.kube_api.FakeKubeAPI` (a
``before_request`` hook: it advances on the request clock, no thread).

What it imitates (NVIDIA/mig-parted v0.15.0 ``cmd/nvidia-mig-manager/main.go`` and
``pkg/mig/reconfigure/reconfigure.go``):

- it watches each GPU node's label ``nvidia.com/mig.config``; a value it has not applied yet starts a change:
  ``nvidia.com/mig.config.state=pending``, the operands' deploy labels ``paused-for-mig-change``;
- a config name the node's MIG configuration does not hold (``<node>-mig-config``: what
  :func:`gpustack.config.mig.layout` says the GPU takes) -> ``failed``, logging ``selected mig-config not present``;
- a GPU still used by a pod (a pod on the node requesting ``nvidia.com/gpu`` or ``nvidia.com/mig-*``) ->
  ``failed``, logging the driver's ``In use by another client`` (mig-parted apply cannot destroy the instances);
- ``stuck=True``: a GPU client never stops -> ``pending`` forever with the operands paused (the 5-minute wait's
  timeout returns without setting a state);
- else after ``steps`` requests ``success``: deploy labels back to ``true``, and the node's allocatable as the
  device plugin then advertises it (mixed: ``nvidia.com/mig-<profile>`` per GPU x instances and
  ``nvidia.com/gpu: 0``; single: ``nvidia.com/gpu`` = every instance; ``all-disabled``: whole GPUs), with GPU
  feature discovery's ``nvidia.com/mig.strategy`` and product labels.

- ``custom=True``: ClusterPolicy ``migManager.config.name`` names gpustack's ConfigMap ``gpustack-mig-config``;
  the MIG manager then reads only that file (no discovery: gpu-operator v26.7.0 TransformMIGManager), as it was
  mounted when its pod started (the kubelet's sync lag: a key added later is "not present" until the pod is
  deleted, which the fake notices on its next tick and answers with a fresh mount and the label applied again).

Its log lines are kept per node in :attr:`FakeMigManager.logs` and, for the pod ``nvidia-mig-manager-<node>`` in
the operator namespace when one is seeded, served through the fake's log endpoint.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpustack.config import mig
from gpustack.constants import GPU_NAMESPACE
from gpustack.diagnose.objects import requests_gpus
from tests.fakes.kube_api import FakeKubeAPI

CONFIG = "nvidia.com/mig.config"
STATE = "nvidia.com/mig.config.state"
#: the labels reconfigure.go flips to paused-for-mig-change and back (maybeSetPaused / maybeSetTrue)
DEPLOY_LABELS = tuple(f"nvidia.com/gpu.deploy.{c}" for c in
                      ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm"))  # fmt: skip
PAUSED = "paused-for-mig-change"


class FakeMigManager:
    def __init__(
        self,
        api: FakeKubeAPI,
        gpus: dict[str, tuple[str, int]],
        *,
        strategy: str = "mixed",
        steps: int = 3,
        stuck: bool = False,
        custom: bool = False,
    ) -> None:
        """``gpus``: node -> (PCI device id, GPU count); ``strategy``: ClusterPolicy ``spec.mig.strategy``."""
        self.api, self.gpus, self.strategy, self.steps, self.stuck = api, gpus, strategy, steps, stuck
        self.custom = custom
        self.mounted: dict[str, dict[str, Any]] = {name: self._mount() for name in gpus}
        self.restarts: dict[str, int] = {}  # node -> pod restarts (the nodes whose pods start_pods seeded)
        self.applied: dict[str, str] = {}
        self.started: dict[str, int] = {}
        self.logs: dict[str, list[str]] = {}
        self.clock = 0
        api.before_request.append(self.tick)

    def _node(self, name: str) -> dict[str, Any] | None:
        return self.api.objects.get(("", "v1", "nodes", "", name))

    def _log(self, node: str, line: str) -> None:
        self.logs.setdefault(node, []).append(line)
        self.api.logs[(GPU_NAMESPACE, f"nvidia-mig-manager-{node}", "nvidia-mig-manager")] = "\n".join(self.logs[node])

    def _gpu_pods(self, node: str) -> list[str]:
        return [k[4] for k, o in self.api.objects.items() if k[2] == "pods" and o["spec"].get("nodeName") == node
                and requests_gpus(o) and (o.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]  # fmt: skip

    def _mount(self) -> dict[str, Any]:
        """``mig-configs`` of gpustack's ConfigMap as it is now ({} when absent or not custom)."""
        cm = self.api.objects.get(("", "v1", "configmaps", GPU_NAMESPACE, "gpustack-mig-config"))
        if not self.custom or cm is None:
            return {}
        return dict(yaml.safe_load(cm["data"]["config.yaml"])["mig-configs"])

    def _pod_key(self, name: str) -> tuple[str, str, str, str, str]:
        return ("", "v1", "pods", GPU_NAMESPACE, f"nvidia-mig-manager-{name}")

    def _layout(self, name: str, want: str, device: str) -> dict[str, int] | None:
        if not self.custom:
            return mig.layout(device, want)
        entries = self.mounted[name].get(want)
        if not entries:
            return None
        dev = device.removeprefix("0x").upper()
        mine = [e for e in entries if any(str(f).upper().startswith(f"0X{dev}") for f in e.get("device-filter") or [])]
        chosen = (mine or [e for e in entries if "device-filter" not in e] or [None])[0]
        return None if chosen is None else {str(k): int(v) for k, v in (chosen.get("mig-devices") or {}).items()}

    def tick(self) -> None:
        self.clock += 1
        for name in self.gpus:
            node = self._node(name)
            if node is None:
                continue
            if self.custom and self._pod_key(name) not in self.api.objects and name in self.restarts:
                # the DaemonSet's new pod: a fresh mount, and the node's label applied again when it starts
                self.api.objects[self._pod_key(name)] = self._pod(name)
                self.restarts[name] += 1
                self.mounted[name] = self._mount()
                self.applied.pop(name, None)
                self.started.pop(name, None)
            labels = node["metadata"].setdefault("labels", {})
            want = labels.get(CONFIG)
            if want is None or self.applied.get(name) == want:
                continue
            if name not in self.started:
                self.started[name] = self.clock
                self._log(name, f'level=info msg="Updating to MIG config: {want}"')
                labels[STATE] = "pending"
                labels.update({k: PAUSED for k in DEPLOY_LABELS})
                continue
            if self.stuck or self.clock - self.started[name] < self.steps:
                continue
            self._finish(name, node, labels, want)

    def _pod(self, name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"nvidia-mig-manager-{name}", "namespace": GPU_NAMESPACE,
                             "labels": {"app": "nvidia-mig-manager"}},
                "spec": {"nodeName": name, "containers": [{"name": "nvidia-mig-manager"}]},
                "status": {"phase": "Running"}}  # fmt: skip

    def start_pods(self) -> None:
        """Seed one MIG manager pod per GPU node (what the DaemonSet runs); deleting one restarts it."""
        for name in self.gpus:
            self.api.objects[self._pod_key(name)] = self._pod(name)
            self.restarts[name] = 0

    def _finish(self, name: str, node: dict[str, Any], labels: dict[str, str], want: str) -> None:
        del self.started[name]
        self.applied[name] = want
        labels.update({k: "true" for k in DEPLOY_LABELS})
        device, count = self.gpus[name]
        layout = {} if want == mig.ALL_DISABLED else self._layout(name, want, device)
        if layout is None:
            self._log(name, f"selected mig-config not present: {want}")
            self._log(name, 'level=error msg="Error: failed to validate MIG configuration: exit status 1"')
            labels[STATE] = "failed"
            return
        busy = self._gpu_pods(name)
        if busy and want != mig.ALL_DISABLED:
            self._log(name, "Unable to destroy GPU instance: In use by another client")
            self._log(name, 'level=error msg="Error: failed to apply MIG configuration: exit status 1"')
            labels[STATE] = "failed"
            return
        labels[STATE] = "success"
        self._log(name, f'level=info msg="Successfully updated to MIG config: {want}"')
        alloc = node.setdefault("status", {}).setdefault("allocatable", {})
        cap = node["status"].setdefault("capacity", {})
        for res in [r for r in alloc if r.startswith("nvidia.com/mig-")]:
            alloc.pop(res)
            cap.pop(res, None)
        if not layout:
            alloc["nvidia.com/gpu"] = cap["nvidia.com/gpu"] = str(count)
            labels.pop("nvidia.com/mig.strategy", None)
            return
        labels["nvidia.com/mig.strategy"] = self.strategy
        if self.strategy == "single":
            total = sum(layout.values()) * count
            alloc["nvidia.com/gpu"] = cap["nvidia.com/gpu"] = str(total)
            [profile] = layout
            base = labels.get("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3").split("-MIG-")[0]
            labels["nvidia.com/gpu.product"] = f"{base}-MIG-{profile.replace('+', '.')}"
            labels["nvidia.com/gpu.count"] = str(total)
            return
        alloc["nvidia.com/gpu"] = cap["nvidia.com/gpu"] = "0"
        for profile, n in layout.items():
            alloc[mig.resource_name(profile)] = cap[mig.resource_name(profile)] = str(n * count)
            labels[f"{mig.resource_name(profile)}.count"] = str(n * count)
