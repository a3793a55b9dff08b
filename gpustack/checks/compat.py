"""Preflight checks of the compatibility matrix, per host (registered with the preflight checks).

Each reads the host's facts and the matrix line of the configured Kubernetes minor
(gpustack/config/pins.py) and names the host and the fact that fails.
"""

from __future__ import annotations

from gpustack.checks import hostrules
from gpustack.checks.context import Context, check, host_finding
from gpustack.checks.model import Finding
from gpustack.config import compat, pins


def _os(ctx: Context) -> pins.OsRelease | None:
    return pins.os_release(str(ctx.facts.get("os_id", "")), str(ctx.facts.get("os_version_id", "")))


@check
def cgroup_v2(ctx: Context) -> Finding:
    v = hostrules.cgroup_v2(ctx.facts, compat.line(ctx.cfg).minor)
    return host_finding(ctx, "P17-cgroup-v2", v.status, v.summary, v.evidence if v.status != "pass" else "", v.fix)


@check
def containerd_version(ctx: Context) -> Finding:
    kl = compat.line(ctx.cfg)
    v = ctx.cfg.versions
    found = (ctx.facts.get("containerd") or {}).get("version")
    if v.containerd_source == "release":
        if found and not pins.at_least(found, kl.containerd_min):
            return host_finding(
                ctx,
                "P18-containerd",
                "warn",
                f"containerd {found} is installed; the containerd stage installs {v.containerd} from the release "
                "archive in /usr/local/bin and its unit takes over (the package stays installed, unused)",
                f"containerd --version: {found}",
            )
        advice = pins.containerd_recommendation(v.containerd, kl.minor)
        return host_finding(
            ctx,
            "P18-containerd",
            "warn" if advice else "pass",
            f"containerd {v.containerd} from the release archive"
            + (f" (found {found})" if found else "")
            + (f": {advice}" if advice else ""),
            f"versions.containerd: {v.containerd}" if advice else "",
            f"versions.containerd: {pins.CONTAINERD_VERSION} (the pin)" if advice else "",
        )
    # the distribution's package: the host's own containerd must be new enough
    release = _os(ctx)
    if found:
        ok = pins.at_least(found, kl.containerd_min)
        evidence = f"containerd --version: {found}"
    elif release is not None:
        ok = compat.distribution_ok(release.distribution_containerd, kl.containerd_min)
        found = f"{release.distribution_containerd}.x ({release.name} package)"
        evidence = f"{release.name} ships containerd {release.distribution_containerd}"
    else:
        return host_finding(ctx, "P18-containerd", "fail", "unknown OS: cannot tell which containerd its archive ships")
    if ok:
        advice = (
            pins.containerd_recommendation(found.split(" ")[0], kl.minor) if evidence.startswith("containerd") else ""
        )
        if advice:
            return host_finding(ctx, "P18-containerd", "warn", f"distribution containerd {found} runs Kubernetes "
                                f"{kl.minor}, but {advice}", evidence,
                                "set versions.containerd_source: release (upstream containerd, checksummed)")  # fmt: skip
        return host_finding(
            ctx, "P18-containerd", "pass", f"distribution containerd {found} satisfies Kubernetes {kl.minor}"
        )
    return host_finding(
        ctx,
        "P18-containerd",
        "fail",
        f"containerd {found} is too old for Kubernetes {kl.minor} (needs {kl.containerd_min} or newer)",
        evidence,
        "set versions.containerd_source: release (upstream containerd, checksummed) or choose an older Kubernetes",
    )


@check
def gpu_operator_os(ctx: Context) -> Finding:
    """The GPU Operator's validated Kubernetes range on this OS, and who builds the driver."""
    minor, chart = ctx.cfg.versions.kubernetes_minor, ctx.cfg.versions.gpu_operator
    os_id, ver = str(ctx.facts.get("os_id", "")), str(ctx.facts.get("os_version_id", ""))
    if pins.gpu_operator_supports(chart, minor, os_id, ver) is False:
        low, high = pins.GPU_OPERATOR_VALIDATED[chart].range_for(os_id, ver)
        return host_finding(
            ctx,
            "P19-gpu-operator",
            "fail",
            f"GPU Operator {chart} is validated on Kubernetes {low}-{high} on this OS, not {minor}",
            f"os-release: ID={os_id} VERSION_ID={ver}",
            f"set versions.kubernetes to a minor in {low}-{high}",
        )
    gpus = bool(ctx.facts.get("nvidia_pci_devices"))
    preinstalled = bool(ctx.facts.get("nvidia_driver_version")) or ctx.cfg.gpu.driver == "preinstalled"
    if not gpus or preinstalled:
        return host_finding(ctx, "P19-gpu-operator", "pass", f"GPU Operator {chart} supports Kubernetes {minor} here")
    release = _os(ctx)
    if release is not None and not release.driver_container:
        return host_finding(
            ctx,
            "P19-gpu-operator",
            "fail",
            f"the GPU Operator publishes no driver container for {release.name}: the NVIDIA driver must be preinstalled",
            "NVIDIA GPU on the PCI bus, no driver loaded",
            "install the NVIDIA driver from the distribution (nvidia-driver) and reboot; gpustack then sets driver.enabled=false",
        )
    if not ctx.facts.get("kernel_headers"):
        kernel = ctx.facts.get("kernel") or "$(uname -r)"
        return host_finding(
            ctx,
            "P19-gpu-operator",
            "fail",
            "the GPU Operator must build the NVIDIA driver here, and the running kernel has no headers",
            f"/lib/modules/{kernel}/build is missing",
            f"sudo apt-get install linux-headers-{kernel} (or reboot into a kernel whose headers are installed)",
        )
    return host_finding(
        ctx, "P19-gpu-operator", "pass", "the GPU Operator builds the driver against the installed kernel headers"
    )
