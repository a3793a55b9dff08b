"""GPU sharing in the configuration: per node ``gpu_sharing`` (none, MIG, time-slicing, MPS) and the cluster-wide
``gpu.mig_strategy``; the models and their cross-field rules. Pure.

    nodes:
      - name: gpu-h100-01
        gpu_sharing: {mode: mig, profile: all-1g.10gb}
      - name: gpu-l40s-01
        gpu_sharing: {mode: time-slicing, replicas: 4}

How the GPU Operator v26.7.0 applies each (docs/gpu-sharing.md): MIG through its MIG manager (node label
``nvidia.com/mig.config``), time-slicing and MPS through the device plugin's configuration (a ConfigMap named by
ClusterPolicy ``devicePlugin.config.name``, one key per setting, chosen per node by label
``nvidia.com/device-plugin.config``). The rules here are what the pinned components accept:

- ``replicas`` >= 2 for time-slicing and MPS (k8s-device-plugin v0.20.0 api/config/v1/replicas.go: "number of
  replicas must be >= 2"); MPS at most 48 clients per GPU (cmd/mps-control-daemon/mps/device.go; 16 below
  compute capability 7.5, which doctor G15 reports from the node labels: the GPU model is unknown here);
- ``mig.strategy`` is one value for the whole cluster: the operator passes ClusterPolicy ``spec.mig.strategy`` to
  every node's device plugin and GPU feature discovery as ``MIG_STRATEGY`` (gpu-operator
  controllers/object_controls.go), which overrides a per-node ``flags.migStrategy``;
- ``single`` advertises MIG devices as ``nvidia.com/gpu`` and needs one MIG profile per node (device plugin
  internal/rm/device_map.go: "more than one MIG device type present on node"): not ``all-balanced``;
- MPS refuses ``mixed`` ("using --mig-strategy=mixed is not supported with MPS", cmd/nvidia-device-plugin/main.go)
  and MIG devices ("sharing using MPS is not supported for MIG devices", internal/plugin/mps.go).

Cluster-level ``gpu_sharing`` (:class:`SharingSection`, docs/decisions.md): custom MIG layouts by name
(:mod:`gpustack.config.mig_layout`; gpustack writes them into its own mig-parted ConfigMap) and node groups (one
setting for several nodes; a node's own ``gpu_sharing`` wins; a node in two groups is an error). :func:`effective`
is the one place that resolves a node's setting: everything else reads it, never ``node.gpu_sharing`` directly.

A MIG node may also time-slice its MIG devices (``replicas``): k8s-device-plugin v0.20.0 README "With CUDA
Time-Slicing": the time-sliceable resources are ``nvidia.com/gpu`` and every resource the mixed strategy makes
(``nvidia.com/mig-<profile>``); under single the MIG devices are ``nvidia.com/gpu``. ``rename: true`` sets the
plugin's ``renameByDefault``: shared resources are advertised as ``<name>.shared`` (README "renameByDefault";
api/config/v1/resources.go DefaultSharedRename).

Whether a node's GPUs can take a MIG profile needs its PCI ids: the preflight checks that (P26-gpu-sharing).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal, Protocol

from pydantic import Field, field_validator

from gpustack.config import mig
from gpustack.config import mig_layout as ml
from gpustack.config.fields import StrictModel

MPS_MAX_REPLICAS = 48
Mode = Literal["none", "mig", "time-slicing", "mps"]
Strategy = Literal["single", "mixed"]
Path_ = tuple[str | int, ...]
GPU_RESOURCE = "nvidia.com/gpu"


class NoSharing(StrictModel):
    """Whole GPUs (the default)."""

    mode: Literal["none"]


class MigSharing(StrictModel):
    """Multi-Instance GPU: the GPU Operator's MIG manager partitions every GPU of the node."""

    mode: Literal["mig"]
    profile: str = Field(
        description="a MIG configuration name of the GPU Operator's MIG manager: all-<profile> (e.g. all-1g.10gb, "
        "all-3g.40gb), all-balanced, or the name of a layout in gpu_sharing.mig_layouts"
    )
    replicas: Annotated[int | None, Field(ge=2, description="time-slice each MIG device this many times")] = None
    rename: bool = Field(default=False, description="advertise shared MIG devices as nvidia.com/mig-<profile>.shared")

    @field_validator("profile")
    @classmethod
    def _profile(cls, v: str) -> str:
        if v in (mig.ALL_DISABLED, mig.ALL_ENABLED):
            why = "turns MIG off: use mode: none" if v == mig.ALL_DISABLED else "makes no MIG devices to schedule on"
            raise ValueError(f"{v!r} {why}")
        custom = not v.startswith("all-") and not mig.GI_PROFILE_RE.match(v) and ml.LAYOUT_NAME_RE.match(v)
        if v != mig.BALANCED and not mig.PROFILE_CONFIG_RE.match(v) and not custom:
            examples = "all-1g.10gb, all-2g.20gb, all-3g.40gb, all-7g.80gb, all-balanced"
            raise ValueError(f"{v!r} is not a MIG configuration name (all-<profile>, e.g. {examples}; or a layout "
                             "of gpu_sharing.mig_layouts)")  # fmt: skip
        return v

    @property
    def custom(self) -> bool:
        """A layout of ``gpu_sharing.mig_layouts`` (not one of the operator's ``all-...`` names)."""
        return not self.profile.startswith("all-")


