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

    def xid(self, node: str, gpu: int, code: int, count: float = 1.0) -> None:
        self.prom.add("DCGM_EXP_XID_ERRORS_COUNT", {"node": node, "gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}",
                                                    "xid": str(code)}, count)  # fmt: skip

    def allocatable(self, node: str, gpus: float) -> None:
        self.prom.add("kube_node_status_allocatable", {"node": node}, gpus)


@pytest.fixture
def hc(tmp_path: Path) -> Iterator[HealthCluster]:
    prom = FakePrometheus().start()
    try:
        with FakeKubeAPI.running() as api:
            api.seed([gpu_node(f"gpu-node-{i}") for i in range(1, 6)])
            api.proxy_upstreams[(MONITORING_NAMESPACE, PROMETHEUS_SERVICE, PROMETHEUS_PORT)] = prom.url
            kc = api.write_kubeconfig(tmp_path / "kubeconfig")
            hcl = HealthCluster(api, prom, kube_from_file(kc), kc)
            for i in range(1, 6):
                hcl.allocatable(f"gpu-node-{i}", 8)
            yield hcl
    finally:
        prom.stop()
