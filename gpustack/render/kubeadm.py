"""kubeadm configuration (InitConfiguration + ClusterConfiguration + KubeletConfiguration)."""

from __future__ import annotations

from gpustack.config.model import Config
from gpustack.render.templating import render_template


def render_init_config(cfg: Config) -> str:
    return render_template(
        "kubeadm-config.yaml.j2",
        node=cfg.control_plane,
        cluster=cfg.cluster,
        versions=cfg.versions,
        single_node=len(cfg.nodes) == 1,
    )