class TimeSlicing(StrictModel):
    """Time-slicing: each GPU is advertised ``replicas`` times; pods share it in turns (no memory isolation)."""

    mode: Literal["time-slicing"]
    replicas: Annotated[int, Field(ge=2, description="how many pods may share one GPU (at least 2)")]
    rename: bool = Field(default=False, description="advertise the shared GPUs as nvidia.com/gpu.shared")


class Mps(StrictModel):
    """CUDA MPS: ``replicas`` clients per GPU, each limited to 1/replicas of its memory and compute."""

    mode: Literal["mps"]
    replicas: Annotated[
        int, Field(ge=2, le=MPS_MAX_REPLICAS, description=f"MPS clients per GPU (2 to {MPS_MAX_REPLICAS})")
    ]
    rename: bool = Field(default=False, description="advertise the shared GPUs as nvidia.com/gpu.shared")


GpuSharing = Annotated[NoSharing | MigSharing | TimeSlicing | Mps, Field(discriminator="mode")]
Setting = NoSharing | MigSharing | TimeSlicing | Mps


class SharingGroup(StrictModel):
    """Several nodes with one GPU sharing setting (a node's own ``gpu_sharing`` wins)."""

    nodes: list[str] = Field(min_length=1, description="node names (each in one group at most)")
    sharing: GpuSharing = Field(description="the setting, as a node's gpu_sharing")


class SharingSection(StrictModel):
    """Cluster-level GPU sharing: custom MIG layouts and node groups (docs/gpu-sharing.md)."""

    mig_layouts: dict[str, ml.MigLayout] = Field(
        default_factory=dict,
        description="custom MIG layouts by name, in mig-parted's format (a list of {devices, mig-enabled, "
        "mig-devices}); a node uses one with gpu_sharing {mode: mig, profile: <name>}",
    )
    groups: dict[str, SharingGroup] = Field(
        default_factory=dict, description="named node groups, each {nodes: [...], sharing: {...}}"
    )
    default: GpuSharing | None = Field(
        default=None,
        description="the setting of every GPU node with none of its own and in no group (nodes added later "
        "included; nodes without NVIDIA GPUs are left alone); unset: their GPUs are left whole",
    )


