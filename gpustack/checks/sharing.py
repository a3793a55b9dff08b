"""Preflight P26-gpu-sharing: the node's GPUs can do what its ``gpu_sharing`` asks. Pure.

The host facts list each NVIDIA PCI device with its id (``lspci -n``: ``0x2330`` is an H100 SXM5 80GB); the MIG
table (:mod:`gpustack.config.mig`) says which GPUs have MIG and which configurations each can take. A GPU that
has MIG but whose profiles gpustack does not carry passes with a warning: its MIG manager decides (a name it
does not offer ends in ``nvidia.com/mig.config.state=failed``, G12). Failures can be downgraded with
``--ignore-preflight P26`` like every preflight check.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpustack.checks.context import Context, Facts, check, host_finding
from gpustack.checks.model import Finding
from gpustack.config import mig
from gpustack.config import mig_layout as ml
from gpustack.config.sharing import (
    MigSharing,
    Mps,
    TimeSlicing,
    effective,
    from_default,
    mode_of,
    uses_custom_layouts,
)

if TYPE_CHECKING:
    from gpustack.config.model import Config

ID = "P26-gpu-sharing"


def _devices(ctx: Context) -> Counter[str]:
    devs = ctx.facts.get("nvidia_pci_devices") or []
    return Counter(mig.normalize_device_id(str(d.get("device_id") or "")) for d in devs if isinstance(d, dict))


def _model(dev: str) -> str:
    fam = mig.family_of(dev)
    name = fam.name if fam else mig.OTHER_MIG_CAPABLE.get(dev, "a GPU without MIG")
    return f"{name} (10de:{dev.removeprefix('0x')})"


@check
def gpu_sharing(ctx: Context) -> Finding:
    sharing = effective(ctx.cfg, ctx.node)
    mode = mode_of(sharing)
    if mode == "none":
        return host_finding(ctx, ID, "pass", "no GPU sharing configured (whole GPUs)")
    devices = _devices(ctx)
    if not devices and from_default(ctx.cfg, ctx.node):
        return host_finding(ctx, ID, "pass", f"no NVIDIA GPU: gpu_sharing.default ({mode}) does not apply here")
    if not devices:
        return host_finding(ctx, ID, "fail", f"gpu_sharing mode {mode}, but the node has no NVIDIA GPU",
                            fix=f"remove gpu_sharing from node {ctx.node.name} in gpustack.yaml")  # fmt: skip
    if isinstance(sharing, (TimeSlicing, Mps)):
        total = sum(devices.values())
        return host_finding(ctx, ID, "pass", f"{mode}: {total} GPU(s) x {sharing.replicas} = {total * sharing.replicas} "
                            "nvidia.com/gpu")  # fmt: skip
    assert isinstance(sharing, MigSharing)
    profile = sharing.profile
    evidence = ", ".join(f"{n} x {_model(d)}" for d, n in sorted(devices.items()))
    no_mig = sorted(d for d in devices if not mig.mig_capable(d))
    if no_mig:
        return host_finding(
            ctx, ID, "fail", f"MIG asked for, but {', '.join(_model(d) for d in no_mig)} has no MIG", evidence,
            fix="MIG needs an A100, A30, H100, H200, B200 or GB200 class GPU (NVIDIA MIG User Guide, Supported GPUs); "
            f"use gpu_sharing {{mode: time-slicing, replicas: N}} on node {ctx.node.name} instead",
        )  # fmt: skip
    unknown = sorted(d for d in devices if mig.family_of(d) is None)
    if sharing.custom:
        return _custom(ctx, sharing, evidence, unknown)
    refused = sorted(d for d in devices if d not in unknown and mig.layout(d, profile) is None)
    if refused:
        fam = mig.family_of(refused[0])
        valid = ", ".join(sorted(fam.configs(), key=_order)) if fam else ""
        return host_finding(
            ctx, ID, "fail", f"{_model(refused[0])} cannot take MIG configuration {profile}", evidence,
            fix=f"pick one of its configurations for node {ctx.node.name}: {valid}",
        )  # fmt: skip
    if unknown and uses_custom_layouts(ctx.cfg):
        # gpustack's own MIG ConfigMap (written for the custom layouts) carries all-* entries for the families it
        # lists only, each with a device-filter; mig-parted skips a GPU no entry's filter matches and reports
        # success with nothing applied (v0.15.0 cmd/nvidia-mig-parted/assert/assert.go WalkSelectedMigConfigForEachGPU)
        return host_finding(
            ctx, ID, "fail", f"{profile} would not be applied to {_model(unknown[0])}: gpustack's MIG ConfigMap "
            "(written because gpu_sharing.mig_layouts is used) has all-* configurations only for the GPUs it lists, "
            "and mig-parted skips any other GPU while reporting success", evidence,
            fix=f"define the layout for this GPU in gpu_sharing.mig_layouts and use its name on node {ctx.node.name}, "
            "or drop gpu_sharing.mig_layouts (the GPU Operator's own ConfigMap then applies, with every family)",
        )  # fmt: skip
    if unknown:
        return host_finding(
            ctx, ID, "warn", f"{profile}: gpustack has no profile list for {_model(unknown[0])}", evidence,
            fix="the MIG manager checks it (ConfigMap <node>-mig-config lists the GPU's configurations); "
            "gpustack verify reports a name it refuses (G12-mig-config-state)",
        )  # fmt: skip
    per_gpu = {d: mig.layout(d, profile) or {} for d in devices}
    made = ", ".join(f"{p} x{n}" for p, n in sorted(next(iter(per_gpu.values())).items()))
    if ctx.cfg.gpu.driver == "preinstalled" or ctx.facts.get("nvidia_driver_version"):
        return host_finding(
            ctx, ID, "warn", f"{profile}: {made} per GPU; the driver is preinstalled", evidence,
            fix="across a MIG mode change the MIG manager stops the host's GPU clients (nvidia-dcgm, nvsm; "
            "ConfigMap default-gpu-clients) and, when the mode changes, kubelet on this node",
        )  # fmt: skip
    return host_finding(ctx, ID, "pass", f"{profile}: {made} per GPU", evidence)


def refusals(cfg: Config, facts_by_node: Mapping[str, Facts]) -> list[str]:
    """What P26 fails for the nodes whose host facts are known (``gpustack render --facts``: a MIG name checked
    against the node's own GPU model before anything runs; nodes without facts are left to the preflight)."""
    out = []
    for node in cfg.nodes:
        facts = facts_by_node.get(node.name)
        found = None if facts is None else gpu_sharing(Context(node, cfg, facts))
        if found is not None and found.status == "fail":
            out.append(f"{node.name}: {found.summary}" + (f" (fix: {found.fix})" if found.fix else ""))
    return out


def _order(config: str) -> tuple[int, str]:
    try:
        return (mig.compute_slices(config), config)
    except ValueError:
        return (99, config)


def _custom(ctx: Context, sharing: MigSharing, evidence: str, unknown: list[str]) -> Finding:
    """A custom layout (gpu_sharing.mig_layouts) against each of the node's GPUs, by index (lspci order)."""
    entries = ctx.cfg.gpu_sharing.mig_layouts.get(sharing.profile) or []
    devices = [mig.normalize_device_id(str(d.get("device_id") or ""))
               for d in ctx.facts.get("nvidia_pci_devices") or [] if isinstance(d, dict)]  # fmt: skip
    problems, made = [], []
    for index, dev in enumerate(devices):
        layout, fam = ml.per_gpu(entries, index), mig.family_of(dev)
        if layout is None:
            problems.append(f"GPU {index} is named by no entry (mig-parted would leave it as it is)")
        elif layout and fam is not None:
            problems += [f"GPU {index}: {p}" for p in ml.fit_problems(fam, layout)]
            made.append(", ".join(f"{p} x{n}" for p, n in sorted(layout.items())))
    fix = f"change layout {sharing.profile} in gpu_sharing.mig_layouts (or the node's profile)"
    if problems:
        return host_finding(ctx, ID, "fail", f"{sharing.profile}: {problems[0]}", evidence + "; " + "; ".join(problems),
                            fix=fix + "; mig-parted refuses a layout the GPU cannot take")  # fmt: skip
    if unknown:
        return host_finding(ctx, ID, "warn", f"{sharing.profile}: gpustack has no profile list for {_model(unknown[0])}",
                            evidence, fix="the MIG manager checks it; gpustack verify reports a refusal (G12)")  # fmt: skip
    shared = f", each x{sharing.replicas}" if sharing.replicas else ""
    return host_finding(ctx, ID, "pass", f"{sharing.profile}: {' | '.join(dict.fromkeys(made)) or 'MIG off'} per GPU{shared}",
                        evidence)  # fmt: skip
