"""The cluster stage's GPU sharing step: each node's ``gpu_sharing`` applied through the GPU Operator's own
mechanisms, after the releases (docs/gpu-sharing.md).

For every node with ``gpu_sharing`` (:func:`gpustack.render.sharing.node_sharing`):

- its device-plugin label ``nvidia.com/device-plugin.config`` is set to its key of the ConfigMap the cluster layer
  applied before the releases (or removed): the config-manager sidecar of the device plugin and of GPU feature
  discovery watches the label and switches configuration (k8s-device-plugin v0.20.0 cmd/config-manager);
- when its MIG configuration label ``nvidia.com/mig.config`` must change, the node is cordoned and its GPU pods are
  evicted first (the MIG manager does not evict workloads, and a process on a GPU makes the change fail: NVIDIA
  docs gpu-operator-mig.rst "MIG Manager requires that no user workloads are running"), through the drain of
  :mod:`gpustack.cluster.drain` (Eviction API, PodDisruptionBudgets respected). Then the label is set (and
  ``nvidia.com/mig.config.state`` cleared, so an old ``success`` is not mistaken for the new one) and the step
  waits for the MIG manager's ``nvidia.com/mig.config.state=success`` (mig-parted v0.15.0
  pkg/mig/reconfigure/reconfigure.go: pending -> rebooting -> success | failed). ``failed``, or still ``pending``
  at the deadline, is a :class:`MigChangeError` with the MIG manager's log command; the node is uncordoned either
  way (when this step cordoned it).

A converged node (labels as wanted, state ``success``) costs one GET and changes nothing. The device-plugin
ConfigMap and gpustack's mig-parted ConfigMap are deleted once no node uses them (the releases no longer name them
by then).

A custom MIG layout (``gpu_sharing.mig_layouts``) reaches the MIG manager through its mounted ConfigMap, which the
kubelet refreshes only on its sync period (about a minute), and the MIG manager reads the file when the label
changes (mig-parted v0.15.0 cmd/nvidia-mig-manager/main.go: a label change starts ``nvidia-mig-parted assert
-f <config>``). A layout added in this run may so be ``failed`` as "not present" on the first try: the step then
restarts the node's MIG manager once (the fix G12 gives: it applies the node's label again when it starts, with
the current file) after :data:`CONFIG_SYNC` seconds, and waits again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from gpustack.cluster.drain import DrainError, cordon, drain, requests_gpus
from gpustack.config import mig
from gpustack.config.model import Config
from gpustack.constants import GPU_NAMESPACE
from gpustack.errors import StageError
from gpustack.render.mig_config import MIG_CONFIGMAP, mig_configmap
from gpustack.render.sharing import (
    DEVICE_PLUGIN_CONFIGMAP,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    NodeSharing,
    device_plugin_configmap,
    label_changes,
    node_sharing,
)
from gpustack.runners.kube import Kube, Obj

#: how long one node's MIG change may take: the MIG manager waits up to 5 minutes for each GPU client to stop
#: (reconfigure.go), a first install also waits for the driver; with gpu.mig_reboot a reboot comes on top
MIG_TIMEOUT = 1800.0
REBOOT_EXTRA = 900.0
DRAIN_TIMEOUT = 600.0
CORDON_WHY = "gpustack up: MIG configuration change"
#: how long a ConfigMap change takes to reach a mounted volume (the kubelet's sync period, 1 minute, plus its cache)
CONFIG_SYNC = 90.0
MERGE = "application/merge-patch+json"


class MigChangeError(StageError):
    """A node's MIG configuration did not reach ``success`` (exit 1)."""


def mig_manager_hint(node: str) -> str:
    return (
        f"kubectl -n {GPU_NAMESPACE} logs -l app=nvidia-mig-manager -c nvidia-mig-manager --tail 50 "
        f"--prefix | grep {node}   # or the pod on the node: kubectl -n {GPU_NAMESPACE} get pods "
        f"-l app=nvidia-mig-manager --field-selector spec.nodeName={node}; gpustack doctor --check G12"
    )


@dataclass
class NodeOutcome:
    node: str
    changed: dict[str, str | None] = field(default_factory=dict)
    evicted: list[str] = field(default_factory=list)
    state: str = ""  # the MIG manager's state after the step ("" when no MIG configuration is set)
    note: str = ""


