"""A cluster for the health tests: the fake API server with GPU nodes and, behind its service proxy where
kube-prometheus-stack's Prometheus answers, a Prometheus API serving recorded series."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpustack.constants import MONITORING_NAMESPACE, PROMETHEUS_PORT, PROMETHEUS_SERVICE
from gpustack.runners.kube import Kube
from gpustack.runners.kubeconfig import kube_from_file
from tests.fakes.kube_api import FakeKubeAPI
from tests.fakes.prometheus_api import FakePrometheus
from tests.unit.diag.conftest import gpu_node

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def booted(node: dict, boot_id: str = "boot-1") -> dict:
    """A Node as the kubelet reports it: ``status.nodeInfo.bootID`` (a reboot changes it)."""
    status = node.setdefault("status", {})
    status["nodeInfo"] = {**(status.get("nodeInfo") or {}), "bootID": boot_id}
    return node


@dataclass
class HealthCluster:
    api: FakeKubeAPI
    prom: FakePrometheus
    kube: Kube
    kubeconfig: Path

    def node(self, name: str) -> dict:
        obj = self.api.get("v1", "Node", name)
        assert obj is not None
        return obj

    def at(self, t: float) -> None:
        """Set the API server's clock (the Date header the breaker keeps time by) and Prometheus' alike."""
        self.api.clock = lambda: t
        self.prom.now = t

    def xid(self, node: str, gpu: int, code: int, count: float = 1.0) -> None:
        self.prom.add("DCGM_EXP_XID_ERRORS_COUNT", {"node": node, "gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}",
                                                    "xid": str(code), "window_size_in_ms": "300000"}, count)  # fmt: skip

    def last_xid(self, node: str, gpu: int, code: int) -> None:
        """The last-XID gauge of one GPU (DCGM_FI_DEV_XID_ERRORS, label err_code) shows ``code``."""
        rows = self.prom.series.setdefault("DCGM_FI_DEV_XID_ERRORS", [])
        rows[:] = [(lbl, v) for lbl, v in rows if (lbl["node"], lbl["gpu"]) != (node, str(gpu))]
        rows.append(({"node": node, "gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}", "err_code": str(code)}, code))

    def exporter(self, node: str, *, counts: bool = True, gpus: int = 2) -> None:
        """dcgm-exporter's series on a healthy node: the last-XID gauge at 0 per GPU and, when its counters
        list enables it, one zero XID-count series per GPU (no ``xid`` label), as dcgm-exporter 4.x prints them."""
        for gpu in range(gpus):
            labels = {"node": node, "gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}"}
            self.prom.add("DCGM_FI_DEV_XID_ERRORS", {**labels, "err_code": "0"}, 0)
            if counts:
                self.prom.add("DCGM_EXP_XID_ERRORS_COUNT", {**labels, "window_size_in_ms": "300000"}, 0)

    def drop_exporter(self, node: str) -> None:
        for metric in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT"):
            rows = self.prom.series.get(metric, [])
            rows[:] = [(lbl, v) for lbl, v in rows if lbl.get("node") != node]

    def allocatable(self, node: str, gpus: float) -> None:
        self.prom.add("kube_node_status_allocatable", {"node": node}, gpus)


@pytest.fixture
def hc(tmp_path: Path) -> Iterator[HealthCluster]:
    prom = FakePrometheus().start()
    try:
        with FakeKubeAPI.running() as api:
            api.seed([booted(gpu_node(f"gpu-node-{i}")) for i in range(1, 6)])
            api.clock = lambda: NOW
            api.proxy_upstreams[(MONITORING_NAMESPACE, PROMETHEUS_SERVICE, PROMETHEUS_PORT)] = prom.url
            kc = api.write_kubeconfig(tmp_path / "kubeconfig")
            hcl = HealthCluster(api, prom, kube_from_file(kc), kc)
            for i in range(1, 6):
                hcl.allocatable(f"gpu-node-{i}", 8)
                hcl.exporter(f"gpu-node-{i}")
            yield hcl
    finally:
        prom.stop()
