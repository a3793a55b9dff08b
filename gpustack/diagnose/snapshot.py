"""Everything verify/doctor look at, collected once. Plain JSON-able data so a snapshot can be
saved, replayed in tests and put in a support bundle.

A source that could not be read is recorded in ``errors`` (source -> message) instead of raising:
checks turn it into a finding.
"""

from __future__ import annotations

from collections.abc import Iterable
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
    ("certificates.k8s.io/v1", "CertificateSigningRequest"),
)
#: Kinds collected in one namespace only (one paginated LIST each): the GPU Operator's ConfigMaps -- the MIG
#: configurations its MIG manager wrote per node (``<node>-mig-config``), the static ``default-mig-parted-config``
#: and gpustack's device-plugin ConfigMap (GPU sharing checks, gpustack/diagnose/checks_sharing.py).
NAMESPACED_KINDS: tuple[tuple[str, str, str], ...] = (("v1", "ConfigMap", "gpu-operator"),)


#: Where snapshots saved before ``exporter_scrape`` / ``datasource_probes`` / ``panel_errors`` existed kept
#: that data; :meth:`Snapshot.from_json` moves it into the dedicated fields.
LEGACY_EXPORTER_QUERY = "exporter:/metrics"  # pseudo-query in ``prometheus.queries``: ``[scrape record]``
LEGACY_PROBE_KEY = "_probe"  # injected into a ``grafana.datasources`` entry
LEGACY_PANEL_ERRORS_KEY = "_panel_errors"  # injected into a ``grafana.dashboards`` search hit


@dataclass
class PrometheusData:
    reachable: bool = False
    version: str = ""  # /api/v1/status/buildinfo version ("" when unknown)
    #: /api/v1/targets activeTargets of the dcgm scrape pools that are not up (snapshots before 2026-11: every
    #: active target)
    targets: list[Obj] = field(default_factory=list)
    rule_groups: list[Obj] = field(default_factory=list)  # /api/v1/rules groups
    queries: dict[str, list[Obj]] = field(default_factory=dict)  # name -> instant vector result
    query_errors: dict[str, str] = field(default_factory=dict)  # query name (or "rules") -> error
    #: the dcgm-exporter ``/metrics`` scrape (:func:`~gpustack.diagnose.collect_prometheus.scrape_exporter`:
    #: endpoint, status, bytes, truncated, gpu_util_series, dcgm_metrics, error); None = not fetched
    exporter_scrape: Obj | None = None


def datasource_key(ds: Obj) -> str:
    """The key of a Grafana datasource in :attr:`GrafanaData.datasource_probes`: its uid, else its name."""
    return str(ds.get("uid") or ds.get("name") or "")


@dataclass
class GrafanaData:
    reachable: bool = False
    health: Obj = field(default_factory=dict)  # /api/health
    datasources: list[Obj] = field(default_factory=list)  # /api/datasources entries, as returned (fields checks read)
    dashboards: list[Obj] = field(default_factory=list)  # /api/search hits, as returned (fields checks read)
    panel_results: dict[str, int] = field(default_factory=dict)  # panel title -> series returned (-1 = error)
    #: :func:`datasource_key` -> ``{"ok", "error", "series"}`` of a test query (``vector(1)``) run through
    #: that datasource (only the Prometheus datasource panels use is probed)
    datasource_probes: dict[str, Obj] = field(default_factory=dict)
    #: dashboard uid -> panel title (or ``"(dashboard)"`` when the model could not be read) -> query error
    panel_errors: dict[str, dict[str, str]] = field(default_factory=dict)
    #: how gpustack logged in (never the password): ``state`` ("ok", "refused", "not-set", "secret-missing",
    #: "secret-forbidden", ...), ``user``, ``source`` (where the credentials came from), ``detail``, and
    #: ``deployment``/``secret``/``file`` naming what was read; empty when Grafana was not reached
    login: Obj = field(default_factory=dict)

    def probe(self, ds: Obj) -> Obj:
        """The probe result of datasource ``ds`` (``{}`` when it was not probed)."""
        return self.datasource_probes.get(datasource_key(ds)) or {}


