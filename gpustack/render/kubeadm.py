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
    )
