"""Preflight: host facts (from playbooks/library/gpustack_facts.py) -> findings. Pure.

Errors (status ``fail``) stop ``gpustack up`` before any host is changed; warnings are shown.
``--ignore-preflight`` (ids or names, or ``all``) turns chosen failures into warnings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gpustack.checks import hostrules
from gpustack.checks.context import CHECKS, Context, Facts, check, host_finding
from gpustack.checks.model import Finding
from gpustack.config import pins
from gpustack.config.model import Config, Node

GiB = 1024**3

SUPPORTED_OS = {(o.id, o.version) for o in pins.OS_RELEASES}
SUPPORTED_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
# port, proto, who uses it
CLUSTER_PORTS: tuple[tuple[int, str, str], ...] = (
    (6443, "tcp", "kube-apiserver"),
    (10250, "tcp", "kubelet"),
    (10257, "tcp", "kube-controller-manager"),
    (10259, "tcp", "kube-scheduler"),
    (2379, "tcp", "etcd"),
    (2380, "tcp", "etcd peer"),
    (8472, "udp", "Flannel VXLAN"),
    # flanneld's health endpoint from Flannel 0.28.9 (hostNetwork, 0.0.0.0): taken, flanneld panics and crash-loops
    (pins.FLANNEL_HEALTHZ_PORT, "tcp", "Flannel health (flanneld --healthz-port)"),
)
KUBE_PROCESSES = {
    "kube-apiserver",
    "kubelet",
    "kube-controller",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
    "flanneld",
    "kube-proxy",
}


@check
def os_supported(ctx: Context) -> Finding:
    os_id, ver = str(ctx.facts.get("os_id", "")), str(ctx.facts.get("os_version_id", ""))
    pretty = ctx.facts.get("os_pretty") or f"{os_id} {ver}"
    if (os_id, ver) in SUPPORTED_OS:
        return host_finding(ctx, "P01-os", "pass", f"{pretty} is supported")
    return host_finding(
        ctx,
        "P01-os",
        "fail",
        f"{pretty} is not supported",
        f"os-release: ID={os_id} VERSION_ID={ver}",
        "use " + ", ".join(o.name for o in pins.OS_RELEASES),
    )


@check
def arch_supported(ctx: Context) -> Finding:
    arch = str(ctx.facts.get("arch", ""))
    if arch in SUPPORTED_ARCH:
        return host_finding(ctx, "P02-arch", "pass", f"architecture {arch}")
    return host_finding(
        ctx,
        "P02-arch",
        "fail",
        f"architecture {arch or 'unknown'} is not supported",
        fix="use an x86_64 or aarch64 host",
    )


@check
def cpus(ctx: Context) -> Finding:
    n = int(ctx.facts.get("cpus") or 0)
    need = ctx.cfg.preflight.min_cpus
    if n >= need:
        return host_finding(ctx, "P03-cpu", "pass", f"{n} CPUs")
    return host_finding(
        ctx,
        "P03-cpu",
        "fail",
        f"{n} CPU(s), at least {need} needed",
        f"nproc={n}",
        "use a larger host (kubeadm needs 2 CPUs)",
    )


@check
def memory(ctx: Context) -> Finding:
    have = int(ctx.facts.get("mem_total_bytes") or 0) / GiB
    need = ctx.cfg.preflight.min_memory_gib
    # MemTotal is a little below the installed size; allow 5 %.
    if have >= need * 0.95:
        return host_finding(ctx, "P04-memory", "pass", f"{have:.1f} GiB memory")
    return host_finding(
        ctx,
        "P04-memory",
        "fail",
        f"{have:.1f} GiB memory, at least {need:g} GiB needed",
        f"MemTotal={have:.2f} GiB",
        "use a host with more memory (the monitoring stack alone needs ~2 GiB)",
    )


@check
def disk(ctx: Context) -> Finding:
    free: Mapping[str, int] = ctx.facts.get("disk_free_bytes") or {}
    have = int(free.get("/var/lib", free.get("/", 0))) / GiB
    need = ctx.cfg.preflight.min_disk_gib
    if have >= need:
        return host_finding(ctx, "P05-disk", "pass", f"{have:.0f} GiB free in /var/lib")
    return host_finding(
        ctx,
        "P05-disk",
        "fail",
        f"only {have:.1f} GiB free in /var/lib, {need:g} GiB needed",
        fix="free space under /var/lib (container images and etcd live there) or grow the disk",
    )


@check
def swap(ctx: Context) -> Finding:
    active = ctx.facts.get("swap_active") or []
    lines = ctx.facts.get("fstab_swap_lines") or []
    if not active and not lines:
        return host_finding(ctx, "P06-swap", "pass", "swap is off")
    ev = "; ".join([f"active: {s.get('device')}" for s in active] + [f"fstab: {ln}" for ln in lines])
    return host_finding(
        ctx,
        "P06-swap",
        "warn",
        "swap is on; the os stage turns it off and comments it out of /etc/fstab (backup kept)",
        ev,
    )


def _port_owner(listening: Iterable[Mapping[str, Any]], port: int, proto: str) -> list[Mapping[str, Any]]:
    return [x for x in listening if int(x.get("port", -1)) == port and x.get("proto") == proto]


@check
def ports(ctx: Context) -> Finding:
    listening = ctx.facts.get("listening") or []
    ours = bool((ctx.facts.get("kubernetes") or {}).get("gpustack_marker"))
    conflicts = []
    for port, proto, what in CLUSTER_PORTS:
        for sock in _port_owner(listening, port, proto):
            proc = sock.get("process") or "unknown process"
            if ours and (proc in KUBE_PROCESSES or proc == "unknown process"):
                continue  # our own cluster, from an earlier run
            conflicts.append(f"{port}/{proto} ({what}) used by {proc}")
    if not conflicts:
        return host_finding(
            ctx, "P07-ports", "pass", "cluster ports are free" + (" or owned by gpustack" if ours else "")
        )
    return host_finding(
        ctx,
        "P07-ports",
        "fail",
        "ports Kubernetes needs are in use",
        "; ".join(conflicts),
        "stop the service holding the port (ss -ltnup shows it) or use another host",
    )


@check
def node_exporter(ctx: Context) -> Finding:
    if ctx.facts.get("node_exporter_on_9100"):
        return host_finding(
            ctx,
            "P16-node-exporter",
            "warn",
            "a host node_exporter listens on 9100; the cluster's node-exporter will use another port",
            "9100/tcp in use",
        )
    return host_finding(ctx, "P16-node-exporter", "pass", "port 9100 is free")


@check
def gpu(ctx: Context) -> Finding:
    devs = ctx.facts.get("nvidia_pci_devices") or []
    if devs:
        drv = ctx.facts.get("nvidia_driver_version")
        extra = f", driver {drv} preinstalled" if drv else ", no driver installed (the GPU Operator installs it)"
        return host_finding(
            ctx, "P08-gpu", "pass", f"{len(devs)} NVIDIA GPU(s){extra}", ", ".join(d.get("slot", "?") for d in devs)
        )
    return host_finding(ctx, "P08-gpu", "warn", "no NVIDIA GPU on the PCI bus: this node joins as a CPU-only worker")


@check
def nouveau(ctx: Context) -> Finding:
    """nouveau only binds to NVIDIA hardware, so a loaded nouveau always blocks the NVIDIA driver
    (even where the PCI scan found no compute GPU)."""
    if not ctx.facts.get("nouveau_loaded"):
        return host_finding(ctx, "P09-nouveau", "pass", "nouveau is not loaded")
    fix = (
        "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | sudo tee /etc/modprobe.d/blacklist-nouveau.conf"
        " && sudo update-initramfs -u && sudo reboot"
    )
    return host_finding(
        ctx,
        "P09-nouveau",
        "fail",
        "the nouveau driver is loaded: the NVIDIA driver cannot load beside it",
        "/proc/modules lists nouveau",
        fix,
    )


@check
def secure_boot(ctx: Context) -> Finding:
    state = ctx.facts.get("secure_boot", "unknown")
    has_gpu = bool(ctx.facts.get("nvidia_pci_devices"))
    preinstalled = bool(ctx.facts.get("nvidia_driver_version"))
    if state != "enabled" or not has_gpu or preinstalled:
        return host_finding(ctx, "P10-secure-boot", "pass", f"Secure Boot {state}")
    return host_finding(
        ctx,
        "P10-secure-boot",
        "warn",
        "Secure Boot is on: the GPU Operator's driver container builds unsigned modules the kernel will refuse",
        fix="disable Secure Boot in firmware, or preinstall a signed NVIDIA driver (gpustack then sets driver.enabled=false)",
    )


@check
def existing_kubernetes(ctx: Context) -> Finding:
    k = ctx.facts.get("kubernetes") or {}
    if k.get("gpustack_marker"):
        return host_finding(
            ctx, "P11-existing-kubernetes", "pass", "Kubernetes installed by gpustack (re-run converges)"
        )
    if k.get("admin_conf") or k.get("kubelet_conf"):
        return host_finding(
            ctx,
            "P11-existing-kubernetes",
            "fail",
            "Kubernetes is already installed here, not by gpustack",
            "/etc/kubernetes/{admin,kubelet}.conf exists",
            "use a fresh host, or remove the old cluster first (sudo kubeadm reset -f) if you are sure",
        )
    return host_finding(ctx, "P11-existing-kubernetes", "pass", "no existing Kubernetes")


@check
def sudo(ctx: Context) -> Finding:
    if ctx.facts.get("is_root") or ctx.facts.get("sudo_nopasswd"):
        return host_finding(ctx, "P12-sudo", "pass", "root or passwordless sudo")
    user = ctx.node.user or "the SSH user"
    return host_finding(
        ctx,
        "P12-sudo",
        "fail",
        "sudo asks for a password",
        fix=f"echo '{user} ALL=(ALL) NOPASSWD:ALL' | sudo tee /etc/sudoers.d/90-gpustack && sudo chmod 0440 /etc/sudoers.d/90-gpustack",
    )


@check
def time_sync(ctx: Context) -> Finding:
    synced = ctx.facts.get("time_synced")
    if synced:
        return host_finding(ctx, "P13-time-sync", "pass", "clock synchronised")
    state = "not synchronised" if synced is False else "synchronisation unknown"
    return host_finding(
        ctx,
        "P13-time-sync",
        "warn",
        f"clock {state}: certificates and tokens need agreeing clocks",
        fix="sudo timedatectl set-ntp true (or install chrony)",
    )


@check
def reachability(ctx: Context) -> Finding:
    peers: Mapping[str, bool] = ctx.facts.get("peers") or {}
    down = sorted(a for a, ok in peers.items() if not ok)
    if not down:
        return host_finding(
            ctx, "P14-reachability", "pass", f"reaches {len(peers)} other node(s)" if peers else "single node"
        )
    return host_finding(
        ctx,
        "P14-reachability",
        "fail",
        f"cannot reach {', '.join(down)}",
        "TCP connect to port 22 failed",
        "check routing and firewalls between the nodes",
    )


@check
def kernel_modules(ctx: Context) -> Finding:
    missing = [m for m in ("br_netfilter", "overlay") if not ctx.facts.get(m)]
    if not missing:
        return host_finding(ctx, "P15-kernel-modules", "pass", "br_netfilter and overlay available")
    return host_finding(
        ctx, "P15-kernel-modules", "warn", f"{', '.join(missing)} not loaded yet; the os stage loads and persists them"
    )


# --- rules doctor judges too (gpustack.checks.hostrules) ------------------------------------------------


def _operator_builds(ctx: Context) -> bool:
    """The GPU Operator's driver container will build the driver here: GPUs, and no preinstalled driver."""
    preinstalled = bool(ctx.facts.get("nvidia_driver_version")) or ctx.cfg.gpu.driver == "preinstalled"
    return bool(ctx.facts.get("nvidia_pci_devices")) and not preinstalled


