"""GPU sharing as a cluster shows it, for the checks of :mod:`gpustack.diagnose.checks_sharing` and verify's test
pods. Pure functions of a snapshot; nothing here reads gpustack.yaml: the cluster's own labels and ConfigMaps say
what is configured, so the checks work on any cluster the GPU Operator runs (and on saved snapshots).

- MIG: node label ``nvidia.com/mig.config`` (what the MIG manager was asked for), ``nvidia.com/mig.config.state``;
  the configurations the node can take: ConfigMap ``<node>-mig-config`` the MIG manager wrote from the GPU's own
  profiles (k8s-mig-manager >= v0.14.0), else the static ``default-mig-parted-config`` (or the one ClusterPolicy
  ``spec.migManager.config.name`` names), in mig-parted's format (``version: v1``, ``mig-configs: {name: [{devices,
  device-filter, mig-enabled, mig-devices}]}``); the strategy from ClusterPolicy ``spec.mig.strategy``;
- time-slicing / MPS: node label ``nvidia.com/device-plugin.config`` naming a key of the ConfigMap ClusterPolicy
  ``spec.devicePlugin.config.name`` names (k8s-device-plugin v0.20.0 config format, validated here with the plugin's
  own rules and messages: api/config/v1/config.go, replicas.go; cmd/mps-control-daemon/mps/device.go).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from gpustack.config import mig
from gpustack.constants import GPU_NAMESPACE
from gpustack.diagnose.objects import as_dict, as_int, as_list, items, labels_of, name_of, ns_of
from gpustack.diagnose.snapshot import Snapshot

MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"
PLUGIN_CONFIG = "nvidia.com/device-plugin.config"
PRODUCT = "nvidia.com/gpu.product"
GPU_COUNT = "nvidia.com/gpu.count"
REPLICAS = "nvidia.com/gpu.replicas"
SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"
GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
PAUSED = "paused-for-mig-change"
STATIC_MIG_CONFIGMAP = "default-mig-parted-config"
MPS_MAX = 48  # compute capability 7.5 and later (cmd/mps-control-daemon/mps/device.go maxClients)
#: the MPS control daemon's client limit below compute capability 7.5 (k8s-device-plugin v0.20.0
#: cmd/mps-control-daemon/mps/device.go: maxClients is 48 when isAtLeastVolta, which compares with v7.5, else 16)
MPS_MAX_OLD = 16
#: GPU feature discovery's compute capability labels (k8s-device-plugin v0.20.0 internal/lm/resource.go)
COMPUTE_MAJOR, COMPUTE_MINOR = "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor"


def mps_max_clients(labels: dict[str, Any]) -> int:
    """How many MPS clients the device plugin allows on a node's GPUs, by the compute capability GPU feature
    discovery labels (unknown: the larger limit, the config's own bound)."""
    try:
        cc = (int(labels[COMPUTE_MAJOR]), int(labels[COMPUTE_MINOR]))
    except (KeyError, TypeError, ValueError):
        return MPS_MAX
    return MPS_MAX if cc >= (7, 5) else MPS_MAX_OLD


def mig_on(labels: dict[str, Any]) -> bool:
    """The node was asked for a MIG configuration that makes MIG devices."""
    value = labels.get(MIG_CONFIG)
    return isinstance(value, str) and value not in ("", mig.ALL_DISABLED, mig.ALL_ENABLED)


def shared_nodes(snap: Snapshot) -> set[str]:
    """Nodes whose nvidia.com/gpu allocatable is not one per physical GPU: MIG on, or time-sliced / MPS (GFD's
    ``nvidia.com/gpu.sharing-strategy``, k8s-device-plugin v0.20.0 internal/lm/resource.go)."""
    out = set()
    for node in snap.items("Node"):
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        if isinstance(labels, dict) and (mig_on(labels) or str(labels.get(SHARING_STRATEGY) or "none") != "none"):
            out.add(str(meta.get("name") or ""))
    return out


def configmaps(snap: Snapshot) -> dict[str, dict[str, Any]]:
    """Name -> ``data`` of the ConfigMaps collected in the operator's namespace."""
    return {name_of(c): as_dict(c.get("data")) for c in items(snap, "ConfigMap")
            if ns_of(c) in ("", GPU_NAMESPACE) and name_of(c)}  # fmt: skip


def cluster_policy(snap: Snapshot) -> dict[str, Any]:
    policies = items(snap, "ClusterPolicy")
    return as_dict(policies[0].get("spec")) if policies else {}


def strategy(snap: Snapshot) -> str:
    """ClusterPolicy ``spec.mig.strategy`` ("" when unset: the operator then passes no MIG_STRATEGY)."""
    return str(as_dict(cluster_policy(snap).get("mig")).get("strategy") or "")


def plugin_configmap_name(snap: Snapshot) -> str:
    return str(as_dict(as_dict(cluster_policy(snap).get("devicePlugin")).get("config")).get("name") or "")


def host_devices(snap: Snapshot, node: str) -> list[str]:
    """The node's NVIDIA PCI device ids from host facts (``[]`` when not collected)."""
    facts = as_dict(as_dict(snap.hosts).get(node))
    return [
        mig.normalize_device_id(str(as_dict(d).get("device_id") or ""))
        for d in as_list(facts.get("nvidia_pci_devices"))
    ]


# --- MIG configurations ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MigConfigs:
    """The MIG configurations one node can take, and where that list came from."""

    source: str  # the ConfigMap name, or "gpustack's MIG table"
    configs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # name -> mig-parted entries

    def per_gpu(self, name: str, device: str | None) -> dict[str, int] | None:
        """GI profile -> instances per GPU that ``name`` makes (on a GPU with PCI id ``device`` when entries are
        filtered by device); None when not known."""
        entries = [as_dict(e) for e in as_list(self.configs.get(name))]
        if not entries:
            return None
        chosen = [e for e in entries if device and device in _filter_ids(e)] or [
            e for e in entries if not _filter_ids(e)
        ]
        if not chosen and len(entries) == 1:
            chosen = entries
        if not chosen:
            return None
        return {str(k): as_int(v) for k, v in as_dict(chosen[0].get("mig-devices")).items()}


def _filter_ids(entry: dict[str, Any]) -> set[str]:
    raw = entry.get("device-filter")
    listed = [raw] if isinstance(raw, str) else [str(x) for x in as_list(raw)]
    return {mig.normalize_device_id(x[:6]) for x in listed if x}


def parse_mig_configs(text: Any) -> dict[str, list[dict[str, Any]]] | None:
    """``mig-configs`` of a mig-parted configuration file (None when it is not one)."""
    if not isinstance(text, str):
        return None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    configs = as_dict(as_dict(data).get("mig-configs"))
    return {str(k): as_list(v) for k, v in configs.items()} or None


def node_mig_configs(snap: Snapshot, node: str) -> MigConfigs | None:
    """What ``node`` can take: ``<node>-mig-config`` (the MIG manager's discovery), else the ConfigMap ClusterPolicy
    names or the static one, else gpustack's table for the GPU in the host facts; None when none is known."""
    cms = configmaps(snap)
    custom = str(as_dict(as_dict(cluster_policy(snap).get("migManager")).get("config")).get("name") or "")
    for name in (custom, f"{node}-mig-config", STATIC_MIG_CONFIGMAP):
        if name and name in cms:
            configs = parse_mig_configs(cms[name].get("config.yaml"))
            if configs:
                return MigConfigs(name, configs)
    devices = host_devices(snap, node)
    fam = mig.family_of(devices[0]) if devices else None
    if fam is None:
        return None
    table = {n: [{"devices": "all", "mig-enabled": True, "mig-devices": layout}] for n, layout in fam.configs().items()}
    return MigConfigs("gpustack's MIG table", table)


# --- the device plugin's configuration ----------------------------------------------------------------------


@dataclass(frozen=True)
class PluginSetting:
    strategy: str  # "time-slicing" | "mps" | "none"
    replicas: int
    resource: str  # what the node advertises: nvidia.com/gpu, or nvidia.com/gpu.shared when renamed
    #: every shared resource (its name before renaming) -> replicas: nvidia.com/gpu, or the nvidia.com/mig-<profile>
    #: names of time-sliced MIG devices (k8s-device-plugin v0.20.0 README "With CUDA Time-Slicing")
    shares: tuple[tuple[str, int], ...] = field(default=(), compare=False)
    renamed: bool = field(default=False, compare=False)  # renameByDefault (``resource`` says it too)

    def apply(self, resources: dict[str, int]) -> dict[str, int]:
        """What a node advertising ``resources`` unshared advertises with this setting: each shared resource x its
        replicas, renamed to ``<name>.shared`` (the name then 0) with ``renameByDefault``."""
        shares = dict(self.shares)
        out: dict[str, int] = {}
        for k, v in resources.items():
            if k not in shares:
                out[k] = v
            elif self.renamed:
                out[k], out[f"{k}.shared"] = 0, v * shares[k]
            else:
                out[k] = v * shares[k]
        return out


def plugin_config(text: Any) -> tuple[PluginSetting | None, str]:
    """(the setting, "") or (None, the device plugin's own error) for one key of the device-plugin ConfigMap."""
    if not isinstance(text, str):
        return None, "unable to load config: the key holds no text"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return None, f"unable to load config: unable to parse config file: unmarshal error: {str(exc).splitlines()[0]}"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return None, "unable to load config: unable to parse config file: unmarshal error: not a mapping"
    version = data.get("version") or "v1"
    if version != "v1":
        return None, f"unable to load config: unknown version: {version}"
    sharing = as_dict(data.get("sharing"))
    found = PluginSetting("none", 1, GPU)
    for key, name in (("timeSlicing", "time-slicing"), ("mps", "mps")):
        if key not in sharing:
            continue
        section = as_dict(sharing.get(key))
        resources = as_list(section.get("resources"))
        if not resources:
            return None, "unable to load config: no resources specified"
        for r in (as_dict(x) for x in resources):
            if not r.get("name"):
                return None, "unable to load config: no resource name specified"
            if "replicas" not in r:
                return None, "unable to load config: no replicas specified"
            if as_int(r.get("replicas")) < 2:
                return None, "unable to load config: number of replicas must be >= 2"
            if name == "mps" and as_int(r.get("replicas")) > MPS_MAX:
                return (
                    None,
                    f"invalid device maximum allowed replicas exceeded: {as_int(r.get('replicas'))} > {MPS_MAX}",
                )
        first = as_dict(resources[0])
        # renameByDefault names every resource <name>.shared; a per-resource rename is ignored (replicas.go)
        renamed = bool(section.get("renameByDefault"))
        names = [str(as_dict(r).get("name")) for r in resources]
        names = [n if n.startswith("nvidia.com/") else f"nvidia.com/{n}" for n in names]
        shares = tuple((n, as_int(as_dict(r).get("replicas"))) for n, r in zip(names, resources, strict=True))
        found = PluginSetting(name, as_int(first.get("replicas")), f"{names[0]}.shared" if renamed else names[0],
                              shares, renamed)  # fmt: skip
        if name == "mps":  # MPS wins when both are set (k8s-device-plugin api/config/v1/sharing.go)
            break
    return found, ""


# --- what a node should advertise ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    resources: dict[str, int]  # extended resource -> allocatable
    why: str  # how it was computed (evidence)


def physical_gpus(snap: Snapshot, node: dict[str, Any], *, single_mig: bool) -> int:
    """Physical GPUs of a node: host facts, else GFD's ``nvidia.com/gpu.count`` (which counts MIG devices under
    the single strategy: then unknown, 0)."""
    pci = host_devices(snap, name_of(node))
    if pci:
        return len(pci)
    return 0 if single_mig else as_int(labels_of(node).get(GPU_COUNT))


def expected_mig(snap: Snapshot, node: dict[str, Any]) -> Expected | None:
    """What a MIG node with ``state=success`` must advertise (None when its layout or GPU count is unknown)."""
    labels = labels_of(node)
    name, config = name_of(node), str(labels.get(MIG_CONFIG))
    single = strategy(snap) == "single"
    gpus = physical_gpus(snap, node, single_mig=single)
    configs = node_mig_configs(snap, name)
    if not gpus or configs is None:
        return None
    devices = host_devices(snap, name) or [""] * gpus
    total: dict[str, int] = {}
    for dev in devices:
        layout = configs.per_gpu(config, dev or None)
        if layout is None:
            return None
        for profile, n in layout.items():
            key = GPU if single else mig.resource_name(profile)
            total[key] = total.get(key, 0) + n
    why = f"{config} from {configs.source} on {gpus} GPU(s), mig.strategy {strategy(snap) or '(unset)'}"
    setting = node_plugin_setting(snap, node)
    if setting is not None and setting.shares:
        total = setting.apply(total)
        why += f"; {', '.join(f'{r} x{n}' for r, n in setting.shares)} from {labels.get(PLUGIN_CONFIG)}" + (
            " (renamed .shared)" if setting.renamed else ""
        )
    return Expected(total, why)


def node_plugin_setting(snap: Snapshot, node: dict[str, Any]) -> PluginSetting | None:
    """The device-plugin setting the node's ``nvidia.com/device-plugin.config`` label selects (None: none, or
    unparsable: G16 reports that)."""
    key = str(labels_of(node).get(PLUGIN_CONFIG) or "")
    data = configmaps(snap).get(plugin_configmap_name(snap))
    if not key or data is None or key not in data:
        return None
    return plugin_config(data[key])[0]


def expected_shared(snap: Snapshot, node: dict[str, Any]) -> tuple[Expected | None, PluginSetting | None]:
    """What a time-sliced / MPS node must advertise (None when its setting or GPU count is unknown)."""
    key = str(labels_of(node).get(PLUGIN_CONFIG) or "")
    data = configmaps(snap).get(plugin_configmap_name(snap))
    if not key or data is None or key not in data:
        return None, None
    setting, _ = plugin_config(data[key])
    gpus = physical_gpus(snap, node, single_mig=False)
    if setting is None or setting.strategy == "none" or not gpus:
        return None, setting
    why = f"{key} of ConfigMap {plugin_configmap_name(snap)}: {setting.replicas} x {gpus} GPU(s)"
    if setting.shares:
        return Expected(setting.apply({GPU: gpus}), why), setting
    return Expected({setting.resource: gpus * setting.replicas}, why), setting


def allocatable(node: dict[str, Any]) -> dict[str, int]:
    alloc = as_dict(as_dict(node.get("status")).get("allocatable"))
    return {str(k): as_int(v) for k, v in alloc.items() if str(k).startswith(("nvidia.com/gpu", MIG_PREFIX))}
