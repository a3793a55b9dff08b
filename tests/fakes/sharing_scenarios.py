"""TEST DOUBLE DATA: gpustack clusters whose GPUs are shared, as the GPU Operator v26.7.0 leaves them, and one mutation
per GPU sharing failure (registered in :data:`tests.fakes.scenarios.FAILURES`, each naming the check that must fail).

Names and shapes from the upstream sources (tests/contract/upstream/gpu_sharing.yaml):

- MIG (:func:`make_mig`): node labels ``nvidia.com/mig.config`` / ``.state`` / ``nvidia.com/mig.capable`` /
  ``nvidia.com/mig.strategy``, the operands' ``nvidia.com/gpu.deploy.*`` labels, GPU feature discovery's
  ``nvidia.com/mig-<profile>.count``; allocatable ``nvidia.com/mig-1g.10gb: 56`` and ``nvidia.com/gpu: 0`` (mixed,
  8 H100s at all-1g.10gb); the MIG manager's ConfigMap ``<node>-mig-config`` as mig-parted v0.15.0
  pkg/mig/builder writes it (``all-disabled``, ``all-enabled``, ``all-<profile>`` per GI profile, ``all-balanced``;
  labels app.kubernetes.io/component=nvidia-mig-manager, nvidia.com/node-name) and its pods (app=nvidia-mig-manager);
  ClusterPolicy ``spec.mig.strategy``; the standalone exporter selecting ``nvidia.com/gpu.deploy.client``;
- time-slicing (:func:`make_time_sliced`): gpustack's device-plugin ConfigMap (rendered by gpustack itself), node
  label ``nvidia.com/device-plugin.config``, GFD's ``nvidia.com/gpu.replicas`` / ``gpu.sharing-strategy`` and the
  ``-SHARED`` product, allocatable GPUs x replicas; ClusterPolicy ``spec.devicePlugin.config``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from gpustack.config import mig
from gpustack.config.model import Config
from gpustack.constants import GPU_NAMESPACE
from gpustack.render.sharing import device_plugin_configmap

Obj = dict[str, Any]
H100 = "0x2330"
PROFILE = "all-1g.10gb"
DEPLOY = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm", "client", "mig-manager")


def mig_configmap(node: str, device: str = H100) -> Obj:
    """``<node>-mig-config`` as the MIG manager writes it for a node of one GPU type."""
    fam = mig.family_of(device)
    assert fam is not None
    configs: dict[str, Any] = {
        mig.ALL_DISABLED: [{"devices": "all", "mig-enabled": False}],
        mig.ALL_ENABLED: [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    }
    configs.update({n: [{"devices": "all", "mig-enabled": True, "mig-devices": layout}]
                    for n, layout in sorted(fam.configs().items())})  # fmt: skip
    text = yaml.safe_dump({"version": "v1", "mig-configs": configs}, sort_keys=False)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{node}-mig-config", "namespace": GPU_NAMESPACE,
                         "labels": {"app.kubernetes.io/component": "nvidia-mig-manager", "nvidia.com/node-name": node}},
            "data": {"config.yaml": text}}  # fmt: skip


def _policy(s: Any) -> Obj:
    return s.find("ClusterPolicy", "cluster-policy")  # type: ignore[no-any-return]


def _exporter_ds(s: Any) -> Obj | None:
    return next((o for o in s.objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "dcgm-exporter"), None)


def make_mig(s: Any, *, strategy: str = "mixed", profile: str = PROFILE) -> Obj:
    """The scenario's last node (the one worker, or the single node) at ``profile`` on its 8 H100s; returns it."""
    from tests.fakes.scenarios import GPUS, daemonset, pod

    node = s.nodes()[-1]
    name = node["metadata"]["name"]
    layout = mig.layout(H100, profile) or {}
    labels = node["metadata"]["labels"]
    labels.update({"nvidia.com/mig.config": profile, "nvidia.com/mig.config.state": "success",
                   "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": strategy,
                   **{f"nvidia.com/gpu.deploy.{c}": "true" for c in DEPLOY}})  # fmt: skip
    alloc, cap = node["status"]["allocatable"], node["status"]["capacity"]
    if strategy == "single":
        [(gi, n)] = layout.items()
        labels.update(
            {"nvidia.com/gpu.product": f"NVIDIA-H100-80GB-HBM3-MIG-{gi}", "nvidia.com/gpu.count": str(n * GPUS)}
        )
        alloc["nvidia.com/gpu"] = cap["nvidia.com/gpu"] = str(n * GPUS)
    else:
        alloc["nvidia.com/gpu"] = cap["nvidia.com/gpu"] = "0"
        for gi, n in layout.items():
            alloc[mig.resource_name(gi)] = cap[mig.resource_name(gi)] = str(n * GPUS)
            labels[f"{mig.resource_name(gi)}.count"] = str(n * GPUS)
    spec = _policy(s)["spec"]
    spec["mig"] = {"strategy": strategy}
    spec["migManager"] = {"enabled": True, "config": {"default": "all-disabled"}}
    s.objects.append(mig_configmap(name))
    s.objects.append(daemonset("nvidia-mig-manager", GPU_NAMESPACE, 1, {"app": "nvidia-mig-manager"}))
    s.objects.append(pod(f"nvidia-mig-manager-{name}", GPU_NAMESPACE, name, labels={"app": "nvidia-mig-manager"},
                         owner=("DaemonSet", "nvidia-mig-manager"), containers=("nvidia-mig-manager",)))  # fmt: skip
    ds = _exporter_ds(s)
    if ds is not None:  # gpustack's values with a MIG node (gpustack/render/sharing.py)
        ds["spec"]["template"]["spec"] = {
            "nodeSelector": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.client": "true"},
            "containers": [{"name": "exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04"}],
        }
    return node  # type: ignore[no-any-return]


