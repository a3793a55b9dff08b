"""The configuration model: one ``gpustack.yaml`` (every field optional; defaults are safe).

Shape-level rules (types, unknown keys, ranges) live on the models; rules that relate several fields (duplicate
nodes, CIDR overlaps) live in :mod:`gpustack.config.semantics` so each can name the exact field it is about."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from gpustack.config import pins
from gpustack.config.certificates import Certificates
from gpustack.config.etcd import Etcd
from gpustack.config.fields import (
    CLUSTER_NAME_RE,
    HOSTNAME_RE,
    IFACE_RE,
    NODE_NAME_RE,
    USER_RE,
    VERSION_RE,
    StrictModel,
    ipv4_network,
    node_address_problem,
    url_problem,
)
from gpustack.config.hosts import Hosts
from gpustack.config.monitoring import Alerting, Monitoring, Remediation
from gpustack.config.security import Security
from gpustack.config.sharing import GpuSharing, SharingSection

Role = Literal["control-plane", "worker"]


class Node(StrictModel):
    """One host. ``connection: local`` runs on this machine without SSH."""

    name: Annotated[str, Field(description="Kubernetes node name (lower-case DNS label)")]
    address: Annotated[str, Field(description="IP address or DNS name used for SSH and the cluster")]
    role: Role = "worker"
    user: str | None = Field(default=None, description="SSH user (default: your login name)")
    port: Annotated[int, Field(ge=1, le=65535)] = 22
    ssh_key: Path | None = Field(default=None, description="private key file for SSH")
    connection: Literal["ssh", "local"] = "ssh"
    become: bool = Field(default=True, description="use sudo (must be passwordless)")
    gpu_sharing: GpuSharing | None = Field(
        default=None,
        description="share this node's GPUs: {mode: mig, profile: all-1g.10gb}, {mode: time-slicing, replicas: 4}, "
        "{mode: mps, replicas: 4} or {mode: none}; wins over a gpu_sharing group (docs/gpu-sharing.md)",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NODE_NAME_RE.match(v):
            raise ValueError("must be a lower-case DNS name: a-z, 0-9, '-' and '.', at most 63 characters")
        return v

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        if v is not None and not USER_RE.match(v):
            raise ValueError(f"{v!r} is not a login name (letters, digits, '_', '.', '-', '@'; no spaces)")
        return v

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        problem = node_address_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        try:
            return ipaddress.ip_address(self.address)
        except ValueError:
            return None


class Cluster(StrictModel):
    name: str = "gpustack"
    pod_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("10.244.0.0/16")
    service_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("10.96.0.0/12")
    flannel_iface: str | None = Field(
        default=None, description="NIC Flannel uses between nodes (default: the default route's)"
    )
    dns_domain: str = "cluster.local"
    control_plane_endpoint: str | None = Field(
        default=None,
        description="HA: HOST[:PORT] of an existing load balancer in front of every control-plane node's API server "
        "(port 6443 when left out)",
    )
    virtual_ip: ipaddress.IPv4Address | None = Field(
        default=None,
        description="HA: a free address on the nodes' network that gpustack moves between the control-plane nodes "
        "(kube-vip static pod, ARP)",
    )
    virtual_ip_interface: str | None = Field(
        default=None, description="NIC kube-vip announces virtual_ip on (default: the default route's)"
    )

    @field_validator("control_plane_endpoint")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is None:
            return v
        host, sep, port = v.rpartition(":")
        if not sep:
            host, port = v, ""
        if not host or (sep and (not port.isdigit() or not 0 < int(port) < 65536)):
            raise ValueError(f"{v!r} is not HOST or HOST:PORT (e.g. k8s-api.example.com:6443)")
        problem = node_address_problem(host)
        if problem:
            raise ValueError(f"{v!r}: {problem}")
        return v

    @field_validator("virtual_ip_interface")
    @classmethod
    def _vip_iface(cls, v: str | None) -> str | None:
        if v is not None and (not IFACE_RE.match(v) or v in {".", ".."}):
            raise ValueError(f"{v!r} is not a network interface name (e.g. eth0)")
        return v

    @property
    def api_endpoint(self) -> tuple[str, int] | None:
        """(host, port) every node reaches the API server at in an HA cluster; None: the first control plane."""
        if self.control_plane_endpoint:
            host, sep, port = self.control_plane_endpoint.rpartition(":")
            return (host, int(port)) if sep else (self.control_plane_endpoint, 6443)
        if self.virtual_ip is not None:
            return str(self.virtual_ip), 6443
        return None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not CLUSTER_NAME_RE.match(v) or ".." in v:
            raise ValueError(
                f"{v!r} is not a safe cluster name: 1-63 letters, digits, '.', '_' or '-', starting with a letter "
                "or digit, no '/', spaces or '..' (it names a directory in the state directory)"
            )
        return v

    @field_validator("pod_cidr", "service_cidr", mode="before")
    @classmethod
    def _cidr(cls, v: object) -> object:
        return ipv4_network(v)

    @field_validator("flannel_iface")
    @classmethod
    def _iface(cls, v: str | None) -> str | None:
        if v is not None and (not IFACE_RE.match(v) or v in {".", ".."}):
            raise ValueError(
                f"{v!r} is not a network interface name (at most 15 characters, no '/', ':' or spaces; e.g. eth0, ens5f0)"
            )
        return v

    @field_validator("dns_domain")
    @classmethod
    def _dns_domain(cls, v: str) -> str:
        if not HOSTNAME_RE.match(v):
            raise ValueError(f"{v!r} is not a DNS domain (e.g. cluster.local)")
        return v

    @property
    def api_service_ip(self) -> ipaddress.IPv4Address:
        """The first address of the service CIDR: the ``kubernetes`` Service (10.96.0.1)."""
        return self.service_cidr.network_address + 1


class Versions(StrictModel):
    """Overrides of the pin table (gpustack/config/pins.py). Leave unset to use the pins."""

    kubernetes: str = pins.KUBERNETES[pins.KUBERNETES_DEFAULT]
    flannel: str = pins.FLANNEL_VERSION
    helm: str = pins.HELM_VERSION
    helm_sha256: dict[str, str] | None = Field(
        default=None, description="arch -> sha256 of the Helm archive, required for an unpinned Helm version"
    )
    containerd: str = Field(default=pins.CONTAINERD_VERSION, pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")
    containerd_sha256: dict[str, str] | None = Field(default=None, description="arch -> sha256 of the containerd release archive (for an unpinned version)")  # fmt: skip
    runc: str = Field(default=pins.RUNC_VERSION, pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")
    runc_sha256: dict[str, str] | None = Field(default=None, description="arch -> sha256 of the runc binary (for an unpinned version)")  # fmt: skip
    cni_plugins: str = Field(default=pins.CNI_PLUGINS_VERSION, pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")
    cni_plugins_sha256: dict[str, str] | None = Field(default=None, description="arch -> sha256 of the CNI plugins archive (for an unpinned version)")  # fmt: skip
    crictl: str = Field(default=pins.CRICTL_VERSION, pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")
    crictl_sha256: dict[str, str] | None = Field(default=None, description="arch -> sha256 of the crictl archive (for an unpinned version)")  # fmt: skip
    etcd_sha256: dict[str, str] | None = Field(default=None, description="arch -> sha256 of etcd's release archive (a mirror's own build; etcdutl for etcd restore)")  # fmt: skip
    containerd_source: Literal["release", "distribution"] = Field(
        default="release",
        description="release: upstream archives (checksummed); distribution: the OS package, where the matrix allows it",
    )
    image_digests: dict[str, str] | None = Field(default=None, description="image reference (name:tag) -> sha256:<digest>: added to (or replacing) the pin table's image digests")  # fmt: skip
    gpu_operator: str = pins.CHARTS["gpu-operator"].version
    kube_prometheus_stack: str = pins.CHARTS["kube-prometheus-stack"].version
    dcgm_exporter: str = pins.CHARTS["dcgm-exporter"].version

    @field_validator("kubernetes", mode="before")
    @classmethod
    def _kubernetes(cls, v: object) -> str:
        if isinstance(v, (int, float)):
            v = str(v)  # an unquoted 1.35 in YAML
        if not isinstance(v, str):
            raise ValueError("must be a version string such as '1.36'")
        try:
            return pins.kubernetes_patch(v)
        except KeyError:
            known = ", ".join(f"{m} ({p})" for m, p in pins.KUBERNETES.items())
            raise ValueError(f"unknown Kubernetes version {v!r}; supported: {known}") from None

    @field_validator("flannel", "helm", "gpu_operator", "kube_prometheus_stack", "dcgm_exporter", mode="before")
    @classmethod
    def _version(cls, v: object) -> object:
        if isinstance(v, (int, float)):
            v = str(v)
        if isinstance(v, str) and not VERSION_RE.match(v):
            raise ValueError(f"{v!r} is not a version such as 3.18.4 or v26.7.0")
        return v

    @field_validator("flannel")
    @classmethod
    def _flannel(cls, v: str) -> str:
        v = v.removeprefix("v")
        if v not in pins.FLANNEL_CNI_PLUGIN:
            known = ", ".join(pins.FLANNEL_CNI_PLUGIN)
            raise ValueError(f"gpustack renders Flannel's manifest for {known} only (not {v!r})")
        return v

    @field_validator("helm_sha256", "cni_plugins_sha256", "crictl_sha256", "etcd_sha256")
    @classmethod
    def _sha(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for arch, digest in (v or {}).items():
            if arch not in {"amd64", "arm64"}:
                raise ValueError(f"unknown architecture {arch!r} (amd64, arm64)")
            if not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise ValueError(f"{arch}: {digest!r} is not a sha256 (64 lower-case hex digits)")
        return v

    @field_validator("image_digests")
    @classmethod
    def _digests(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for ref, digest in (v or {}).items():
            if "@" in ref or ":" not in ref.rsplit("/", 1)[-1]:
                raise ValueError(f"{ref!r}: use an image reference with a tag (name:tag), without a digest")
            if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
                raise ValueError(f"{ref}: {digest!r} is not a digest (sha256: and 64 lower-case hex digits)")
        return v

    @property
    def kubernetes_minor(self) -> str:
        return ".".join(self.kubernetes.split(".")[:2])


class Sources(StrictModel):
    """Where packages and binaries come from; point these at a mirror for air-gapped sites. Placeholders: {minor}
    (Kubernetes minor, e.g. 1.36), {version}, {arch} (amd64/arm64)."""

    kubernetes_apt_url: str = pins.KUBERNETES_APT_URL
    kubernetes_apt_key_url: str = pins.KUBERNETES_APT_KEY_URL
    helm_url: str = pins.HELM_URL
    containerd_url: str = pins.CONTAINERD_URL
    runc_url: str = pins.RUNC_URL
    cni_plugins_url: str = pins.CNI_PLUGINS_URL
    crictl_url: str = pins.CRICTL_URL
    etcd_url: str = pins.ETCD_URL  # etcdutl for `etcd restore`, only where the etcd image lacks it
    kubernetes_apt_key_fingerprint: str = Field(
        default=pins.KUBERNETES_APT_KEY_FINGERPRINT,
        pattern=r"^[0-9A-F]{40}$",
        description="fingerprint the Kubernetes apt key must have (a mirror's own key: set its fingerprint)",
    )
    # --- where `gpustack bundle create` fetches from (air-gapped sites; see docs/airgap.md) ---
    registry_mirrors: dict[str, str] = Field(
        default_factory=dict,
        description="registry host (registry.k8s.io, nvcr.io, ...) -> URL of a mirror serving the same repositories",
    )
    chart_repos: dict[str, str] = Field(
        default_factory=dict, description="chart name -> Helm repository URL (default: the pin table's)"
    )
    os_apt: dict[str, list[str]] = Field(
        default_factory=dict,
        description="OS release (ubuntu-24.04, debian-12, ...) -> sources.list lines 'URL SUITE COMPONENT...' "
        "(default: the distribution's archive)",
    )
    os_apt_keyring: dict[str, Path] = Field(
        default_factory=dict,
        description="OS release or OS id (ubuntu, debian) -> keyring file apt verifies that archive with",
    )

    @field_validator("kubernetes_apt_key_fingerprint", mode="before")
    @classmethod
    def _fingerprint(cls, v: object) -> object:
        return v.replace(" ", "").upper() if isinstance(v, str) else v

    @field_validator("kubernetes_apt_url", "kubernetes_apt_key_url", "helm_url", "containerd_url", "runc_url",
                     "cni_plugins_url", "crictl_url")  # fmt: skip
    @classmethod
    def _url(cls, v: str) -> str:
        problem = url_problem(v, placeholders=True)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("registry_mirrors", "chart_repos")
    @classmethod
    def _url_map(cls, v: dict[str, str]) -> dict[str, str]:
        for key, url in v.items():
            problem = url_problem(url)
            if problem:
                raise ValueError(f"{key}: {problem}")
        return v

    @field_validator("os_apt", "os_apt_keyring")
    @classmethod
    def _os_keys(cls, v: dict[str, object]) -> dict[str, object]:
        known = {f"{o.id}-{o.version}" for o in pins.OS_RELEASES} | {o.id for o in pins.OS_RELEASES}
        for key in v:
            if key not in known:
                raise ValueError(f"{key!r} is not a supported OS release ({', '.join(sorted(known))})")
        return v

    @field_validator("os_apt")
    @classmethod
    def _apt_lines(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for key, lines in v.items():
            for line in lines:
                parts = line.split()
                problem = url_problem(parts[0]) if parts else "empty line"
                if problem or len(parts) < 3:
                    raise ValueError(f"{key}: {line!r} is not 'URL SUITE COMPONENT...' ({problem or 'too short'})")
        return v


class Proxy(StrictModel):
    http: str | None = None
    https: str | None = None
    no_proxy: list[str] = Field(
        default_factory=list, description="added to the computed list (localhost, node addresses, CIDRs, .svc)"
    )

    @field_validator("http", "https")
    @classmethod
    def _proxy_url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        problem = url_problem(v)
        if problem:
            raise ValueError(f"{problem} (a proxy is http://host:port)")
        if urlsplit(v).path not in {"", "/"}:
            raise ValueError(f"{v!r}: a proxy URL has no path (http://host:port)")
        return v

    @field_validator("no_proxy")
    @classmethod
    def _no_proxy(cls, v: list[str]) -> list[str]:
        for entry in v:
            if not entry or any(c.isspace() or c in ",;" for c in entry):
                raise ValueError(
                    f"{entry!r} is not a no_proxy entry: one host, domain (.example.com), IP or CIDR per list item"
                )
        return v

    @property
    def enabled(self) -> bool:
        return bool(self.http or self.https)


#: what gpustack's firewall chain closes to all but the cluster's members (playbooks/roles/firewall):
#: etcd (client, peer, metrics), the API server, the kubelet, controller-manager, scheduler
CLOSED_TCP_PORTS = frozenset({2379, 2380, 2381, 6443, 10250, 10257, 10259})


class Firewall(StrictModel):
    enabled: bool = Field(default=True, description="manage the GPUSTACK iptables chain")
    extra_tcp_ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(
        default_factory=list, description="TCP ports opened to every source (also NodePorts in the list)"
    )
    admin_cidrs: list[ipaddress.IPv4Network] = Field(
        default_factory=list,
        description="IPv4 networks that may reach the API server (6443) and the NodePorts besides the cluster's "
        "nodes; empty: only the nodes and the machine gpustack runs from (API server only)",
    )

    @field_validator("extra_tcp_ports")
    @classmethod
    def _not_closed(cls, v: list[int]) -> list[int]:
        closed = sorted(set(v) & CLOSED_TCP_PORTS)
        if closed:
            raise ValueError(
                f"{', '.join(map(str, closed))}: control-plane ports stay closed to non-members "
                "(firewall.admin_cidrs opens the API server to a network)"
            )
        return v

    @field_validator("admin_cidrs", mode="before")
    @classmethod
    def _cidrs(cls, v: object) -> object:
        return [ipv4_network(c) for c in v] if isinstance(v, list) else v


class Gpu(StrictModel):
    """Who provides each GPU component. ``auto`` is decided from the preflight facts."""

    driver: Literal["auto", "preinstalled", "operator"] = Field(
        default="auto", description="auto: preinstalled when any GPU node already has an NVIDIA driver"
    )
    toolkit: Literal["auto", "preinstalled", "operator"] = Field(
        default="auto", description="auto: preinstalled when the facts show the NVIDIA container toolkit"
    )
    exporter: Literal["standalone", "operator"] = Field(
        default="standalone", description="dcgm-exporter from its own chart (standalone) or from the GPU Operator"
    )
    nfd: Literal["auto", "enabled", "disabled"] = Field(
        default="auto", description="auto: let the GPU Operator deploy Node Feature Discovery unless it already runs"
    )
    mig_strategy: Literal["auto", "single", "mixed"] = Field(
        default="auto",
        description="how MIG devices are advertised, one value for the cluster: mixed (nvidia.com/mig-<profile>), "
        "single (nvidia.com/gpu; one profile per node); auto: mixed, or single when a node uses mps",
    )
    mig_reboot: bool = Field(
        default=False,
        description="let the MIG manager reboot a node whose MIG mode change needs it (WITH_REBOOT; cloud VMs)",
    )


class Ssh(StrictModel):
    known_hosts: Path = Path("~/.ssh/known_hosts")
    accept_new_host_keys: bool = Field(
        default=False, description="trust and record unknown host keys (first contact only)"
    )
    connect_timeout: Annotated[int, Field(ge=1, le=300)] = 10
    mitogen: bool = Field(
        default=True,
        description="run the stages' Ansible tasks through Mitogen for Ansible (one Python per host for the "
        "whole run): the same tasks in about half the time; false: Ansible's own linear strategy",
    )


class Preflight(StrictModel):
    ignore: list[str] = Field(
        default_factory=list, description="check ids to downgrade to warnings ('all' for every check)"
    )
    min_cpus: Annotated[int, Field(ge=1)] = 2
    min_memory_gib: Annotated[float, Field(gt=0)] = 4
    min_disk_gib: Annotated[float, Field(gt=0)] = 20
    registries: list[str] = Field(
        default_factory=lambda: list(pins.IMAGE_REGISTRIES),
        description="image registries every node must reach (P25): where containerd pulls from; with "
        "registry mirrors, list the mirrors (host[:port], or http://host:port for a plain-HTTP one)",
    )

    @field_validator("registries")
    @classmethod
    def _registries(cls, v: list[str]) -> list[str]:
        for entry in v:
            if not re.fullmatch(r"(https?://)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?/?", entry):
                raise ValueError(
                    f"{entry!r} is not a registry: host[:port] (e.g. nvcr.io, mirror.example.com:5000) "
                    "or http(s)://host[:port]"
                )
        return v


class Config(StrictModel):
    nodes: list[Node] = Field(default_factory=list)
    cluster: Cluster = Cluster()
    certificates: Certificates = Certificates()
    etcd: Etcd = Etcd()
    versions: Versions = Versions()
    sources: Sources = Sources()
    proxy: Proxy = Proxy()
    firewall: Firewall = Firewall()
    monitoring: Monitoring = Monitoring()
    gpu: Gpu = Gpu()
    gpu_sharing: SharingSection = SharingSection()
    alerting: Alerting = Alerting()
    ssh: Ssh = Ssh()
    preflight: Preflight = Preflight()
    remediation: Remediation = Remediation()
    security: Security = Security()
    hosts: Hosts = Hosts()

    @property
    def control_plane(self) -> Node:
        return next(n for n in self.nodes if n.role == "control-plane")

    @property
    def workers(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "worker"]

    @property
    def control_planes(self) -> list[Node]:
        """Every control-plane node; the first one runs kubeadm init, the others join it."""
        return [n for n in self.nodes if n.role == "control-plane"]
