"""kubeadm configuration (InitConfiguration + ClusterConfiguration + KubeletConfiguration)."""

from __future__ import annotations

from gpustack.config.certificates import go_duration
from gpustack.config.model import Config
from gpustack.render.security import kubeadm_security
from gpustack.render.templating import render_template


def api_endpoint(cfg: Config) -> str:
    """HOST:PORT every node reaches the API server at: the HA endpoint (load balancer or virtual
    IP), else the first control plane's address."""
    host, port = cfg.cluster.api_endpoint or (cfg.control_plane.address, 6443)
    return f"{host}:{port}"


def cert_sans(cfg: Config) -> list[str]:
    """Names the API server certificate carries: the endpoint, every control plane's address and name."""
    sans = [cfg.cluster.api_endpoint[0]] if cfg.cluster.api_endpoint else []
    for n in cfg.control_planes:
        sans += [n.address, n.name]
    return list(dict.fromkeys(sans))


#: kubeadm's etcd serves ``/metrics`` (plain HTTP, no authentication) on ``http://127.0.0.1:2381`` by default
#: (kubernetes ``cmd/kubeadm/app/phases/etcd/local.go``, ``constants.EtcdMetricsPort`` = 2381)
ETCD_METRICS_PORT = 2381
#: the same port on every address, so Prometheus reaches it at the node's; kubeadm's etcd settings are cluster-wide
#: (one ClusterConfiguration for every control plane), so no per-node address. kubeadm's liveness and startup probes
#: follow the first URL (``util/staticpod`` ``GetEtcdProbeEndpoint``: host 0.0.0.0, which the kernel connects to
#: over loopback)
ETCD_METRICS_URL = f"http://0.0.0.0:{ETCD_METRICS_PORT}"


def etcd_args(cfg: Config) -> list[tuple[str, str]]:
    """etcd's ``extraArgs``: its metrics on every address, only where gpustack's firewall closes the port to all but
    the nodes and the pod network (docs/decisions.md, "etcd metrics scraped"); otherwise kubeadm's loopback default."""
    return [("listen-metrics-urls", ETCD_METRICS_URL)] if cfg.firewall.enabled else []


def render_init_config(cfg: Config) -> str:
    return render_template(
        "kubeadm-config.yaml.j2",
        node=cfg.control_plane,
        cluster=cfg.cluster,
        versions=cfg.versions,
        single_node=len(cfg.nodes) == 1,
        endpoint=api_endpoint(cfg),
        sans=cert_sans(cfg),
        certificate_validity=go_duration(cfg.certificates.validity),
        ca_certificate_validity=go_duration(cfg.certificates.ca_validity),
        security=kubeadm_security(cfg),
        etcd_args=etcd_args(cfg),
    )