def make_time_sliced(s: Any, replicas: int = 4) -> Obj:
    """The scenario's last node time-sliced ``replicas`` ways through gpustack's ConfigMap; returns it."""
    from tests.fakes.scenarios import GPUS

    node = s.nodes()[-1]
    name = node["metadata"]["name"]
    cfg = Config.model_validate({"nodes": [{"name": name, "address": "192.0.2.10", "role": "control-plane",
                                            "gpu_sharing": {"mode": "time-slicing", "replicas": replicas}}]})  # fmt: skip
    cm = device_plugin_configmap(cfg)
    assert cm is not None
    s.objects.append(cm)
    _policy(s)["spec"]["devicePlugin"] = {"enabled": True, "config": {"name": cm["metadata"]["name"], "default": ""}}
    labels = node["metadata"]["labels"]
    labels.update({"nvidia.com/device-plugin.config": f"time-slicing-{replicas}", "nvidia.com/gpu.replicas": str(replicas),
                   "nvidia.com/gpu.sharing-strategy": "time-slicing",
                   "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED"})  # fmt: skip
    node["status"]["allocatable"]["nvidia.com/gpu"] = node["status"]["capacity"]["nvidia.com/gpu"] = str(
        GPUS * replicas
    )
    return node  # type: ignore[no-any-return]


# --- mutations: one per GPU sharing failure ---------------------------------------------------------------


def _mig_log(s: Any, node: str, *lines: str) -> None:
    s.logs[(GPU_NAMESPACE, f"nvidia-mig-manager-{node}", "nvidia-mig-manager")] = "\n".join(
        ['level=info msg="Updating to MIG config: ' + PROFILE + '"', *lines]
    )


def m_mig_failed_in_use(s: Any) -> str:
    node = make_mig(s)
    node["metadata"]["labels"]["nvidia.com/mig.config.state"] = "failed"
    _mig_log(
        s,
        node["metadata"]["name"],
        "Unable to destroy GPU instance: In use by another client",
        'level=error msg="Error: failed to apply MIG configuration: exit status 1"',
    )
    return "G12-mig-config-state"


def m_mig_stuck_pending(s: Any) -> str:
    node = make_mig(s)
    labels = node["metadata"]["labels"]
    labels["nvidia.com/mig.config.state"] = "pending"
    for c in ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm", "client"):
        labels[f"nvidia.com/gpu.deploy.{c}"] = "paused-for-mig-change"
    name = node["metadata"]["name"]
    # the operands stopped; the standalone exporter (it selects gpu.deploy.client) hangs in its termination
    s.objects[:] = [o for o in s.objects if not (o["kind"] == "Pod" and o["spec"].get("nodeName") == name and
                    o["metadata"]["name"].startswith(("nvidia-device-plugin-daemonset-", "gpu-feature-discovery-")))]  # fmt: skip
    exporter = next(p for p in s.pods("dcgm-exporter-") if p["spec"]["nodeName"] == name)
    exporter["spec"]["nodeSelector"] = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.client": "true"}
    exporter["metadata"]["deletionTimestamp"] = "2026-11-20T10:05:00Z"
    _mig_log(
        s,
        name,
        'level=info msg="Waiting for any daemon set pods with nodeSelector key nvidia.com/gpu.deploy.client '
        'to shutdown"',
        'level=error msg="Error: failed to wait for pods to be deleted: third-party gpu client pods '
        'did not shutdown: timed out waiting for the condition"',
    )
    return "G12-mig-config-state"