@dataclass
class SharingResult:
    nodes: list[NodeOutcome] = field(default_factory=list)
    configmap_deleted: bool = False
    mig_configmap_deleted: bool = False

    @property
    def changed(self) -> bool:
        return self.configmap_deleted or self.mig_configmap_deleted or any(n.changed for n in self.nodes)

    def detail(self) -> str:
        parts = []
        for n in self.nodes:
            if n.changed:
                labels = ", ".join(f"{k.removeprefix('nvidia.com/')}={v or '(removed)'}" for k, v in n.changed.items())
                evicted = f", {len(n.evicted)} GPU pod(s) evicted" if n.evicted else ""
                parts.append(f"{n.node}: {labels}{evicted}" + (f" -> {n.state}" if n.state else ""))
            elif n.note:
                parts.append(f"{n.node}: {n.note}")
        if self.configmap_deleted:
            parts.append(f"ConfigMap {DEVICE_PLUGIN_CONFIGMAP} deleted (no node uses it)")
        if self.mig_configmap_deleted:
            parts.append(f"ConfigMap {MIG_CONFIGMAP} deleted (no node uses a custom MIG layout)")
        if parts:
            return "; ".join(parts)
        return f"{len(self.nodes)} node(s) as configured" if self.nodes else "no node shares its GPUs"


def _labels(node: Obj) -> dict[str, str]:
    return {str(k): str(v) for k, v in ((node.get("metadata") or {}).get("labels") or {}).items()}


def patch_labels(kube: Kube, node: str, labels: dict[str, str | None]) -> Obj:
    """A JSON merge patch of the node's labels (None removes one, whoever set it)."""
    return kube.request("PATCH", f"/api/v1/nodes/{node}", body={"metadata": {"labels": labels}}, content_type=MERGE)


def restart_mig_manager(kube: Kube, node: str) -> int:
    """Clear the node's MIG state and delete its MIG manager pod (the DaemonSet starts another, which applies the
    node's label with the ConfigMap as mounted now); how many pods were deleted."""
    patch_labels(kube, node, {MIG_STATE_LABEL: None})
    pods = kube.list_objects("v1", "Pod", GPU_NAMESPACE, label_selector="app=nvidia-mig-manager")
    mine = [p for p in pods if ((p.get("spec") or {}).get("nodeName")) == node]
    return sum(kube.delete("v1", "Pod", str(p["metadata"]["name"]), GPU_NAMESPACE) for p in mine)


def wait_for_mig(
    kube: Kube,
    node: str,
    config: str,
    deadline: float,
    *,
    interval: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    retry_after: float | None = None,
) -> str:
    """Poll the node until the MIG manager reports ``success``; ``failed`` or the deadline raise. ``retry_after``
    (a custom layout): a ``failed`` is retried once, at that time, by restarting the node's MIG manager."""
    state = ""
    while True:
        obj = kube.get("v1", "Node", node) or {}
        labels = _labels(obj)
        state = labels.get(MIG_STATE_LABEL, "")
        if labels.get(MIG_CONFIG_LABEL) != config:
            raise MigChangeError(
                f"{node}: nvidia.com/mig.config changed to {labels.get(MIG_CONFIG_LABEL)!r} while gpustack waited for "
                f"{config!r}", stage="cluster", hosts=(node,), hint="something else labels this node; run gpustack up again",
            )  # fmt: skip
        if state == "success":
            return state
        if state == "failed" and retry_after is not None:
            sleep(max(0.0, retry_after - clock()))
            restart_mig_manager(kube, node)
            retry_after = None
            continue
        if state == "failed":
            raise MigChangeError(
                f"{node}: the MIG manager could not apply {config} (nvidia.com/mig.config.state=failed)",
                stage="cluster", hosts=(node,),
                hint="why: " + mig_manager_hint(node) + "; a configuration the GPU does not offer, a process still "
                "using the GPU, or a mode change that needs a reboot (gpu.mig_reboot: true) are the usual causes",
            )  # fmt: skip
        if clock() >= deadline:
            raise MigChangeError(
                f"{node}: MIG configuration {config} not applied in time "
                f"(nvidia.com/mig.config.state={state or '(not set)'})",
                stage="cluster", hosts=(node,),
                hint=("pending: a GPU client did not stop within the MIG manager's 5 minutes (a DaemonSet selecting "
                      "nvidia.com/gpu.deploy.client, the exporter); " if state == "pending" else
                      "no state: is the MIG manager running there (node label nvidia.com/gpu.deploy.mig-manager=true)? ")
                + mig_manager_hint(node),
            )  # fmt: skip
        sleep(max(0.0, min(interval, deadline - clock())))


#: node labels that say the node has NVIDIA GPUs: GPU feature discovery's, and node feature discovery's PCI
#: vendor label (the GPU Operator chart's NFD worker config, deployments/gpu-operator/values.yaml
#: ``sources.pci.deviceLabelFields: [vendor]``, labels ``feature.node.kubernetes.io/pci-10de.present=true``; the
#: operator schedules its operands on that label)
GPU_LABELS = ("nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present")
NO_GPU_NOTE = "no NVIDIA GPU (host facts, node labels, capacity): gpu_sharing.default not applied"


