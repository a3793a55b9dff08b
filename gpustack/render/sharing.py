"""What GPU sharing (``gpu_sharing`` per node, ``gpu.mig_strategy``) becomes in the cluster. Pure.

- GPU Operator values (:func:`operator_values`, laid out by values/gpu-operator.yaml.j2): ``mig.strategy`` and
  ``migManager`` when a node uses MIG; ``devicePlugin.config`` naming gpustack's device-plugin ConfigMap when a
  node time-slices or uses MPS;
- the ConfigMap ``gpustack-device-plugin-config`` in the operator's namespace (:func:`device_plugin_configmap`):
  one key per time-slicing / MPS setting (and per time-sliced MIG layout) in k8s-device-plugin v0.20.0's config
  format (api/config/v1);
- the ConfigMap ``gpustack-mig-config`` when a node uses a custom MIG layout (:mod:`gpustack.render.mig_config`);
- the node labels (:func:`node_sharing`, :func:`label_changes`): ``nvidia.com/mig.config`` (the MIG manager applies it and reports
  ``nvidia.com/mig.config.state``) and ``nvidia.com/device-plugin.config`` (the device plugin's and GPU feature
  discovery's config-manager picks that key);
- the exporter (:func:`exporter_settings`): the standalone dcgm-exporter selects ``nvidia.com/gpu.deploy.client:
  "true"`` so the MIG manager stops it around a MIG change (gpu-operator v26.7.0 release notes, PR #2607; without
  it the exporter's DCGM holds the GPU and the change fails); ``--devices=f`` (dcgm-exporter pkg/cmd/app.go: every
  GPU, and every GPU instance of a MIG-enabled GPU); ``KUBERNETES_VIRTUAL_GPUS`` when GPUs are time-sliced, so each
  pod sharing a GPU gets its own series (dcgm-exporter internal/pkg/transformation/kubernetes.go), and with it
  ``hostPID``: from 4.8.2 (tag 4.5.3-4.8.2, PR #594) the exporter adds per-pod, per-process GPU_UTIL and FB_USED
  series beside the device's (``process_metrics.go``), finding each GPU process's pod in ``/proc/<pid>/cgroup``
  (``pidmapper.go``), which it can only read in the host's PID namespace; without it every pod reads 0
  (``buildIdlePodValues``). Keys: dcgm-exporter chart 4.8.2 ``hostPID`` (deployment/values.yaml,
  templates/daemonset.yaml ``hostPID: {{ .Values.hostPID | default false }}``); gpu-operator v26.7.0
  ``dcgmExporter.hostPID`` (templates/clusterpolicy.yaml; ClusterPolicy ``DCGMExporterSpec.HostPID``,
  controllers/object_controls.go sets the DaemonSet's ``hostPID``).

Nodes without ``gpu_sharing`` get no label; a node that leaves MIG is labelled ``all-disabled`` (the MIG manager
then turns MIG off), a node that leaves time-slicing loses its device-plugin label (the cluster stage does both:
:mod:`gpustack.cluster.sharing`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from gpustack.config import mig
from gpustack.config import mig_layout as ml
from gpustack.config.model import Config
from gpustack.config.sharing import (
    MigSharing,
    Mps,
    Setting,
    TimeSlicing,
    describe,
    from_default,
    mig_nodes,
    mig_strategy,
    plugin_key,
    plugin_resources,
    settings,
    shared_name,
    uses_custom_layouts,
)
from gpustack.constants import GPU_NAMESPACE
from gpustack.render.mig_config import MIG_CONFIGMAP

DEVICE_PLUGIN_CONFIGMAP = "gpustack-device-plugin-config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
DEVICE_PLUGIN_LABEL = "nvidia.com/device-plugin.config"
DEPLOY_CLIENT_LABEL = "nvidia.com/gpu.deploy.client"
GPU_RESOURCE = "nvidia.com/gpu"
Obj = dict[str, Any]


def device_plugin_settings(cfg: Config) -> dict[str, Setting]:
    """ConfigMap key -> the setting it holds, for every time-slicing / MPS setting (and time-sliced MIG) some node
    uses (sorted)."""
    found = {key: s for s in settings(cfg).values() if (key := plugin_key(cfg, s)) is not None}
    return dict(sorted(found.items()))


def device_plugin_config(sharing: Setting, resources: list[str] | None = None) -> str:
    """One key's content: k8s-device-plugin v0.20.0 ``Config`` (version v1, ``sharing.timeSlicing`` or
    ``sharing.mps``; ``resources``: ``nvidia.com/gpu``, or the ``nvidia.com/mig-<profile>`` names of a time-sliced
    MIG layout under mixed). ``renameByDefault`` is the setting's ``rename`` (false keeps the resource name: pods
    keep requesting ``nvidia.com/gpu``); ``failRequestsGreaterThanOne: true`` refuses a request for more than one
    shared device, which would not get more of it (docs gpu-sharing.rst; MPS's default)."""
    section = "mps" if isinstance(sharing, Mps) else "timeSlicing"
    replicas = sharing.replicas if isinstance(sharing, (TimeSlicing, Mps, MigSharing)) else None
    data = {
        "version": "v1",
        "sharing": {
            section: {
                "renameByDefault": bool(getattr(sharing, "rename", False)),
                "failRequestsGreaterThanOne": True,
                "resources": [{"name": r, "replicas": replicas} for r in (resources or [GPU_RESOURCE])],
            }
        },
    }
    return yaml.safe_dump(data, sort_keys=False)


def device_plugin_configmap(cfg: Config) -> Obj | None:
    """The device-plugin ConfigMap (None when no node time-slices or uses MPS)."""
    found = device_plugin_settings(cfg)
    if not found:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": DEVICE_PLUGIN_CONFIGMAP,
            "namespace": GPU_NAMESPACE,
            "labels": {"app.kubernetes.io/part-of": "gpustack"},
        },
        "data": {key: device_plugin_config(s, plugin_resources(cfg, s)) for key, s in found.items()},
    }