@dataclass
class Snapshot:
    """One look at the cluster. ``kube[kind]`` is the item list of that kind (all namespaces; the kinds of
    :data:`NAMESPACED_KINDS` from their one namespace)."""

    cluster: str = "gpustack"
    #: the cluster looked at (:meth:`gpustack.runners.kubeconfig.KubeTarget.to_json`: server, context, where the
    #: kubeconfig came from); empty when no kubeconfig was found or only the hosts were collected
    target: Obj = field(default_factory=dict)
    kube: dict[str, list[Obj]] = field(default_factory=dict)
    events: list[Obj] = field(default_factory=list)  # only for objects that are failing
    pod_logs: dict[str, str] = field(default_factory=dict)  # "ns/pod/container" -> tail (failing pods)
    prometheus: PrometheusData = field(default_factory=PrometheusData)
    grafana: GrafanaData = field(default_factory=GrafanaData)
    hosts: dict[str, Obj] = field(default_factory=dict)  # node name -> gpustack_facts output
    workload: Obj = field(default_factory=dict)  # verify's CUDA pod / load test results
    errors: dict[str, str] = field(default_factory=dict)  # source -> why it could not be read
    requests: int = 0  # API requests made while collecting (benchmarks)
    #: when collection started (ISO 8601 UTC): what time-bound checks (certificate expiry) judge against
    collected_at: str = ""
    #: the settings checks judge with (``certificates``: ``warn_days``, ``fail_days``), from gpustack.yaml
    settings: Obj = field(default_factory=dict)

    def items(self, kind: str) -> list[Obj]:
        return self.kube.get(kind, [])

    def missing(self, needs: Iterable[str]) -> tuple[str, str] | None:
        """Why data a check needs was not collected, as (summary, evidence), or None when all was.

        ``needs``: ``"prometheus"``, ``"grafana"`` or Kubernetes kinds (``"Pod"``, ``"Node"`` ...)."""
        for need in needs:
            if need == "prometheus":
                if not self.prometheus.reachable:
                    return (
                        f"Prometheus data unavailable: {self.errors.get('prometheus', 'Prometheus was not queried')}",
                        "",
                    )
            elif need == "grafana":
                if "grafana:login" in self.errors:
                    return "Grafana's API not read: no login (see R05-grafana-login)", self.errors["grafana:login"]
                if not self.grafana.reachable or "grafana" in self.errors:
                    return f"Grafana data unavailable: {self.errors.get('grafana', 'not queried')}", ""
            elif "kubernetes" in self.errors:
                return f"Kubernetes API not readable: {self.errors['kubernetes']} (see K00-api-unreachable)", ""
            elif f"kubernetes:{need}" in self.errors:
                return f"could not read {need} objects", self.errors[f"kubernetes:{need}"]
            elif need not in self.kube:
                return f"{need} objects were not collected", ""
        return None

    def to_json(self) -> Obj:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Obj) -> Snapshot:
        """A snapshot from :meth:`to_json` output, also one saved by an older gpustack (see the ``LEGACY_*`` keys)."""
        data = dict(data)
        data["prometheus"] = PrometheusData(**_migrate_prometheus(dict(data.get("prometheus", {}))))
        data["grafana"] = GrafanaData(**_migrate_grafana(dict(data.get("grafana", {}))))
        return cls(**data)


def _migrate_prometheus(prom: Obj) -> Obj:
    """Old layout: the exporter scrape as ``queries["exporter:/metrics"] = [record]``."""
    queries = prom.get("queries")
    if isinstance(queries, dict) and LEGACY_EXPORTER_QUERY in queries:
        queries = dict(queries)
        records = queries.pop(LEGACY_EXPORTER_QUERY)
        prom["queries"] = queries
        if prom.get("exporter_scrape") is None and records:
            prom["exporter_scrape"] = records[0] if isinstance(records, list) else records
    return prom


def _migrate_grafana(graf: Obj) -> Obj:
    """Old layout: ``_probe`` inside a datasource entry, ``_panel_errors`` inside a dashboard search hit."""
    probes: dict[str, Obj] = dict(graf.get("datasource_probes") or {})
    panel_errors: dict[str, dict[str, str]] = dict(graf.get("panel_errors") or {})
    migrated = False
    if isinstance(graf.get("datasources"), list):
        datasources = []
        for ds in graf["datasources"]:
            if isinstance(ds, dict) and LEGACY_PROBE_KEY in ds:
                ds = dict(ds)
                probes.setdefault(datasource_key(ds), ds.pop(LEGACY_PROBE_KEY))
                migrated = True
            datasources.append(ds)
        graf["datasources"] = datasources
    if isinstance(graf.get("dashboards"), list):
        dashboards = []
        for hit in graf["dashboards"]:
            if isinstance(hit, dict) and LEGACY_PANEL_ERRORS_KEY in hit:
                hit = dict(hit)
                panel_errors.setdefault(str(hit.get("uid") or ""), hit.pop(LEGACY_PANEL_ERRORS_KEY))
                migrated = True
            dashboards.append(hit)
        graf["dashboards"] = dashboards
    if migrated:
        graf["datasource_probes"], graf["panel_errors"] = probes, panel_errors
    return graf
