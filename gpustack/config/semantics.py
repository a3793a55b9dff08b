"""Cross-field rules on a parsed config. Pure (apart from reading SSH key files): each problem
names the path of the field it is about, so the loader can point at the file line."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

from gpustack.config import compat, pins, sharing
from gpustack.config.model import Config

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    path: Path_
    message: str
    #: the other fields the rule is about: the loader blames whichever of them was set last (a flag,
    #: then the environment, then the file), so an overlap set by a variable names the variable
    also: tuple[Path_, ...] = ()


def check(cfg: Config) -> list[Problem]:
    problems: list[Problem] = []
    problems += _nodes(cfg)
    problems += _networks(cfg)
    problems += _versions(cfg)
    problems += [Problem(p.path, p.message) for p in compat.config_problems(cfg)]
    problems += cluster_problems(cfg)
    problems += [Problem(path, message) for path, message in sharing.config_problems(cfg)]
    return problems


def _nodes(cfg: Config) -> list[Problem]:
    out: list[Problem] = []
    if not cfg.nodes:
        return [
            Problem(
                ("nodes",),
                "no nodes listed (list at least the control-plane node; without a config file gpustack targets this machine)",
            )
        ]
    for field in ("name", "address"):
        counts = Counter(getattr(n, field) for n in cfg.nodes)
        for i, n in enumerate(cfg.nodes):
            if counts[getattr(n, field)] > 1:
                out.append(Problem(("nodes", i, field), f"duplicate node {field} {getattr(n, field)!r}"))
    out += control_plane_problems(cfg)
    locals_ = [i for i, n in enumerate(cfg.nodes) if n.connection == "local"]
    for i in locals_[1:]:
        out.append(Problem(("nodes", i, "connection"), "only one node can use connection: local"))
    for i, n in enumerate(cfg.nodes):
        if n.ssh_key is not None and n.connection == "ssh":
            key = n.ssh_key.expanduser()
            if not key.exists():
                make = f"ssh-keygen -t ed25519 -f {key}, then ssh-copy-id -i {key} {n.user or 'USER'}@{n.address}"
                out.append(Problem(("nodes", i, "ssh_key"), f"SSH key {str(key)!r} does not exist (make one: {make})"))
            elif not key.is_file() or not os.access(key, os.R_OK):
                out.append(Problem(("nodes", i, "ssh_key"), f"SSH key {str(key)!r} is not a readable file"))
    return out


def control_plane_problems(cfg: Config) -> list[Problem]:
    """One control plane, or an odd number (etcd quorum) behind a stable endpoint: an existing load
    balancer (cluster.control_plane_endpoint) or a virtual IP gpustack runs (cluster.virtual_ip)."""
    cps = [i for i, n in enumerate(cfg.nodes) if n.role == "control-plane"]
    c = cfg.cluster
    out: list[Problem] = []
    if not cps:
        return [Problem(("nodes",), "no node has role: control-plane (one, or an odd number for HA, is required)")]
    if len(cps) % 2 == 0:
        out.append(
            Problem(
                ("nodes", cps[-1], "role"),
                f"{len(cps)} control-plane nodes: etcd needs an odd number (1, 3, 5) to keep a quorum; "
                f"add or remove one",
            )
        )
    if c.control_plane_endpoint and c.virtual_ip is not None:
        out.append(
            Problem(
                ("cluster", "virtual_ip"),
                "set either cluster.control_plane_endpoint (an existing load balancer) or cluster.virtual_ip "
                "(kube-vip), not both",
            )
        )
    if len(cps) > 1 and c.api_endpoint is None:
        out.append(
            Problem(
                ("cluster", "control_plane_endpoint"),
                f"{len(cps)} control-plane nodes need one address for the API server: set "
                "cluster.control_plane_endpoint (an existing load balancer) or cluster.virtual_ip (kube-vip)",
            )
        )
    if c.virtual_ip is not None and str(c.virtual_ip) in {n.address for n in cfg.nodes}:
        out.append(Problem(("cluster", "virtual_ip"), f"{c.virtual_ip} is a node's address; pick a free one"))
    return out


def _networks(cfg: Config) -> list[Problem]:
    out: list[Problem] = []
    pod, svc = cfg.cluster.pod_cidr, cfg.cluster.service_cidr
    if pod.overlaps(svc):
        out.append(
            Problem(
                ("cluster", "service_cidr"),
                f"pod CIDR {pod} and service CIDR {svc} overlap",
                (("cluster", "pod_cidr"),),
            )
        )
    for i, n in enumerate(cfg.nodes):
        ip = n.ip
        if ip is None:
            continue
        for name, net in (("pod_cidr", pod), ("service_cidr", svc)):
            if ip in net:
                out.append(
                    Problem(
                        ("nodes", i, "address"),
                        f"node address {ip} lies inside cluster.{name} {net}",
                        (("cluster", name),),
                    )
                )
    # kubeadm gives the API service the 1st address of the service CIDR and cluster DNS the 10th;
    # kube-apiserver refuses a service range wider than /12 (more than 20 host bits).
    if svc.num_addresses < 16:
        out.append(
            Problem(
                ("cluster", "service_cidr"),
                f"service CIDR {svc} is too small: the API service takes its 1st address "
                f"({svc.network_address + 1}) and cluster DNS its 10th ({svc.network_address + 10}); use /28 or "
                "larger (default 10.96.0.0/12)",
            )
        )
    elif svc.prefixlen < 12:
        out.append(
            Problem(
                ("cluster", "service_cidr"), f"service CIDR {svc} is too large: kube-apiserver accepts /12 or smaller"
            )
        )
    if pod.prefixlen > 24:
        out.append(Problem(("cluster", "pod_cidr"), "pod CIDR must be /24 or larger (each node takes a /24)"))
    elif len(cfg.nodes) > (room := 2 ** (24 - pod.prefixlen)):
        # kube-controller-manager gives each node a /24 (--node-cidr-mask-size, 24 for IPv4: kubernetes
        # cmd/kube-controller-manager/app/core.go); a node past the last one gets no podCIDR and no pod network
        wide = 24 - (len(cfg.nodes) - 1).bit_length()
        out.append(
            Problem(
                ("cluster", "pod_cidr"),
                f"pod CIDR {pod} holds {room} nodes (a /24 each) and the config has {len(cfg.nodes)}: "
                f"use a /{wide} or larger",
            )
        )
    return out


def _versions(cfg: Config) -> list[Problem]:
    v = cfg.versions
    if v.helm not in pins.HELM_SHA256 and not v.helm_sha256:
        return [
            Problem(
                ("versions", "helm"),
                f"Helm {v.helm} has no pinned checksum: set versions.helm_sha256 {{amd64: ..., arm64: ...}}",
            )
        ]
    return []


def cluster_problems(cfg: Config) -> list[Problem]:
    """Cross-field rules for the cluster layer (storage, alert routing, NodePorts)."""
    out: list[Problem] = []
    storage = cfg.monitoring.prometheus_storage
    if storage.ephemeral and storage.storage_class:
        out.append(Problem(("monitoring", "prometheus_storage", "ephemeral"), "ephemeral: true ignores storage_class"))
    names = [r.name for r in cfg.alerting.receivers]
    for i, name in enumerate(names):
        if name == "null":
            out.append(Problem(("alerting", "receivers", i, "name"), "'null' is reserved (the built-in receiver)"))
        elif names.index(name) != i:
            out.append(Problem(("alerting", "receivers", i, "name"), f"duplicate receiver name {name!r}"))
    for severity in ("critical", "warning", "info"):
        for j, name in enumerate(getattr(cfg.alerting.routes, severity)):
            if name not in names:
                known = ", ".join(names) or "none defined"
                out.append(
                    Problem(("alerting", "routes", severity, j), f"unknown receiver {name!r} (receivers: {known})")
                )
    ports = [
        (f, p)
        for f, p in (
            ("prometheus_nodeport", cfg.monitoring.prometheus_nodeport),
            ("grafana_nodeport", cfg.monitoring.grafana_nodeport),
            ("alertmanager_nodeport", cfg.monitoring.alertmanager_nodeport),
        )
        if p
    ]
    seen: dict[int, str] = {}
    for f, p in ports:
        if p in seen:
            out.append(Problem(("monitoring", f), f"NodePort {p} is already used by monitoring.{seen[p]}"))
        seen.setdefault(p, f)
    return out
