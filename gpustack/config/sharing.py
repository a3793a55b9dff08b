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
  replicas must be >= 2"); MPS at most 48 clients per GPU (cmd/mps-control-daemon/mps/device.go, Volta and later);
- ``mig.strategy`` is one value for the whole cluster: the operator passes ClusterPolicy ``spec.mig.strategy`` to
  every node's device plugin and GPU feature discovery as ``MIG_STRATEGY`` (gpu-operator
  controllers/object_controls.go), which overrides a per-node ``flags.migStrategy``;
- ``single`` advertises MIG devices as ``nvidia.com/gpu`` and needs one MIG profile per node (device plugin
  internal/rm/device_map.go: "more than one MIG device type present on node"): not ``all-balanced``;
- MPS refuses ``mixed`` ("using --mig-strategy=mixed is not supported with MPS", cmd/nvidia-device-plugin/main.go)
  and MIG devices ("sharing using MPS is not supported for MIG devices", internal/plugin/mps.go).

Whether a node's GPUs can take a MIG profile needs its PCI ids: the preflight checks that (P26-gpu-sharing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal, Protocol

from pydantic import Field, field_validator

from gpustack.config import mig
from gpustack.config.fields import StrictModel

MPS_MAX_REPLICAS = 48
Mode = Literal["none", "mig", "time-slicing", "mps"]
Strategy = Literal["single", "mixed"]
Path_ = tuple[str | int, ...]


class NoSharing(StrictModel):
    """Whole GPUs (the default)."""

    mode: Literal["none"]


class MigSharing(StrictModel):
    """Multi-Instance GPU: the GPU Operator's MIG manager partitions every GPU of the node."""

    mode: Literal["mig"]
    profile: str = Field(
        description="a MIG configuration name of the GPU Operator's MIG manager: all-<profile> (e.g. all-1g.10gb, "
        "all-3g.40gb) or all-balanced"
    )

    @field_validator("profile")
    @classmethod
    def _profile(cls, v: str) -> str:
        if v in (mig.ALL_DISABLED, mig.ALL_ENABLED):
            why = "turns MIG off: use mode: none" if v == mig.ALL_DISABLED else "makes no MIG devices to schedule on"
            raise ValueError(f"{v!r} {why}")
        if v != mig.BALANCED and not mig.PROFILE_CONFIG_RE.match(v):
            examples = "all-1g.10gb, all-2g.20gb, all-3g.40gb, all-7g.80gb, all-balanced"
            raise ValueError(f"{v!r} is not a MIG configuration name (all-<profile>, e.g. {examples})")
        return v


class TimeSlicing(StrictModel):
    """Time-slicing: each GPU is advertised ``replicas`` times; pods share it in turns (no memory isolation)."""

    mode: Literal["time-slicing"]
    replicas: Annotated[int, Field(ge=2, description="how many pods may share one GPU (at least 2)")]


class Mps(StrictModel):
    """CUDA MPS: ``replicas`` clients per GPU, each limited to 1/replicas of its memory and compute."""

    mode: Literal["mps"]
    replicas: Annotated[
        int, Field(ge=2, le=MPS_MAX_REPLICAS, description=f"MPS clients per GPU (2 to {MPS_MAX_REPLICAS})")
    ]


GpuSharing = Annotated[NoSharing | MigSharing | TimeSlicing | Mps, Field(discriminator="mode")]


# What the rules below read of a Config (gpustack.config.model imports this module, not the other way round).
class _Node(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def gpu_sharing(self) -> NoSharing | MigSharing | TimeSlicing | Mps | None: ...


class _Gpu(Protocol):
    @property
    def mig_strategy(self) -> Literal["auto", "single", "mixed"]: ...


class Config(Protocol):
    @property
    def nodes(self) -> Sequence[_Node]: ...
    @property
    def gpu(self) -> _Gpu: ...


def mode_of(sharing: GpuSharing | None) -> Mode:
    return "none" if sharing is None else sharing.mode


def mig_nodes(cfg: Config) -> dict[str, str]:
    """Node name -> MIG configuration, for the nodes that use MIG."""
    return {n.name: n.gpu_sharing.profile for n in cfg.nodes if isinstance(n.gpu_sharing, MigSharing)}


def replica_nodes(cfg: Config) -> dict[str, TimeSlicing | Mps]:
    """Node name -> its time-slicing or MPS setting."""
    return {n.name: n.gpu_sharing for n in cfg.nodes if isinstance(n.gpu_sharing, (TimeSlicing, Mps))}


def uses_sharing(cfg: Config) -> bool:
    return any(mode_of(n.gpu_sharing) != "none" for n in cfg.nodes)


def mig_strategy(cfg: Config) -> Strategy:
    """The cluster's ``mig.strategy``: as configured, or for ``auto`` mixed (every MIG profile is its own resource,
    ``nvidia.com/mig-1g.10gb``) unless a node uses MPS, which only works with single."""
    chosen = cfg.gpu.mig_strategy
    if chosen != "auto":
        return chosen
    return "single" if any(isinstance(n.gpu_sharing, Mps) for n in cfg.nodes) else "mixed"


def device_plugin_key(sharing: TimeSlicing | Mps) -> str:
    """The key of this setting in the device-plugin ConfigMap (and the node label's value): named by its content,
    so a key's content never changes and a node switches setting by its label alone (the operator does not watch
    the ConfigMap's content)."""
    return f"{sharing.mode}-{sharing.replicas}"


def config_problems(cfg: Config) -> list[tuple[Path_, str]]:
    """(field path, message) for every GPU sharing rule the configuration breaks."""
    out: list[tuple[Path_, str]] = []
    explicit = cfg.gpu.mig_strategy != "auto"
    strategy = mig_strategy(cfg)
    mps = [i for i, n in enumerate(cfg.nodes) if isinstance(n.gpu_sharing, Mps)]
    if mps and strategy == "mixed":
        out.append((
            ("gpu", "mig_strategy"),
            f"mixed does not work with MPS (node {cfg.nodes[mps[0]].name} uses mps; the device plugin refuses "
            "'--mig-strategy=mixed' with MPS): use single or auto",
        ))  # fmt: skip
    if strategy == "single":
        for i, n in enumerate(cfg.nodes):
            if isinstance(n.gpu_sharing, MigSharing) and not mig.uniform(n.gpu_sharing.profile):
                why = f"gpu.mig_strategy: {cfg.gpu.mig_strategy}" + ("" if explicit else " (single: a node uses mps)")
                out.append((
                    ("nodes", i, "gpu_sharing", "profile"),
                    f"{n.gpu_sharing.profile} makes several MIG device types per GPU, which {why} cannot "
                    "advertise (device plugin: more than one MIG device type present on node): use one profile "
                    "(all-<profile>)" + ("" if mps else " or gpu.mig_strategy: mixed"),
                ))  # fmt: skip
    return out