def operator_values(cfg: Config) -> Obj:
    """The GPU sharing part of the gpu-operator values template's context (empty mappings: nothing set)."""
    out: Obj = {"mig": {}, "mig_manager": {}, "device_plugin_config": ""}
    if mig_nodes(cfg):
        out["mig"] = {"strategy": mig_strategy(cfg)}
        env = [{"name": "WITH_REBOOT", "value": "true"}] if cfg.gpu.mig_reboot else []
        out["mig_manager"] = {"enabled": True, "env": env,
                              "config_name": MIG_CONFIGMAP if uses_custom_layouts(cfg) else ""}  # fmt: skip
    if device_plugin_settings(cfg):
        out["device_plugin_config"] = DEVICE_PLUGIN_CONFIGMAP
    return out


@dataclass(frozen=True)
class ExporterSettings:
    deploy_client: bool  # nodeSelector nvidia.com/gpu.deploy.client: "true"
    devices: str  # --devices / DCGM_EXPORTER_DEVICES_STR ("" = the exporter's default)
    virtual_gpus: bool  # KUBERNETES_VIRTUAL_GPUS
    host_pid: bool  # hostPID: the per-process series map a GPU process to its pod through /proc/<pid>/cgroup


#: the first GPU Operator that labels GPU nodes nvidia.com/gpu.deploy.client=true and stops the DaemonSets that select
#: it around MIG changes (v26.7.0 release notes; controllers/state_manager.go gpuStateLabels)
DEPLOY_CLIENT_SINCE = (26, 7)


def _operator_at_least(version: str, want: tuple[int, int]) -> bool:
    parts = version.removeprefix("v").split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= want
    except (ValueError, IndexError):
        return False


def exporter_settings(cfg: Config) -> ExporterSettings:
    has_mig = bool(mig_nodes(cfg))
    client = has_mig and _operator_at_least(cfg.versions.gpu_operator, DEPLOY_CLIENT_SINCE)
    virtual = any(plugin_key(cfg, s) for s in settings(cfg).values())
    return ExporterSettings(deploy_client=client, devices="f" if has_mig else "", virtual_gpus=virtual,
                            host_pid=virtual)  # fmt: skip


@dataclass(frozen=True)
class NodeSharing:
    """What one node's ``gpu_sharing`` asks of its labels."""

    node: str
    mig_config: str | None  # nvidia.com/mig.config; None: MIG off (all-disabled where the label is set)
    device_plugin: str | None  # nvidia.com/device-plugin.config; None: the label removed
    from_default: bool = False  # gpu_sharing.default: applied only where the node has NVIDIA GPUs


def node_sharing(cfg: Config) -> list[NodeSharing]:
    """The nodes with ``gpu_sharing`` (their own or their group's; a node without it is left alone; ``mode: none``
    means MIG off and no device-plugin config). MIG off is only written where a MIG configuration is set: the
    operator labels MIG-capable nodes ``all-disabled`` itself, and no MIG manager runs on other nodes to act on the
    label."""
    defaulted = {n.name for n in cfg.nodes if from_default(cfg, n)}
    return [NodeSharing(name, s.profile if isinstance(s, MigSharing) else None, plugin_key(cfg, s), name in defaulted)
            for name, s in settings(cfg).items()]  # fmt: skip