def _rule(ctx: Context, id_: str, v: hostrules.Verdict) -> Finding:
    return host_finding(
        ctx, id_, v.status, v.summary, v.evidence if v.status != "pass" else "", v.fix if v.status != "pass" else ""
    )


@check
def containerd_drop_ins(ctx: Context) -> Finding:
    """Drop-ins (the NVIDIA toolkit's 99-nvidia.toml) the current config.toml does not import: a warning before
    ``up``, whose containerd stage adds the directory to the imports (of an edited or a regenerated config)."""
    v = hostrules.containerd_drop_ins(ctx.facts)
    if v.status == "pass":
        return _rule(ctx, "P20-containerd-drop-ins", v)
    fix = f"the containerd stage of `gpustack up` adds {hostrules.TOOLKIT_IMPORT} to the imports; by hand: {v.fix}"
    return _rule(ctx, "P20-containerd-drop-ins", replace(v, status="warn", fix=fix))


@check
def unattended_upgrades(ctx: Context) -> Finding:
    built = hostrules.driver_is_built(ctx.facts, _operator_builds(ctx))
    return _rule(ctx, "P21-unattended-upgrades", hostrules.unattended_upgrades(ctx.facts, built))


@check
def next_kernel_headers(ctx: Context) -> Finding:
    built = hostrules.driver_is_built(ctx.facts, _operator_builds(ctx))
    return _rule(ctx, "P22-next-kernel-headers", hostrules.next_kernel_headers(ctx.facts, built))


