"""What `up` prints about reaching the monitoring stack: port-forwards by default, NodePorts when asked."""

from __future__ import annotations

from gpustack.cluster.layer import access_lines
from gpustack.config.model import Config

NODES = [{"name": "cp1", "address": "192.0.2.10", "role": "control-plane"}]


def test_nothing_exposed_by_default_port_forwards_printed() -> None:
    lines = access_lines(Config.model_validate({"nodes": NODES}))
    assert lines == [
        "Prometheus:   kubectl -n monitoring port-forward svc/kube-prometheus-stack-prometheus 9090   "
        "(then http://localhost:9090)",
        "Grafana:      kubectl -n monitoring port-forward svc/kube-prometheus-stack-grafana 3000:80   "
        "(then http://localhost:3000 (user admin; password: gpustack grafana-password))",
        "Alertmanager: kubectl -n monitoring port-forward svc/kube-prometheus-stack-alertmanager 9093   "
        "(then http://localhost:9093)",
    ]


def test_grafana_exposed_when_asked_and_who_reaches_it() -> None:
    cfg = Config.model_validate(
        {"nodes": NODES, "monitoring": {"grafana_nodeport": 30300}, "firewall": {"admin_cidrs": ["203.0.113.0/24"]}}
    )
    lines = access_lines(cfg)
    assert lines[1] == "Grafana:      http://192.0.2.10:30300  (user admin; password: gpustack grafana-password)"
    assert lines[0].startswith("Prometheus:   kubectl -n monitoring port-forward")
    assert lines[-1] == "NodePorts answer the cluster's nodes and firewall.admin_cidrs only (203.0.113.0/24)"
    alone = access_lines(Config.model_validate({"nodes": NODES, "monitoring": {"grafana_nodeport": 30300}}))
    assert alone[-1] == "NodePorts answer the cluster's nodes and firewall.admin_cidrs only (none set)"