def label_changes(want: NodeSharing, labels: Mapping[str, str]) -> dict[str, str | None]:
    """The label changes (value, or None to remove) that bring a node with ``labels`` to ``want``."""
    out: dict[str, str | None] = {}
    current = labels.get(MIG_CONFIG_LABEL)
    if want.mig_config is not None and current != want.mig_config:
        out[MIG_CONFIG_LABEL] = want.mig_config
    elif want.mig_config is None and current not in (None, mig.ALL_DISABLED):
        out[MIG_CONFIG_LABEL] = mig.ALL_DISABLED
    if labels.get(DEVICE_PLUGIN_LABEL) != want.device_plugin:
        out[DEVICE_PLUGIN_LABEL] = want.device_plugin
    return out


def _mig_per_gpu(cfg: Config, s: MigSharing, device: str, index: int) -> dict[str, int] | None:
    if not s.custom:
        return mig.layout(device, s.profile)
    entries = cfg.gpu_sharing.mig_layouts.get(s.profile)
    return None if entries is None else ml.per_gpu(entries, index)


def expected_resources(cfg: Config, gpus: Mapping[str, tuple[str, ...]]) -> dict[str, dict[str, int]]:
    """Node -> extended resource -> allocatable count its sharing makes, from each node's GPU device ids
    (``gpus``: node -> one PCI id per GPU; nodes without ids are left out; a MIG layout gpustack does not know
    for a GPU too). MIG mixed: ``nvidia.com/mig-<profile>`` per GPU x instances (``nvidia.com/gpu`` = the GPUs a
    layout leaves whole, 0 on a node whose GPUs are all MIG); single: ``nvidia.com/gpu`` = all instances;
    time-slicing/MPS: GPUs x replicas; a time-sliced MIG layout: instances x replicas. A renamed shared resource
    is advertised as ``<name>.shared`` (and its unshared name as 0)."""
    strategy = mig_strategy(cfg)
    out: dict[str, dict[str, int]] = {}
    for name, s in settings(cfg).items():
        devices = gpus.get(name) or ()
        if not devices:
            continue
        if isinstance(s, (TimeSlicing, Mps)):
            out[name] = {GPU_RESOURCE: 0, shared_name(GPU_RESOURCE, True): len(devices) * s.replicas} if s.rename \
                else {GPU_RESOURCE: len(devices) * s.replicas}  # fmt: skip
            continue
        if not isinstance(s, MigSharing):
            out[name] = {GPU_RESOURCE: len(devices)}
            continue
        total: dict[str, int] = {}
        whole = 0
        for index, dev in enumerate(devices):
            layout = _mig_per_gpu(cfg, s, dev, index)
            if layout is None:
                break
            whole += 0 if layout else 1
            for profile, count in layout.items():
                key = GPU_RESOURCE if strategy == "single" else mig.resource_name(profile)
                total[key] = total.get(key, 0) + count
        else:
            if strategy == "mixed":
                total[GPU_RESOURCE] = whole
            out[name] = _shared(total, s, set(plugin_resources(cfg, s))) if s.replicas is not None else total
    return out


def _shared(total: dict[str, int], s: MigSharing, shared: set[str]) -> dict[str, int]:
    """A time-sliced MIG layout: each shared resource x replicas (renamed: ``<name>.shared``, the name 0)."""
    out: dict[str, int] = {}
    for k, v in total.items():
        if k not in shared:
            out[k] = v
        elif s.rename:
            out[k], out[shared_name(k, True)] = 0, v * (s.replicas or 1)
        else:
            out[k] = v * (s.replicas or 1)
    return out


def plan_rows(cfg: Config) -> list[list[str]]:
    """One row per node with ``gpu_sharing`` for `gpustack plan up`: node, mode, what is set, its labels
    (``nvidia.com/`` left out)."""
    wanted = {w.node: w for w in node_sharing(cfg)}
    where = describe(cfg)
    rows = []
    for name, s in settings(cfg).items():
        w = wanted[name]
        shared = " (as .shared)" if getattr(s, "rename", False) else ""
        if isinstance(s, MigSharing):
            what = f"{s.profile}, mig.strategy {mig_strategy(cfg)}"
            if s.custom:
                what += f" (layout in ConfigMap {MIG_CONFIGMAP})"
            if s.replicas is not None:
                what += f", each MIG device x{s.replicas}{shared}"
        elif isinstance(s, (TimeSlicing, Mps)):
            what = f"{s.replicas} pods per GPU{shared} (ConfigMap {DEVICE_PLUGIN_CONFIGMAP})"
        else:
            what = "whole GPUs"
        if where.get(name, "node") != "node":
            what += f"; from {where[name]}"
        short = MIG_CONFIG_LABEL.removeprefix("nvidia.com/"), DEVICE_PLUGIN_LABEL.removeprefix("nvidia.com/")
        mig_label = f"{short[0]}={w.mig_config}" if w.mig_config else f"{short[0]}={mig.ALL_DISABLED} if set"
        plugin = f"{short[1]}={w.device_plugin}" if w.device_plugin else f"no {short[1]}"
        rows.append([name, s.mode, what, f"{mig_label}; {plugin}"])
    return rows