@check
def fabric_manager(ctx: Context) -> Finding:
    return _rule(ctx, "P23-fabric-manager", hostrules.fabric_manager(ctx.facts, _operator_builds(ctx)))


def run_checks(cfg: Config, facts_by_host: Mapping[str, Facts], nodes: Sequence[str] | None = None) -> list[Finding]:
    """Every check on every node (or on ``nodes``, the run's host limit)."""
    findings: list[Finding] = []
    for node in cfg.nodes:
        if nodes is not None and node.name not in nodes:
            continue
        facts = facts_by_host.get(node.name)
        if facts is None:
            findings.append(
                Finding(
                    "P00-facts",
                    "host",
                    "fail",
                    "no facts collected",
                    host=node.name,
                    fix="see the preflight log in the run directory",
                )
            )
            continue
        ctx = Context(node, cfg, facts)
        findings += [c(ctx) for c in CHECKS]
    return findings


def apply_ignores(findings: Sequence[Finding], ignore: Iterable[str]) -> list[Finding]:
    """Downgrade failures named in --ignore-preflight (full id, short name, or 'all') to warnings."""
    names = {i.strip().lower() for i in ignore if i.strip()}
    out = []
    for f in findings:
        if f.status == "fail" and ({"all", f.id.lower(), f.name.lower()} & names):
            f = replace(f, status="warn", summary=f"{f.summary} (ignored)")
        out.append(f)
    return out


def check_names() -> list[str]:
    """All preflight check ids (for help text and validation of --ignore-preflight)."""
    from gpustack.config.model import Config as _C

    dummy = Node(name="x", address="192.0.2.1", role="control-plane")
    ctx = Context(dummy, _C(nodes=[dummy]), {})
    return sorted({c(ctx).id for c in CHECKS})


# the compatibility-matrix and package-source checks register after this module's (the table's order)
from gpustack.checks import compat as _compat  # noqa: E402,F401
from gpustack.checks import sharing as _sharing  # noqa: E402,F401
from gpustack.checks import sources as _sources  # noqa: E402,F401
