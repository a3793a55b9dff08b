"""Pure monitoring checks on hand-built snapshots: ServiceMonitor matching and selection, node-exporter
port conflicts, exporter endpoints, and missing sources."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack.checks.model import Finding
from gpustack.diagnose import registry
from gpustack.diagnose.checks_monitoring import selector_matches
from gpustack.diagnose.snapshot import Snapshot
from gpustack.render.manifests import EXPORTER_TARGETS

Obj = dict[str, Any]
STANDALONE = EXPORTER_TARGETS["standalone"]


def service(labels: dict[str, str] | None = None, ns: str = "gpu-operator", port: str = "metrics") -> Obj:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "dcgm-exporter", "namespace": ns, "labels": labels or dict(STANDALONE.labels)},
            "spec": {"selector": dict(STANDALONE.labels), "ports": [{"name": port, "port": 9400}]}}  # fmt: skip


def endpoints(ready: int, ns: str = "gpu-operator") -> Obj:
    return {"kind": "Endpoints", "metadata": {"name": "dcgm-exporter", "namespace": ns},
            "subsets": [{"addresses": [{"ip": f"10.244.0.{i}"} for i in range(ready)],
                         "notReadyAddresses": [{"ip": "10.244.1.9"}]}]}  # fmt: skip


def service_monitor(labels: dict[str, str] | None = None, match_ns: str = "gpu-operator",
                    selector: dict[str, str] | None = None, port: str = "metrics") -> Obj:  # fmt: skip
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": "dcgm-exporter", "namespace": "monitoring",
                         "labels": {"release": "kube-prometheus-stack"} if labels is None else labels},
            "spec": {"namespaceSelector": {"matchNames": [match_ns]},
                     "selector": {"matchLabels": dict(STANDALONE.labels) if selector is None else selector},
                     "endpoints": [{"port": port, "path": "/metrics"}]}}  # fmt: skip


def prometheus(selector: Obj | None = None, ns_selector: Obj | None = None) -> Obj:
    spec: Obj = {"serviceMonitorSelector": {} if selector is None else selector,
                 "serviceMonitorNamespaceSelector": {} if ns_selector is None else ns_selector}  # fmt: skip
    return {"kind": "Prometheus", "metadata": {"name": "kube-prometheus-stack-prometheus", "namespace": "monitoring"},
            "spec": spec}  # fmt: skip


def snap(**kinds: list[Obj]) -> Snapshot:
    base: dict[str, list[Obj]] = {
        "Service": [service()], "Endpoints": [endpoints(2)], "ServiceMonitor": [service_monitor()],
        "Prometheus": [prometheus()], "Pod": [],
    }  # fmt: skip
    base.update(kinds)
    return Snapshot(kube=copy.deepcopy(base))


def check(s: Snapshot, prefix: str) -> list[Finding]:
    """Run one check by id prefix (M02 and M04 live in checks_gpu_metrics.py)."""
    specs = [spec for spec in registry.load_all().values() if spec.id.startswith(prefix + "-")]
    return registry.run(specs, s)


def test_selector_semantics() -> None:
    assert selector_matches({}, {"a": "b"})
    assert not selector_matches(None, {"a": "b"})
    assert selector_matches({"matchExpressions": [{"key": "a", "operator": "In", "values": ["b", "c"]}]}, {"a": "c"})
    assert not selector_matches({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "c"})
    assert not selector_matches({"matchLabels": {"release": "x"}}, {})


def test_healthy_objects_pass() -> None:
    s = snap()
    for prefix in ("M01", "M06", "M07", "M09"):
        assert [f.status for f in check(s, prefix)] == ["pass"], prefix


def test_exporter_without_ready_endpoints_fails() -> None:
    [f] = check(snap(Endpoints=[endpoints(0)]), "M01")
    assert f.status == "fail" and "notReady=1" in f.evidence
    assert "app.kubernetes.io/name=dcgm-exporter" in f.fix
    [f] = check(snap(Service=[]), "M01")
    assert f.status == "fail" and "no dcgm-exporter Service" in f.summary


def test_servicemonitor_missing() -> None:
    [f] = check(snap(ServiceMonitor=[]), "M06")
    assert f.status == "fail" and "no ServiceMonitor selects gpu-operator/dcgm-exporter" in f.summary
    assert "gpustack up --only cluster" in f.fix


def test_servicemonitor_label_mismatch() -> None:
    [f] = check(snap(ServiceMonitor=[service_monitor(selector={"app": "nvidia-dcgm-exporter"})]), "M06")
    assert f.status == "fail" and "selector" in f.evidence and "nvidia-dcgm-exporter" in f.evidence


def test_servicemonitor_namespace_mismatch() -> None:
    [f] = check(snap(ServiceMonitor=[service_monitor(match_ns="monitoring")]), "M06")
    assert f.status == "fail" and "namespaceSelector" in f.evidence and "gpu-operator" in f.evidence


def test_servicemonitor_port_name_mismatch() -> None:
    [f] = check(snap(ServiceMonitor=[service_monitor(port="gpu-metrics")]), "M06")
    assert f.status == "fail" and "gpu-metrics" in f.evidence and "metrics" in f.evidence


def test_release_label_trap_not_selected() -> None:
    """NilUsesHelmValues=true: Prometheus only selects `release: kube-prometheus-stack`; the monitor lacks it."""
    s = snap(ServiceMonitor=[service_monitor(labels={"app": "dcgm"})],
             Prometheus=[prometheus(selector={"matchLabels": {"release": "kube-prometheus-stack"}})])  # fmt: skip
    [f] = check(s, "M07")
    assert f.status == "fail" and "not selected" in f.summary
    assert "kubectl -n monitoring label servicemonitor dcgm-exporter release=kube-prometheus-stack" in f.fix
    assert "NilUsesHelmValues=false" in f.fix


def test_nil_selectors() -> None:
    s = snap(Prometheus=[{"kind": "Prometheus", "metadata": {"name": "p", "namespace": "other"}, "spec": {}}])
    [f] = check(s, "M07")
    assert f.status == "fail" and "selects nothing" in f.evidence


def test_namespace_selector_excludes() -> None:
    s = snap(Prometheus=[prometheus(ns_selector={"matchLabels": {"team": "ml"}})],
             Namespace=[{"kind": "Namespace", "metadata": {"name": "monitoring", "labels": {}}}])  # fmt: skip
    [f] = check(s, "M07")
    assert f.status == "fail" and "serviceMonitorNamespaceSelector" in f.evidence


def node_exporter_pod(status: Obj, name: str = "kube-prometheus-stack-prometheus-node-exporter-x7k2p") -> Obj:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "monitoring",
                                        "labels": {"app.kubernetes.io/name": "prometheus-node-exporter"}},
            "spec": {"nodeName": "gpu-1"}, "status": status}  # fmt: skip


def test_node_exporter_bind_conflict() -> None:
    pod = node_exporter_pod({"phase": "Running", "containerStatuses": [{"state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"reason": "Error", "message": 'listen tcp 0.0.0.0:9100: bind: address already in use'}}}]})  # fmt: skip
    [f] = check(snap(Pod=[pod]), "M09")
    assert f.status == "fail" and f.host == "gpu-1" and "address already in use" in f.evidence
    assert "9101" in f.fix and "gpustack up --only cluster" in f.fix


def test_node_exporter_pending_no_free_ports() -> None:
    pod = node_exporter_pod({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
        "reason": "Unschedulable", "message": "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."}]})  # fmt: skip
    [f] = check(snap(Pod=[pod]), "M09")
    assert f.status == "fail" and "free ports" in f.evidence


def test_node_exporter_conflict_from_events_and_logs() -> None:
    pod = node_exporter_pod({"phase": "Running"})
    s = snap(Pod=[pod])
    s.pod_logs["monitoring/kube-prometheus-stack-prometheus-node-exporter-x7k2p/node-exporter"] = (
        'ts=... level=error msg="listen tcp :9100: bind: address already in use"'
    )
    assert check(s, "M09")[0].status == "fail"


def test_missing_kube_data_skips() -> None:
    s = Snapshot(errors={"kubernetes": "connection refused"})
    for prefix in ("M01", "M06", "M07", "M09"):
        [f] = check(s, prefix)
        assert f.status == "skip" and "connection refused" in f.summary


def test_prometheus_missing_skips_and_m03_fails() -> None:
    s = Snapshot(errors={"prometheus": "Prometheus unreachable via x: refused"})
    assert check(s, "M03")[0].status == "fail"
    assert {check(s, p)[0].status for p in ("M04", "M05", "M08")} == {"skip"}
    assert check(s, "M02")[0].status == "skip"


def test_gpu_count_mismatch_per_node() -> None:
    s = Snapshot()
    s.prometheus.reachable = True
    s.prometheus.queries = {
        "gpu_util_by_node": [{"metric": {"node": "a"}, "value": [0, "8"]}, {"metric": {"node": "b"}, "value": [0, "7"]}],
        "gpu_allocatable": [{"metric": {"node": "a"}, "value": [0, "8"]}, {"metric": {"node": "b"}, "value": [0, "8"]},
                            {"metric": {"node": "cpu"}, "value": [0, "0"]}],
    }  # fmt: skip
    [f] = check(s, "M04")
    assert f.status == "fail" and f.host == "b" and "7 of 8" in f.summary


def test_gpu_count_skips_shared_nodes() -> None:
    """Allocatable counts MIG instances and time-sliced replicas there, DCGM physical GPUs (or none under MIG)."""
    s = Snapshot(kube={"Node": [{"metadata": {"name": "ts", "labels": {"nvidia.com/gpu.sharing-strategy": "time-slicing"}}},
                                {"metadata": {"name": "mig", "labels": {"nvidia.com/mig.config": "all-1g.10gb"}}},
                                {"metadata": {"name": "b", "labels": {"nvidia.com/gpu.sharing-strategy": "none"}}}]})  # fmt: skip
    s.prometheus.reachable = True
    s.prometheus.queries = {
        "gpu_util_by_node": [{"metric": {"node": "ts"}, "value": [0, "2"]}, {"metric": {"node": "b"}, "value": [0, "7"]}],
        # under MIG no GPU_UTIL: the instances' engine activity (dcgm-exporter#430; test_mig_metrics.py)
        "gr_engine_by_node": [{"metric": {"node": "mig"}, "value": [0, "7"]}],
        "gpu_allocatable": [{"metric": {"node": "ts"}, "value": [0, "8"]}, {"metric": {"node": "mig"}, "value": [0, "7"]},
                            {"metric": {"node": "b"}, "value": [0, "8"]}],
    }  # fmt: skip
    [f] = check(s, "M04")
    assert f.status == "fail" and f.host == "b" and "7 of 8" in f.summary


def test_malformed_objects_never_crash() -> None:
    s = Snapshot(kube={"Service": [{"metadata": None}, {}], "Endpoints": [{}], "ServiceMonitor": [{"spec": {}}],
                       "Prometheus": [{}], "Pod": [{"status": {"containerStatuses": [None]}}]})  # fmt: skip
    for prefix in ("M01", "M06", "M07", "M09"):
        for f in check(s, prefix):
            assert "could not evaluate" not in f.summary, (prefix, f)


# --- M03 from PromQL over up{} (no target list), and the body cap ------------------------------------------


def targets_snapshot(up: int, down: list[dict[str, str]], version: str = "3.14.0", details: list[Obj] | None = None,
                     errors: dict[str, str] | None = None) -> Snapshot:  # fmt: skip
    s = Snapshot()
    s.prometheus.reachable, s.prometheus.version = True, version
    s.prometheus.queries = {
        "exporter_targets": [{"metric": {"job": "dcgm-exporter"}, "value": [0, str(up)]}] if up else [],
        "exporter_down": [{"metric": {"job": "dcgm-exporter", **m}, "value": [0, "0"]} for m in down],
    }
    s.prometheus.targets = list(details or [])
    s.prometheus.query_errors = dict(errors or {})
    return s


def test_m03_healthy_from_the_up_series_alone() -> None:
    assert [f.status for f in check(targets_snapshot(1000, []), "M03")] == ["pass"]


def test_m03_no_exporter_target() -> None:
    [f] = check(targets_snapshot(0, []), "M03")
    assert f.status == "fail" and "no dcgm-exporter target" in f.summary and 'up{job=~".*dcgm.*"}' in f.evidence


def test_m03_down_target_with_its_scrape_error() -> None:
    node = {"node": "gpu-node-7", "instance": "10.244.7.3:9400", "pod": "dcgm-exporter-x", "namespace": "gpu-operator"}
    detail = {"scrapeUrl": "http://10.244.7.3:9400/metrics", "health": "down", "scrapePool": "serviceMonitor/m/d/0",
              "lastError": "context deadline exceeded", "labels": dict(node)}  # fmt: skip
    [f] = check(targets_snapshot(1000, [node], details=[detail]), "M03")
    assert (f.status, f.host) == ("fail", "gpu-node-7")
    assert "lastError=context deadline exceeded" in f.evidence and "dcgm-exporter-x" in f.fix
    [old] = check(targets_snapshot(1000, [node], version="2.41.0"), "M03")  # no scrapePool filter: up's labels only
    assert old.host == "gpu-node-7" and "needs 2.42 or newer" in old.evidence


def test_an_answer_over_the_cap_is_a_finding_naming_the_cap() -> None:
    from gpustack.runners.http import DEFAULT_LIMIT, BodyTooLarge, Response

    with pytest.raises(BodyTooLarge) as exc:
        Response(200, b'{"status":"success","data":{"result":[', truncated=True, limit=DEFAULT_LIMIT).json()
    capped = f"query 'up == 0': {exc.value}"
    assert "cap of 4 MiB" in capped
    [f] = check(targets_snapshot(1000, [], errors={"exporter_down": capped}), "M03")
    assert f.status == "fail" and "4 MiB" in f.evidence and "could not be reached" not in f.summary
    assert "port-forward" in f.fix
    s = targets_snapshot(1000, [], errors={"gpu_util_by_node": capped})
    [m04] = check(s, "M04")
    assert m04.status == "fail" and "4 MiB" in m04.evidence