def m_mig_profile_unsupported(s: Any) -> str:
    node = make_mig(s)
    node["metadata"]["labels"].update({"nvidia.com/mig.config": "all-1g.5gb", "nvidia.com/mig.config.state": "failed"})
    _mig_log(
        s,
        node["metadata"]["name"],
        "selected mig-config not present: all-1g.5gb",
        'level=error msg="Error: failed to validate MIG configuration: exit status 1"',
    )
    return "G13-mig-profile-supported"


def m_mig_whole_gpus(s: Any) -> str:
    from tests.fakes.scenarios import GPUS

    node = make_mig(s)
    _policy(s)["spec"].pop("mig")
    alloc = node["status"]["allocatable"]
    for res in [r for r in alloc if r.startswith("nvidia.com/mig-")]:
        alloc.pop(res)
        node["status"]["capacity"].pop(res)
    alloc["nvidia.com/gpu"] = node["status"]["capacity"]["nvidia.com/gpu"] = str(GPUS)
    node["metadata"]["labels"].pop("nvidia.com/mig.strategy")
    return "G14-mig-devices-advertised"


def m_mig_allocatable_short(s: Any) -> str:
    node = make_mig(s)
    node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "49"  # one GPU's seven instances missing
    return "G15-sharing-allocatable"


def m_exporter_no_deploy_client(s: Any) -> str:
    make_mig(s)
    ds = _exporter_ds(s)
    assert ds is not None
    ds["spec"]["template"]["spec"]["nodeSelector"].pop("nvidia.com/gpu.deploy.client")
    return "G17-exporter-mig-client"


def m_time_slicing_configmap_missing(s: Any) -> str:
    from tests.fakes.scenarios import _ds_degraded, _event, _waiting

    make_time_sliced(s)
    s.objects[:] = [o for o in s.objects if not (o["kind"] == "ConfigMap" and o["metadata"]["name"] ==
                                                 "gpustack-device-plugin-config")]  # fmt: skip
    p = s.pods("nvidia-device-plugin-daemonset-")[-1]
    _waiting(p, "ContainerCreating")
    _ds_degraded(s, "nvidia-device-plugin-daemonset")
    s.objects.append(_event(p, "FailedMount", 'MountVolume.SetUp failed for volume "available-configs" : configmap '
                            '"gpustack-device-plugin-config" not found'))  # fmt: skip
    return "G16-device-plugin-config"


def m_time_slicing_key_missing(s: Any) -> str:
    from tests.fakes.scenarios import _crashloop, _ds_degraded

    node = make_time_sliced(s)
    node["metadata"]["labels"]["nvidia.com/device-plugin.config"] = "time-slicing-8"
    p = s.pods("nvidia-device-plugin-daemonset-")[-1]
    _crashloop(p)
    _ds_degraded(s, "nvidia-device-plugin-daemonset")
    s.logs[(GPU_NAMESPACE, p["metadata"]["name"], p["status"]["containerStatuses"][0]["name"])] = (
        "E1120 config-manager: Error: specified config time-slicing-8 does not exist\n"
    )
    return "G16-device-plugin-config"


def m_time_slicing_config_invalid(s: Any) -> str:
    make_time_sliced(s)
    cm = s.find("ConfigMap", "gpustack-device-plugin-config")
    cm["data"]["time-slicing-4"] = cm["data"]["time-slicing-4"].replace("replicas: 4", "replicas: 1")
    return "G16-device-plugin-config"


def m_time_slicing_stale(s: Any) -> str:
    from tests.fakes.scenarios import GPUS

    node = make_time_sliced(s)  # the ConfigMap says 4; the plugin still runs with the 2 it started with
    node["metadata"]["labels"]["nvidia.com/gpu.replicas"] = "2"
    node["status"]["allocatable"]["nvidia.com/gpu"] = str(GPUS * 2)
    return "G15-sharing-allocatable"


#: failure name -> (nodes, mutation): merged into tests.fakes.scenarios.FAILURES
SHARING_FAILURES: dict[str, tuple[int, Callable[[Any], str]]] = {
    "mig-failed-in-use": (1, m_mig_failed_in_use),
    "mig-stuck-pending": (3, m_mig_stuck_pending),
    "mig-profile-unsupported": (1, m_mig_profile_unsupported),
    "mig-whole-gpus": (1, m_mig_whole_gpus),
    "mig-allocatable-short": (3, m_mig_allocatable_short),
    "exporter-no-deploy-client": (1, m_exporter_no_deploy_client),
    "time-slicing-configmap-missing": (1, m_time_slicing_configmap_missing),
    "time-slicing-key-missing": (3, m_time_slicing_key_missing),
    "time-slicing-config-invalid": (1, m_time_slicing_config_invalid),
    "time-slicing-stale": (1, m_time_slicing_stale),
}