def has_gpus(node: Obj, gpu_nodes: Collection[str] = ()) -> bool:
    """The node has NVIDIA GPUs: its host facts list them (``gpu_nodes``), a GPU label says so, or it advertises
    ``nvidia.com/gpu``."""
    labels = _labels(node)
    capacity = ((node.get("status") or {}).get("capacity") or {}).get("nvidia.com/gpu")
    name = str((node.get("metadata") or {}).get("name") or "")
    return (name in gpu_nodes or any(str(labels.get(k)).lower() == "true" for k in GPU_LABELS)
            or str(capacity or "0") not in ("0", ""))  # fmt: skip


def converge_node(
    kube: Kube,
    want: NodeSharing,
    *,
    mig_timeout: float,
    gpu_nodes: Collection[str] = (),
    drain_timeout: float = DRAIN_TIMEOUT,
    interval: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[str], None] | None = None,
) -> NodeOutcome:
    out = NodeOutcome(want.node)
    node = kube.get("v1", "Node", want.node)
    if node is None:
        out.note = "not in the cluster (yet): nothing labelled"
        return out
    if want.from_default and not has_gpus(node, gpu_nodes):
        out.note = NO_GPU_NOTE
        return out
    labels = _labels(node)
    changes = label_changes(want, labels)
    mig_config = changes.get(MIG_CONFIG_LABEL) or labels.get(MIG_CONFIG_LABEL)
    if MIG_CONFIG_LABEL not in changes:
        if changes:
            patch_labels(kube, want.node, dict(changes))
            out.changed = dict(changes)
        state = labels.get(MIG_STATE_LABEL, "")
        if mig_config and mig_config != mig.ALL_DISABLED and state != "success":
            # set by an earlier run that failed or was interrupted: report it, wait for a change in progress
            out.state = wait_for_mig(kube, want.node, mig_config, clock() + mig_timeout, interval=interval,
                                     clock=clock, sleep=sleep)  # fmt: skip
        return out
    assert mig_config is not None
    try:
        drained = drain(kube, want.node, timeout=drain_timeout, interval=interval, clock=clock, sleep=sleep,
                        progress=progress, select=requests_gpus, why=CORDON_WHY)  # fmt: skip
    except DrainError as exc:
        raise MigChangeError(f"{want.node}: GPU pods must leave before the MIG change: {exc.message}",
                             stage="cluster", hosts=(want.node,), hint=exc.hint) from None  # fmt: skip
    out.evicted = drained.evicted
    try:
        patch_labels(kube, want.node, {**changes, MIG_STATE_LABEL: None})
        out.changed = dict(changes)
        custom = not mig_config.startswith("all-")
        out.state = wait_for_mig(kube, want.node, mig_config, clock() + mig_timeout, interval=interval,
                                 clock=clock, sleep=sleep, retry_after=clock() + CONFIG_SYNC if custom else None)  # fmt: skip
    finally:
        if drained.cordoned:
            cordon(kube, want.node, on=False)
    return out


def converge_sharing(
    cfg: Config,
    kube: Kube,
    *,
    mig_timeout: float | None = None,
    interval: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[str], None] | None = None,
    gpu_nodes: Collection[str] = (),
    only: Collection[str] | None = None,
    **kw: Any,
) -> SharingResult:
    """Bring every node with ``gpu_sharing`` to its labels (one node at a time: a MIG change drains that node
    only), then drop the device-plugin ConfigMap when no node uses it. ``gpu_nodes``: the nodes whose host facts
    list NVIDIA GPUs (a node whose setting is ``gpu_sharing.default`` is labelled only when it has GPUs);
    ``only``: these nodes only (``node add``), the ConfigMaps left as they are."""
    timeout = mig_timeout if mig_timeout is not None else MIG_TIMEOUT + (REBOOT_EXTRA if cfg.gpu.mig_reboot else 0.0)
    result = SharingResult()
    for want in node_sharing(cfg):
        if only is not None and want.node not in only:
            continue
        result.nodes.append(converge_node(kube, want, mig_timeout=timeout, interval=interval, clock=clock,
                                          sleep=sleep, progress=progress, gpu_nodes=gpu_nodes, **kw))  # fmt: skip
    if only is not None:
        return result
    if device_plugin_configmap(cfg) is None:
        result.configmap_deleted = _delete_own(kube, DEVICE_PLUGIN_CONFIGMAP)
    if mig_configmap(cfg) is None:
        result.mig_configmap_deleted = _delete_own(kube, MIG_CONFIGMAP)
    return result


def _delete_own(kube: Kube, name: str) -> bool:
    """Delete a ConfigMap of the operator's namespace that gpustack wrote (labelled part-of gpustack)."""
    existing = kube.get("v1", "ConfigMap", name, GPU_NAMESPACE)
    part_of = ((existing or {}).get("metadata") or {}).get("labels") or {}
    if existing is not None and part_of.get("app.kubernetes.io/part-of") == "gpustack":
        return kube.delete("v1", "ConfigMap", name, GPU_NAMESPACE)
    return False
