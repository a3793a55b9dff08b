"""Snapshot JSON: the exporter scrape, the Grafana datasource probes and the panel errors have their own
fields, and a snapshot saved by an older gpustack (that data hidden inside ``prometheus.queries`` and the
Grafana API objects) loads into them and analyses the same."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gpustack.checks.model import Finding
from gpustack.diagnose import registry
from gpustack.diagnose.snapshot import Snapshot

Obj = dict[str, Any]
DS = {"uid": "prometheus", "name": "Prometheus", "type": "prometheus", "isDefault": True,
      "url": "http://kube-prometheus-stack-prometheus.monitoring:9090/"}  # fmt: skip
LOKI = {"name": "Loki", "type": "loki"}  # no uid: keyed by name
DASH = {"uid": "gpustack-dcgm", "title": "NVIDIA DCGM Exporter (gpustack)", "tags": ["gpu"]}
UTIL = [{"metric": {"node": "a"}, "value": [0, "8"]}]


def scrape(gpu_util_series: int) -> Obj:
    return {"endpoint": "http://10.0.0.1:9400", "status": 200, "bytes": 4096, "truncated": False,
            "gpu_util_series": gpu_util_series, "dcgm_metrics": ["DCGM_FI_DEV_FB_USED"], "error": ""}  # fmt: skip


def probe(ok: bool) -> Obj:
    if ok:
        return {"ok": True, "error": "", "series": 1}
    return {"ok": False, "error": "dial tcp: i/o timeout", "series": 0}


def snapshots(healthy: bool) -> tuple[Obj, Obj]:
    """The same collected data as JSON saved by the previous version and by this one."""
    exporter = scrape(8 if healthy else 0)
    panel_errors = {} if healthy else {"Engine Activity": "bad_data: parse error"}
    panels = {"GPU Utilization": 16, "XID Errors (last XID per GPU)": 0}
    if not healthy:
        panels["Engine Activity"] = -1
    base: Obj = {
        "prometheus": {"reachable": True, "targets": [], "rule_groups": [],
                       "queries": {"gpu_util_by_node": UTIL, "gpu_allocatable": UTIL}, "query_errors": {}},
        "grafana": {"reachable": True, "health": {"database": "ok"}, "datasources": [dict(LOKI), dict(DS)],
                    "dashboards": [dict(DASH)], "panel_results": panels},
    }  # fmt: skip
    old, new = copy.deepcopy(base), copy.deepcopy(base)
    old["prometheus"]["queries"]["exporter:/metrics"] = [exporter]
    old["grafana"]["datasources"][0]["_probe"] = probe(True)
    old["grafana"]["datasources"][1]["_probe"] = probe(healthy)
    old["grafana"]["dashboards"][0]["_panel_errors"] = panel_errors
    new["prometheus"]["exporter_scrape"] = exporter
    new["grafana"]["datasource_probes"] = {"Loki": probe(True), "prometheus": probe(healthy)}
    new["grafana"]["panel_errors"] = {"gpustack-dcgm": panel_errors}
    return old, new


def findings(snap: Snapshot) -> list[Finding]:
    specs = {s.id: s for cmd in ("doctor", "verify") for s in registry.select(cmd, layers=("monitoring", "grafana"))}
    return registry.run(sorted(specs.values(), key=lambda s: s.id), snap)


def by_prefix(found: list[Finding]) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for f in found:
        out.setdefault(f.id.split("-", 1)[0], []).append(f)
    return out


@pytest.mark.parametrize("healthy", [True, False])
def test_old_layout_loads_into_the_dedicated_fields(healthy: bool) -> None:
    old, new = snapshots(healthy)
    saved = json.loads(json.dumps(old))
    snap = Snapshot.from_json(saved)

    assert saved == old, "from_json does not change the data it is given"
    assert snap.to_json() == Snapshot.from_json(new).to_json()
    assert snap.prometheus.exporter_scrape == scrape(8 if healthy else 0)
    assert "exporter:/metrics" not in snap.prometheus.queries
    assert snap.grafana.datasources == [LOKI, DS] and snap.grafana.dashboards == [DASH], "API objects unannotated"
    assert snap.grafana.datasource_probes == {"Loki": probe(True), "prometheus": probe(healthy)}
    assert snap.grafana.probe(DS) == probe(healthy)


@pytest.mark.parametrize("healthy", [True, False])
def test_old_layout_analyses_the_same(healthy: bool) -> None:
    old, new = snapshots(healthy)
    from_old, from_new = findings(Snapshot.from_json(old)), findings(Snapshot.from_json(new))

    assert from_old == from_new
    result = by_prefix(from_old)
    for check in ("M02", "R02", "R04"):
        assert {f.status for f in result[check]} == ({"pass"} if healthy else {"fail"}), result[check]
    if not healthy:
        assert "no DCGM_FI_DEV_GPU_UTIL" in result["M02"][0].summary
        assert "i/o timeout" in result["R02"][0].evidence
        assert "Engine Activity: bad_data: parse error" in result["R04"][0].evidence


def test_new_layout_round_trips() -> None:
    _, new = snapshots(False)
    snap = Snapshot.from_json(new)
    assert Snapshot.from_json(json.loads(json.dumps(snap.to_json()))) == snap


def test_exporter_scrape_absent_or_empty() -> None:
    old, _ = snapshots(True)
    old["prometheus"]["queries"]["exporter:/metrics"] = []
    snap = Snapshot.from_json(old)
    assert snap.prometheus.exporter_scrape is None and "exporter:/metrics" not in snap.prometheus.queries
    assert by_prefix(findings(snap))["M02"][0].status == "skip"
    assert by_prefix(findings(Snapshot()))["M02"][0].status == "skip"


# --- what a check needs (registry `needs=`, Snapshot.missing) --------------------------------------


def test_missing_names_the_first_gap() -> None:
    from gpustack.diagnose.snapshot import GrafanaData, PrometheusData

    snap = Snapshot(kube={"Pod": []}, errors={"kubernetes:Node": "LIST Node: HTTP 403 Forbidden"},
                    prometheus=PrometheusData(reachable=True), grafana=GrafanaData(reachable=False))  # fmt: skip
    assert snap.missing(()) is None
    assert snap.missing(("Pod", "prometheus")) is None
    assert snap.missing(("Pod", "Node")) == ("could not read Node objects", "LIST Node: HTTP 403 Forbidden")
    assert snap.missing(("Service",)) == ("Service objects were not collected", "")
    assert snap.missing(("grafana",)) == ("Grafana data unavailable: not queried", "")
    down = Snapshot(kube={"Pod": []}, errors={"kubernetes": "unreachable", "prometheus": "connection refused"})
    assert down.missing(("Pod",)) == ("Kubernetes API not readable: unreachable (see K00-api-unreachable)", "")
    assert down.missing(("prometheus",)) == ("Prometheus data unavailable: connection refused", "")


def test_a_check_without_its_data_is_skipped_and_not_called() -> None:
    from gpustack.diagnose import registry

    calls: list[Snapshot] = []
    spec = registry.CheckSpec("Z01-test", "monitoring", "t", "r", ("doctor",), lambda s: calls.append(s) or [],
                              needs=("prometheus", "ServiceMonitor"))  # fmt: skip
    [f] = registry.run([spec], Snapshot(errors={"prometheus": "connection refused"}))
    assert (f.id, f.layer, f.status, f.summary) == ("Z01-test", "monitoring", "skip",
                                                    "Prometheus data unavailable: connection refused")  # fmt: skip
    assert not calls
    from gpustack.diagnose.snapshot import PrometheusData

    [f] = registry.run([spec], Snapshot(kube={"ServiceMonitor": []}, prometheus=PrometheusData(reachable=True)))
    assert f.status == "pass" and len(calls) == 1


def test_every_needed_kind_is_collected() -> None:
    """A check cannot need a kind the kubernetes source never lists (it would always skip)."""
    from gpustack.diagnose import registry
    from gpustack.diagnose.snapshot import KUBE_KINDS, NAMESPACED_KINDS

    kinds = {k for _, k in KUBE_KINDS} | {k for _, k, _ in NAMESPACED_KINDS} | {"prometheus", "grafana"}
    needs = {n for spec in registry.load_all().values() for n in spec.needs}
    assert needs and needs <= kinds, needs - kinds
