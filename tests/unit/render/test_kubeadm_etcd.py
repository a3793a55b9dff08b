"""etcd's metrics address in gpustack's kubeadm configuration (gpustack.render.kubeadm.etcd_args). What the real
kubeadm makes of it (the etcd manifest's flag and probes) is tests/controlplane/test_etcd_metrics.py."""

from __future__ import annotations

from typing import Any

import yaml

from gpustack.config.model import Config
from gpustack.render.kubeadm import render_init_config

NODES = [{"name": "cp1", "address": "10.0.0.10", "role": "control-plane"}, {"name": "w1", "address": "10.0.0.11"}]


def cluster_configuration(raw: dict[str, Any]) -> dict[str, Any]:
    docs = yaml.safe_load_all(render_init_config(Config.model_validate({"nodes": NODES, **raw})))
    return next(d for d in docs if d and d["kind"] == "ClusterConfiguration")


def test_metrics_on_every_address_with_gpustacks_firewall() -> None:
    etcd = cluster_configuration({})["etcd"]
    # kubeadm v1beta4 extraArgs: a list of name/value pairs, the one flag, on kubeadm's local etcd
    assert etcd == {"local": {"extraArgs": [{"name": "listen-metrics-urls", "value": "http://0.0.0.0:2381"}]}}


def test_kubeadms_loopback_default_without_it() -> None:
    # without gpustack's chain nothing would keep strangers off 2381: kubeadm's http://127.0.0.1:2381 stays
    assert "etcd" not in cluster_configuration({"firewall": {"enabled": False}})
