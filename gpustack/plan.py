"""The ordered stages of ``gpustack up`` as plain data, and stage selection."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gpustack.errors import UsageError

Runner = Literal["preflight", "ansible", "cluster"]


@dataclass(frozen=True)
class Stage:
    id: str
    title: str
    runner: Runner
    hosts: str  # which hosts it touches
    changes: str  # what it changes, for `gpustack plan`


STAGES: tuple[Stage, ...] = (
    Stage(
        "preflight",
        "Preflight checks",
        "preflight",
        "all",
        "nothing: reads OS, CPU, memory, disk, swap, ports, GPUs, Secure Boot, existing Kubernetes, sudo, time sync, "
        "reachability, cgroup v2, containerd version, GPU Operator support (driver container, kernel headers)",
    ),
    Stage(
        "os",
        "OS preparation",
        "ansible",
        "all",
        "kernel modules overlay/br_netfilter (/etc/modules-load.d/gpustack.conf), sysctl (/etc/sysctl.d/99-gpustack-kubernetes.conf), swap off and commented out in /etc/fstab (backup kept), base packages, apt proxy",
    ),
    Stage(
        "firewall",
        "Firewall",
        "ansible",
        "all",
        "iptables chain GPUSTACK-INPUT with one jump from INPUT (pod CIDR -> API, kubelet, VXLAN, NodePorts), gpustack-firewall.service to persist it; firewalld zone 'gpustack' when firewalld runs",
    ),
    Stage(
        "containerd",
        "containerd",
        "ansible",
        "all",
        "containerd and runc from the sha256-verified release archives into /usr/local (or the distribution's "
        "package where the matrix allows), own unit, /etc/containerd/config.toml version 3 with SystemdCgroup = true "
        "and the minor's sandbox image (backup kept), proxy drop-in, service enabled",
    ),
    Stage(
        "kubernetes",
        "Kubernetes packages",
        "ansible",
        "all",
        "apt key checked against its pinned gpg fingerprint, keyring /etc/apt/keyrings, pkgs.k8s.io source "
        "with signed-by, kubelet/kubeadm/kubectl pinned and held",
    ),
    Stage(
        "control-plane",
        "Control plane",
        "ansible",
        "control-plane",
        "kubeadm init from /etc/gpustack/kubeadm-config.yaml (first run only), ~/.kube/config 0600, local copy of the admin kubeconfig, control-plane taint removed on single-node clusters",
    ),
    Stage(
        "workers", "Worker join", "ansible", "workers", "kubeadm join with a fresh token (only nodes not joined yet)"
    ),
    Stage(
        "network",
        "Flannel",
        "ansible",
        "control-plane",
        "pinned kube-flannel manifest with the cluster's pod CIDR (and interface), applied; waits for Flannel and CoreDNS",
    ),
    Stage(
        "helm",
        "Helm",
        "ansible",
        "control-plane",
        "helm binary, pinned version, sha256-verified, in /usr/local/bin (and for you, in the state directory)",
    ),
    Stage(
        "cluster",
        "GPU and monitoring stack",
        "cluster",
        "control-plane",
        "namespaces, Prometheus volume, Grafana admin Secret; Helm: kube-prometheus-stack (CRDs first), then "
        "GPU Operator and dcgm-exporter concurrently (unchanged releases untouched); ServiceMonitor, "
        "GPU alert rules, DCGM dashboard ConfigMap (server-side apply)",
    ),
)

STAGE_IDS: tuple[str, ...] = tuple(s.id for s in STAGES)


def _check(ids: Sequence[str], flag: str) -> None:
    unknown = [i for i in ids if i not in STAGE_IDS]
    if unknown:
        raise UsageError(f"{flag}: unknown stage {', '.join(unknown)}; stages are: {', '.join(STAGE_IDS)}")


def select(*, only: Sequence[str] = (), from_: str | None = None, skip: Sequence[str] = ()) -> list[Stage]:
    """Resolve --only/--from/--skip into the ordered stages to run.

    Preflight runs before any selection that changes hosts, unless it is skipped explicitly.
    """
    _check(only, "--only")
    _check(skip, "--skip")
    if from_ is not None:
        _check([from_], "--from")
    if only and from_:
        raise UsageError("--only and --from cannot be combined")
    stages = list(STAGES)
    if from_:
        stages = stages[STAGE_IDS.index(from_) :]
    if only:
        stages = [s for s in stages if s.id in only]
    # every stage that changes something needs the hosts' facts (the cluster stage sizes values from them)
    if stages and stages[0].id != "preflight" and any(s.runner != "preflight" for s in stages):
        stages.insert(0, STAGES[0])
    stages = [s for s in stages if s.id not in skip]
    if not stages:
        raise UsageError("nothing to run: the selection leaves no stage")
    return stages
