"""Everything verify/doctor look at, collected once. Plain JSON-able data so a snapshot can be
saved, replayed in tests and put in a support bundle.

A source that could not be read is recorded in ``errors`` (source -> message) instead of raising:
checks turn it into a finding.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

Obj = dict[str, Any]

#: Kubernetes kinds collected with one paginated LIST each (all namespaces).
KUBE_KINDS: tuple[tuple[str, str], ...] = (
    ("v1", "Node"),
    ("v1", "Pod"),
    ("v1", "Service"),
    ("v1", "Endpoints"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "Deployment"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("monitoring.coreos.com/v1", "Prometheus"),
    ("nvidia.com/v1", "ClusterPolicy"),
)


@dataclass
class PrometheusData:
    reachable: bool = False
    targets: list[Obj] = field(default_factory=list)  # /api/v1/targets activeTargets
    rule_groups: list[Obj] = field(default_factory=list)  # /api/v1/rules groups
    queries: dict[str, list[Obj]] = field(default_factory=dict)  # name -> instant vector result
    query_errors: dict[str, str] = field(default_factory=dict)


@dataclass
class GrafanaData:
    reachable: bool = False
    health: Obj = field(default_factory=dict)
    datasources: list[Obj] = field(default_factory=list)
    dashboards: list[Obj] = field(default_factory=list)  # /api/search results
    panel_results: dict[str, int] = field(default_factory=dict)  # panel title -> series returned


@dataclass
class Snapshot:
    """One look at the cluster. ``kube[kind]`` is the item list of that kind (all namespaces)."""

    cluster: str = "gpustack"
    kube: dict[str, list[Obj]] = field(default_factory=dict)
    events: list[Obj] = field(default_factory=list)  # only for objects that are failing
    pod_logs: dict[str, str] = field(default_factory=dict)  # "ns/pod/container" -> tail (failing pods)
    prometheus: PrometheusData = field(default_factory=PrometheusData)
    grafana: GrafanaData = field(default_factory=GrafanaData)
    hosts: dict[str, Obj] = field(default_factory=dict)  # node name -> gpustack_facts output
    workload: Obj = field(default_factory=dict)  # verify's CUDA pod / load test results
    errors: dict[str, str] = field(default_factory=dict)  # source -> why it could not be read
    requests: int = 0  # API requests made while collecting (benchmarks)

    def items(self, kind: str) -> list[Obj]:
        return self.kube.get(kind, [])

    def to_json(self) -> Obj:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Obj) -> Snapshot:
        data = dict(data)
        data["prometheus"] = PrometheusData(**data.get("prometheus", {}))
        data["grafana"] = GrafanaData(**data.get("grafana", {}))
        return cls(**data)
