"""The mig-parted ConfigMap gpustack writes when a node uses a custom MIG layout (``gpu_sharing.mig_layouts``). Pure.

ClusterPolicy ``migManager.config.name`` naming a ConfigMap replaces the MIG manager's own configurations: the
operator mounts it and sets ``CONFIG_FILE=/mig-parted-config/config.yaml``, and the MIG manager then skips its
per-node discovery (NVIDIA/gpu-operator v26.7.0 ``controllers/object_controls.go`` TransformMIGManager;
NVIDIA/mig-parted v0.15.0 ``cmd/nvidia-mig-manager/main.go`` setupMigConfig). The ConfigMap must have the key
``config.yaml`` (gpu-operator v26.7.0 ``deployments/gpu-operator/values.yaml``, migManager.config) in mig-parted's
format (``version: v1``, ``mig-configs``). So it carries, beside the custom layouts:

- ``all-disabled`` (the operator labels every MIG-capable node with it when no label is set, and
  ``migManager.config.default`` is ``all-disabled``: gpu-operator ``controllers/nodelabeling_controller.go``) and
  ``all-enabled``;
- every ``all-<profile>`` and ``all-balanced`` of every GPU family gpustack knows (:mod:`gpustack.config.mig`),
  one entry per family with its ``device-filter`` as the operator's ``default-mig-parted-config`` writes it
  (``0x233010DE``: device 0x2330, vendor 0x10DE), so other nodes (and hand-set labels) keep working.

Custom layouts carry no device-filter: the preflight (P26) checks each node's GPUs can take its layout.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpustack.config import mig
from gpustack.config import mig_layout as ml
from gpustack.config.model import Config
from gpustack.config.sharing import uses_custom_layouts
from gpustack.constants import GPU_NAMESPACE

MIG_CONFIGMAP = "gpustack-mig-config"
CONFIG_KEY = "config.yaml"


def device_filter(family: mig.MigFamily) -> list[str]:
    """The family's PCI ids as the operator's static configuration writes them: ``0x233010DE``."""
    return [f"0x{d.removeprefix('0x').upper()}{mig.NVIDIA_VENDOR.upper()}" for d in family.device_ids]


def operator_configs() -> dict[str, list[dict[str, Any]]]:
    """``all-disabled``, ``all-enabled`` and every family's ``all-<profile>`` / ``all-balanced`` (sorted)."""
    out: dict[str, list[dict[str, Any]]] = {
        mig.ALL_DISABLED: [{"devices": "all", "mig-enabled": False}],
        mig.ALL_ENABLED: [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    }
    named: dict[str, list[dict[str, Any]]] = {}
    for fam in mig.FAMILIES:
        for name, layout in fam.configs().items():
            named.setdefault(name, []).append(
                {"device-filter": device_filter(fam), "devices": "all", "mig-enabled": True, "mig-devices": layout}
            )
    return {**out, **dict(sorted(named.items()))}


def mig_parted_config(cfg: Config) -> str:
    """The ``config.yaml`` text: the operator's names, then the custom layouts."""
    configs = operator_configs()
    for name, entries in sorted(cfg.gpu_sharing.mig_layouts.items()):
        configs[name] = ml.mig_parted_entries(entries)
    return yaml.safe_dump({"version": "v1", "mig-configs": configs}, sort_keys=False)


def mig_configmap(cfg: Config) -> dict[str, Any] | None:
    """The ConfigMap (None when no node uses a custom layout: the MIG manager's own discovery is kept)."""
    if not uses_custom_layouts(cfg):
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": MIG_CONFIGMAP,
            "namespace": GPU_NAMESPACE,
            "labels": {"app.kubernetes.io/part-of": "gpustack"},
        },
        "data": {CONFIG_KEY: mig_parted_config(cfg)},
    }