# What the rules below read of a Config (gpustack.config.model imports this module, not the other way round).
class _Node(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def gpu_sharing(self) -> Setting | None: ...


class _Gpu(Protocol):
    @property
    def mig_strategy(self) -> Literal["auto", "single", "mixed"]: ...


class Config(Protocol):
    @property
    def nodes(self) -> Sequence[_Node]: ...
    @property
    def gpu(self) -> _Gpu: ...
    @property
    def gpu_sharing(self) -> SharingSection: ...


def mode_of(sharing: GpuSharing | None) -> Mode:
    return "none" if sharing is None else sharing.mode


def group_of(cfg: Config, node: str) -> str | None:
    """The (first) group that lists ``node``."""
    return next((g for g, grp in cfg.gpu_sharing.groups.items() if node in grp.nodes), None)


def from_default(cfg: Config, node: _Node) -> bool:
    """The node's setting is the cluster's ``gpu_sharing.default`` (it has none of its own and is in no group):
    applied only where the node has NVIDIA GPUs (a CPU node inherits nothing to act on)."""
    return cfg.gpu_sharing.default is not None and node.gpu_sharing is None and group_of(cfg, node.name) is None


def effective(cfg: Config, node: _Node) -> Setting | None:
    """The node's GPU sharing: its own ``gpu_sharing``, else its group's, else the cluster's
    ``gpu_sharing.default``, else None (left alone)."""
    if node.gpu_sharing is not None:
        return node.gpu_sharing
    group = group_of(cfg, node.name)
    return cfg.gpu_sharing.default if group is None else cfg.gpu_sharing.groups[group].sharing


def settings(cfg: Config) -> dict[str, Setting]:
    """Node name -> its effective setting, for the nodes that have one (in node order)."""
    return {n.name: s for n in cfg.nodes if (s := effective(cfg, n)) is not None}


def mig_nodes(cfg: Config) -> dict[str, str]:
    """Node name -> MIG configuration, for the nodes that use MIG."""
    return {name: s.profile for name, s in settings(cfg).items() if isinstance(s, MigSharing)}


def replica_nodes(cfg: Config) -> dict[str, TimeSlicing | Mps]:
    """Node name -> its time-slicing or MPS setting."""
    return {name: s for name, s in settings(cfg).items() if isinstance(s, (TimeSlicing, Mps))}


def uses_sharing(cfg: Config) -> bool:
    return any(s.mode != "none" for s in settings(cfg).values())


def uses_custom_layouts(cfg: Config) -> bool:
    return any(isinstance(s, MigSharing) and s.custom for s in settings(cfg).values())


def mig_strategy(cfg: Config) -> Strategy:
    """The cluster's ``mig.strategy``: as configured, or for ``auto`` mixed (every MIG profile is its own resource,
    ``nvidia.com/mig-1g.10gb``) unless a node uses MPS, which only works with single."""
    chosen = cfg.gpu.mig_strategy
    if chosen != "auto":
        return chosen
    return "single" if any(isinstance(s, Mps) for s in settings(cfg).values()) else "mixed"


def device_plugin_key(sharing: TimeSlicing | Mps) -> str:
    """The key of this setting in the device-plugin ConfigMap (and the node label's value): named by its content,
    so a key's content never changes and a node switches setting by its label alone (the operator does not watch
    the ConfigMap's content)."""
    return f"{sharing.mode}-{sharing.replicas}" + ("-renamed" if sharing.rename else "")


def mig_resources(cfg: Config, sharing: MigSharing) -> list[str] | None:
    """The extended resources a MIG node advertises (before renaming); None when they depend on the GPU
    (``all-balanced`` under mixed: its profiles differ per GPU family)."""
    if mig_strategy(cfg) == "single":
        return [GPU_RESOURCE]
    if sharing.custom:
        entries = cfg.gpu_sharing.mig_layouts.get(sharing.profile)
        return None if entries is None else [mig.resource_name(p) for p in ml.profiles(entries)]
    if sharing.profile == mig.BALANCED:
        return None
    return ["nvidia.com/mig-" + sharing.profile.removeprefix("all-")]


def plugin_key(cfg: Config, sharing: Setting) -> str | None:
    """The device-plugin ConfigMap key (and ``nvidia.com/device-plugin.config`` value) of a node's setting; None
    when the setting needs no device-plugin configuration. MIG with replicas under mixed names its resources:
    ``time-slicing-2-mig-1g.10gb-3g.40gb`` (a digest when that is over 63 characters, a label value's limit);
    under single its MIG devices are ``nvidia.com/gpu``, so it shares ``time-slicing-<R>``."""
    if isinstance(sharing, (TimeSlicing, Mps)):
        return device_plugin_key(sharing)
    if not isinstance(sharing, MigSharing) or sharing.replicas is None:
        return None
    resources = mig_resources(cfg, sharing)
    if resources is None:
        return None
    suffix = "-renamed" if sharing.rename else ""
    if resources == [GPU_RESOURCE]:
        return f"time-slicing-{sharing.replicas}{suffix}"
    key = f"time-slicing-{sharing.replicas}-mig-" + "-".join(r.removeprefix("nvidia.com/mig-") for r in resources)
    if len(key + suffix) > 63:
        key = f"time-slicing-{sharing.replicas}-mig-" + hashlib.sha256(key.encode()).hexdigest()[:12]
    return key + suffix


def plugin_resources(cfg: Config, sharing: Setting) -> list[str]:
    """The resources the device-plugin configuration of ``sharing`` shares ([] when none)."""
    if isinstance(sharing, (TimeSlicing, Mps)):
        return [GPU_RESOURCE]
    if isinstance(sharing, MigSharing) and sharing.replicas is not None:
        return mig_resources(cfg, sharing) or []
    return []


def shared_name(resource: str, rename: bool) -> str:
    """What the device plugin advertises a shared resource as (``renameByDefault``: ``<name>.shared``)."""
    return f"{resource}.shared" if rename else resource


def _sources(cfg: Config) -> list[tuple[Path_, Setting, list[str]]]:
    """Where each setting is written (its field path), the setting, and the nodes it applies to."""
    out: list[tuple[Path_, Setting, list[str]]] = []
    for i, n in enumerate(cfg.nodes):
        if n.gpu_sharing is not None:
            out.append((("nodes", i, "gpu_sharing"), n.gpu_sharing, [n.name]))
    own = {n.name for n in cfg.nodes if n.gpu_sharing is not None}
    for g, grp in cfg.gpu_sharing.groups.items():
        out.append((("gpu_sharing", "groups", g, "sharing"), grp.sharing, [x for x in grp.nodes if x not in own]))
    if cfg.gpu_sharing.default is not None:
        rest = [n.name for n in cfg.nodes if n.gpu_sharing is None and group_of(cfg, n.name) is None]
        out.append((("gpu_sharing", "default"), cfg.gpu_sharing.default, rest))
    return out


def config_problems(cfg: Config) -> list[tuple[Path_, str]]:
    """(field path, message) for every GPU sharing rule the configuration breaks."""
    out: list[tuple[Path_, str]] = []
    explicit = cfg.gpu.mig_strategy != "auto"
    strategy = mig_strategy(cfg)
    mps = [name for name, s in settings(cfg).items() if isinstance(s, Mps)]
    if mps and strategy == "mixed":
        out.append((
            ("gpu", "mig_strategy"),
            f"mixed does not work with MPS (node {mps[0]} uses mps; the device plugin refuses "
            "'--mig-strategy=mixed' with MPS): use single or auto",
        ))  # fmt: skip
    out += _layout_problems(cfg)
    out += _group_problems(cfg)
    for path, s, names in _sources(cfg):
        if not isinstance(s, MigSharing):
            continue
        where = (*path, "profile")
        layout = cfg.gpu_sharing.mig_layouts.get(s.profile) if s.custom else None
        if s.custom and layout is None:
            known = ", ".join(sorted(cfg.gpu_sharing.mig_layouts)) or "none defined"
            out.append((where, f"{s.profile!r} is neither all-<profile> nor a layout of gpu_sharing.mig_layouts "
                        f"({known})"))  # fmt: skip
            continue
        unknown = _unknown_config(s.profile) if layout is None else ""
        if unknown:
            out.append((where, unknown))
            continue
        uniform = mig.uniform(s.profile) if layout is None else _uniform_layout(layout)
        if strategy == "single" and not uniform and names:
            why = f"gpu.mig_strategy: {cfg.gpu.mig_strategy}" + ("" if explicit else " (single: a node uses mps)")
            out.append((
                where,
                f"{s.profile} makes several MIG device types per GPU (or leaves some GPUs whole), which {why} "
                "cannot advertise (device plugin: more than one MIG device type present on node): use one profile "
                "(all-<profile>)" + ("" if mps else " or gpu.mig_strategy: mixed"),
            ))  # fmt: skip
        if s.rename and s.replicas is None:
            out.append(((*path, "rename"), "rename applies to shared devices: set replicas too (or drop rename)"))
        if s.replicas is not None and mig_resources(cfg, s) is None:
            out.append(((*path, "replicas"), f"time-slicing {s.profile} needs to know its MIG profiles, which "
                        "differ per GPU under mig.strategy mixed: define the layout in gpu_sharing.mig_layouts and "
                        "use its name"))  # fmt: skip
    return out


def _unknown_config(profile: str) -> str:
    """Why an ``all-<profile>`` name is no MIG configuration of any GPU family gpustack knows ("" when it is one):
    caught at load time, not on the hosts (issue 29; host facts narrow it to the node's GPU in preflight P26)."""
    if profile in mig.known_configs():
        return ""
    m = mig.PROFILE_CONFIG_RE.match(profile)
    g = m.group("g") if m else ""
    same = sorted({c for c in mig.known_configs() if g and c.startswith(f"all-{g}g.")}, key=lambda c: (len(c), c))
    hint = f" (all-{g}g names it knows: {', '.join(same)})" if same else ""
    return (f"{profile!r} is no MIG configuration of any GPU family gpustack knows (A100, A30, H100, H100 NVL, "
            f"H200, B200, GB200){hint}; for another MIG-capable GPU define the layout in gpu_sharing.mig_layouts")  # fmt: skip


def _explaining_families(layouts: list[dict[str, int]]) -> list[mig.MigFamily]:
    """The families whose refusal explains a layout best: those offering every profile it names, else those
    offering one of them, else the first three (the layout's profiles name the GPU it was meant for)."""
    names = {p for lay in layouts for p in lay}
    every = [f for f in mig.FAMILIES if names <= set(f.profiles)]
    some = [f for f in mig.FAMILIES if names & set(f.profiles)]
    return every or some or list(mig.FAMILIES[:3])


def _uniform_layout(entries: list[ml.MigLayoutEntry]) -> bool:
    """One MIG device type on every GPU the layout names, and no GPU left whole (single's requirement)."""
    return len(ml.profiles(entries)) == 1 and all(e.mig_enabled for e in entries)


def _layout_problems(cfg: Config) -> list[tuple[Path_, str]]:
    out: list[tuple[Path_, str]] = []
    for name, entries in cfg.gpu_sharing.mig_layouts.items():
        path: Path_ = ("gpu_sharing", "mig_layouts", name)
        problem = ml.layout_name_problem(name) or ml.entries_problem(entries)
        if problem:
            out.append((path, problem))
            continue
        if not any(e.mig_enabled and e.mig_devices for e in entries):
            out.append((path, "makes no MIG device: give an entry mig-devices (or use mode: none)"))
            continue
        for i, e in enumerate(entries):
            if e.mig_enabled and not e.mig_devices:
                out.append(((*path, i, "mig-devices"), "an entry with mig-enabled: true needs mig-devices"))
        if out or ml.families_for(entries):
            continue
        layouts = ml.entry_layouts(entries)
        why = "; ".join(dict.fromkeys(
            f"{fam.name}: {'; '.join(ml.fit_problems(fam, lay))}" for fam in _explaining_families(layouts)
            for lay in layouts if ml.fit_problems(fam, lay)))  # fmt: skip
        out.append((path, f"no MIG-capable GPU gpustack knows can take this layout ({why})"))
    return out


def _group_problems(cfg: Config) -> list[tuple[Path_, str]]:
    out: list[tuple[Path_, str]] = []
    names = {n.name for n in cfg.nodes}
    first: dict[str, str] = {}
    for g, grp in cfg.gpu_sharing.groups.items():
        for j, node in enumerate(grp.nodes):
            path: Path_ = ("gpu_sharing", "groups", g, "nodes", j)
            if node not in names:
                out.append((path, f"{node!r} is not a node of this configuration"))
            elif node in first:
                out.append((path, f"{node} is already in group {first[node]}: a node belongs to one group"))
            else:
                first[node] = g
    return out


def describe(cfg: Config) -> Mapping[str, str]:
    """Node name -> where its setting comes from ("node", "group <name>" or "default"), for plan rows."""
    out = {}
    for n in cfg.nodes:
        group = group_of(cfg, n.name)
        if n.gpu_sharing is not None:
            out[n.name] = "node"
        elif group is not None:
            out[n.name] = f"group {group}"
        elif cfg.gpu_sharing.default is not None:
            out[n.name] = "default"
    return out
