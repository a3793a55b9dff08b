"""gpustack health against the fake API server: dry run, quarantine (cordon + taint + who/why/when), the
circuit breaker stopping the N+1th quarantine (also between two evaluators racing), foreign cordons,
release refused until a passing diag and accepted after it, and the CronJob's least-privilege RBAC."""

from __future__ import annotations

import json
import threading

import pytest

from gpustack.config.model import Config
from gpustack.config.monitoring import Remediation
from gpustack.console import Console
from gpustack.constants import (
    ANN_CORDONED_BY_GPUSTACK,
    ANN_QUARANTINE_REASON,
    ANN_QUARANTINED_AT,
    ANN_QUARANTINED_BY,
    ANN_RELEASED_AT,
    BREAKER_CONFIGMAP,
    QUARANTINE_LABEL,
    SYSTEM_NAMESPACE,
)
from gpustack.diag.job import DiagSpec
from gpustack.diag.runner import DiagOptions, run_diag
from gpustack.errors import GpustackError
from gpustack.health.breaker import MARGIN
from gpustack.health.manifests import health_manifests, rbac_rules
from gpustack.health.policy import Settings
from gpustack.health.runner import HealthOptions, release_node, run_health
from gpustack.runners.kube import Kube
from gpustack.runners.kubeconfig import kube_from_file
from tests.fakes.kube_api import JobSimulator, RbacAuthorizer
from tests.unit.diag.conftest import VirtualClock, plan

from .conftest import NOW, HealthCluster, booted

TAINT = {"key": "gpustack.io/gpu-health", "value": "fatal", "effect": "NoSchedule"}


def quiet() -> Console:
    return Console(color=False, stream=open("/dev/null", "w"))


def health(
    hc: HealthCluster, *, apply: bool = False, max_nodes: int = 2, kube: Kube | None = None, now: float = NOW
) -> list:
    """One evaluation at ``now``, on the evaluator's clock and the API server's alike."""
    hc.at(now)
    opts = HealthOptions(settings=Settings(max_nodes=max_nodes, max_percent=100), apply=apply, by="ops@host")
    return run_health(kube or hc.kube, opts, quiet(), now=now)


def node_finding(findings: list, node: str):  # type: ignore[no-untyped-def]
    return next(f for f in findings if f.id == "Q01-gpu-health" and f.host == node)


def ledger(hc: HealthCluster) -> list[dict]:
    cm = hc.api.get("v1", "ConfigMap", BREAKER_CONFIGMAP, SYSTEM_NAMESPACE)
    return json.loads(cm["data"]["ledger.json"])["entries"] if cm else []


def test_healthy_cluster_changes_nothing(hc: HealthCluster) -> None:
    findings = health(hc, apply=True)
    assert {f.status for f in findings} == {"pass"}
    # no node is touched; the run records its limit in the breaker's ledger (every --apply run does)
    writes = hc.api.mutating_requests()
    assert writes and all("/configmaps" in path or "/nodes" not in path for _, path, _ in writes)
    assert [(x["window"], x["limit"]) for x in json.loads(hc.api.get("v1", "ConfigMap", BREAKER_CONFIGMAP,
            SYSTEM_NAMESPACE)["data"]["ledger.json"])["limits"]] == [(3600, 2)]  # fmt: skip
    hc.api.reset_requests()
    health(hc, apply=True, now=NOW + 20)  # renewed only once half its window has passed
    assert hc.api.mutating_requests() == []


def test_dry_run_says_what_it_would_do_and_changes_nothing(hc: HealthCluster) -> None:
    hc.xid("gpu-node-2", 3, 79)
    findings = health(hc)
    f = node_finding(findings, "gpu-node-2")
    assert f.status == "fail" and f.summary.startswith("needs a node reboot: would quarantine (cordon, taint "
                                                       "gpustack.io/gpu-health=fatal:NoSchedule, label reboot)")  # fmt: skip
    assert "xid-79 on GPU 3 (GPU-gpu-node-2-3): XID 79 (GPU has fallen off the bus) x1" in f.summary
    assert hc.api.mutating_requests() == []


def test_fatal_signal_cordons_and_taints_with_who_why_when(hc: HealthCluster) -> None:
    hc.xid("gpu-node-2", 3, 79)
    findings = health(hc, apply=True)
    f = node_finding(findings, "gpu-node-2")
    assert f.status == "warn" and f.summary.startswith(
        "quarantined now, needs a node reboot (cordoned, tainted gpustack.io/gpu-health=fatal:NoSchedule, labelled reboot)"
    )
    assert "release needs the node rebooted since the quarantine" in f.fix
    node = hc.node("gpu-node-2")
    assert node["spec"]["unschedulable"] is True and TAINT in node["spec"]["taints"]
    meta = node["metadata"]
    assert meta["labels"][QUARANTINE_LABEL] == "true" and meta["labels"]["gpustack.io/quarantine-action"] == "reboot"
    assert meta["annotations"][ANN_QUARANTINED_BY] == "ops@host"
    assert meta["annotations"][ANN_QUARANTINED_AT] == "2027-01-15T08:00:00Z"
    assert json.loads(meta["annotations"][ANN_QUARANTINE_REASON])[0]["rule"] == "xid-79"
    assert [e["node"] for e in ledger(hc)] == ["gpu-node-2"]
    # every other node untouched; one PATCH for the node (atomic)
    assert [p for m, p, _ in hc.api.mutating_requests() if "/nodes/" in p] == [
        "/api/v1/nodes/gpu-node-2?fieldManager=gpustack-health"
    ]
    # the next run sees it quarantined and does nothing more
    hc.api.reset_requests()
    again = node_finding(health(hc, apply=True), "gpu-node-2")
    assert again.status == "warn" and again.summary.startswith("quarantined for `reboot` since 2027-01-15T08:00:00Z "
                                                               "by ops@host (xid-79 GPU 3)")  # fmt: skip
    assert hc.api.mutating_requests() == []


def test_the_breaker_stops_the_n_plus_first_quarantine(hc: HealthCluster) -> None:
    for n in (1, 2, 3):
        hc.xid(f"gpu-node-{n}", 0, 48)
    findings = health(hc, apply=True, max_nodes=2)
    assert [node_finding(findings, f"gpu-node-{n}").status for n in (1, 2, 3)] == ["warn", "warn", "fail"]
    held = node_finding(findings, "gpu-node-3")
    assert held.summary.startswith("needs a GPU reset, not quarantined: the circuit breaker is holding (2 per 60 min")
    assert QUARANTINE_LABEL not in (hc.node("gpu-node-3")["metadata"].get("labels") or {})
    assert not hc.node("gpu-node-3")["spec"].get("unschedulable")
    assert next(f for f in findings if f.id == "Q02-circuit-breaker").summary == (
        "2 of 2 quarantine(s) per 60 min used; held: gpu-node-3 (2 per 60 min (this run), all used)"
    )
    # still held on the next run within the window, let through once the window (and its margin) has passed
    assert node_finding(health(hc, apply=True, now=NOW + 600), "gpu-node-3").status == "fail"
    assert node_finding(health(hc, apply=True, now=NOW + 3600 + MARGIN + 1), "gpu-node-3").status == "warn"


def test_two_evaluators_racing_spend_the_budget_once(hc: HealthCluster) -> None:
    hc.xid("gpu-node-1", 0, 79)
    hc.xid("gpu-node-4", 0, 79)
    # both read the (absent) ledger before either writes it
    hc.api.delay(rf"configmaps/{BREAKER_CONFIGMAP}$", 0.4, times=2, method="GET")
    results: list[list] = []

    def evaluator() -> None:
        results.append(health(hc, apply=True, max_nodes=1, kube=kube_from_file(hc.kubeconfig)))

    threads = [threading.Thread(target=evaluator) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(results) == 2  # both evaluators finished (a crash in a thread would leave one out)
    quarantined = [
        n for n in ("gpu-node-1", "gpu-node-4") if (hc.node(n)["metadata"].get("labels") or {}).get(QUARANTINE_LABEL)
    ]
    assert len(quarantined) == 1 and len(ledger(hc)) == 1
    conflicts = [p for m, p, _ in hc.api.requests if m in ("POST", "PATCH") and "configmaps" in p]
    assert len(conflicts) >= 2  # the loser's write was refused (409) and it decided again


def test_a_concurrent_node_change_is_retried_not_overwritten(hc: HealthCluster) -> None:
    hc.xid("gpu-node-1", 0, 74)
    hc.api.seed(
        [{**hc.node("gpu-node-1"), "spec": {"taints": [{"key": "team", "value": "a", "effect": "NoSchedule"}]}}]
    )
    # someone adds a taint between the evaluation's read and its patch: the 409 makes it re-read
    hc.api.fail(r"/api/v1/nodes/gpu-node-1\?fieldManager", 409, times=1, method="PATCH")
    health(hc, apply=True)
    taints = hc.node("gpu-node-1")["spec"]["taints"]
    assert {"key": "team", "value": "a", "effect": "NoSchedule"} in taints and TAINT in taints


def test_a_failed_patch_leaves_the_node_as_it_was(hc: HealthCluster) -> None:
    hc.xid("gpu-node-1", 0, 120)
    before = hc.node("gpu-node-1")
    hc.api.fail(r"/api/v1/nodes/gpu-node-1\?", 500, method="PATCH")
    f = node_finding(health(hc, apply=True), "gpu-node-1")
    assert f.status == "fail" and "the node is unchanged" in f.summary
    after = hc.node("gpu-node-1")
    assert after["spec"] == before["spec"] and after["metadata"].get("labels") == before["metadata"].get("labels")


def test_prometheus_unreachable_is_a_failure_not_a_clean_bill(hc: HealthCluster) -> None:
    hc.api.proxy_upstreams.clear()
    findings = health(hc, apply=True)
    q0 = next(f for f in findings if f.id == "Q00-signal-sources")
    assert q0.status == "fail" and "not evaluated" in q0.summary


def test_allocatable_below_capacity_from_the_api_and_prometheus(hc: HealthCluster) -> None:
    hc.api.seed(
        [
            {
                **hc.node("gpu-node-5"),
                "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "7"}},
            }
        ]
    )
    assert node_finding(health(hc), "gpu-node-5").status == "pass"  # 8 allocatable within the hold window: not yet
    hc.prom.series["kube_node_status_allocatable"] = [
        ({"node": f"gpu-node-{i}"}, 7 if i == 5 else 8) for i in range(1, 6)
    ]
    f = node_finding(health(hc), "gpu-node-5")
    assert f.status == "fail" and "gpu-allocatable-below-capacity on node: allocatable 7 < capacity 8" in f.summary


def test_never_uncordon_a_foreign_cordon(hc: HealthCluster) -> None:
    # cordoned by someone else, then a fatal signal: gpustack adds its taint, records the cordon as foreign
    hc.api.seed([{**hc.node("gpu-node-3"), "spec": {"unschedulable": True}}])
    hc.xid("gpu-node-3", 1, 95)
    health(hc, apply=True, now=1.0)
    node = hc.node("gpu-node-3")
    assert node["metadata"]["annotations"][ANN_CORDONED_BY_GPUSTACK] == "false"
    diag_pass(hc, "gpu-node-3")
    hc.prom.series.clear()
    release_node(hc.kube, "gpu-node-3", HealthOptions(by="ops"), quiet(), confirm=lambda q: True)
    node = hc.node("gpu-node-3")
    assert node["spec"]["unschedulable"] is True and TAINT not in (node["spec"].get("taints") or [])
    # a node gpustack never quarantined: refused, whatever its cordon
    hc.api.seed([{**hc.node("gpu-node-4"), "spec": {"unschedulable": True}}])
    with pytest.raises(GpustackError, match="not quarantined by gpustack"):
        release_node(hc.kube, "gpu-node-4", HealthOptions(), quiet(), confirm=lambda q: True)
    assert hc.node("gpu-node-4")["spec"]["unschedulable"] is True


def diag_pass(hc: HealthCluster, node: str, log: str = "diag-r2-pass.log", level: int = 2) -> None:
    """Run the real `gpustack diag` on the node (Job simulated), which records its verdict on the node."""
    clock = VirtualClock()
    hc.api.on_create.clear()  # one simulated controller at a time
    hc.api.before_request.clear()
    JobSimulator(hc.api, {node: plan(log, phase="Succeeded" if "pass" in log else "Failed")}, clock=clock).install()
    run_diag(
        hc.kube,
        DiagOptions(spec=DiagSpec(level=level), nodes=(node,)),
        quiet(),
        by="ops",
        clock=clock,
        sleep=clock.sleep,
    )


def test_release_only_after_a_passing_level2_diag(hc: HealthCluster) -> None:
    hc.xid("gpu-node-2", 5, 48)
    health(hc, apply=True, now=1.0)  # quarantined at 1970-01-01T00:00:01Z: every real diag is later
    hc.prom.series["DCGM_EXP_XID_ERRORS_COUNT"] = []
    opts = HealthOptions(by="ops@host")
    with pytest.raises(GpustackError, match="no gpustack diag result"):
        release_node(hc.kube, "gpu-node-2", opts, quiet(), confirm=lambda q: True)
    diag_pass(hc, "gpu-node-2", "diag-r3-memory-fail-gpu5.log", level=3)
    with pytest.raises(GpustackError, match="the last diag on gpu-node-2 failed"):
        release_node(hc.kube, "gpu-node-2", opts, quiet(), confirm=lambda q: True)
    diag_pass(hc, "gpu-node-2", level=1)
    with pytest.raises(GpustackError, match="needs level 2"):
        release_node(hc.kube, "gpu-node-2", opts, quiet(), confirm=lambda q: True)
    diag_pass(hc, "gpu-node-2")
    with pytest.raises(GpustackError, match="not confirmed"):
        release_node(hc.kube, "gpu-node-2", opts, quiet(), confirm=lambda q: False)
    assert hc.node("gpu-node-2")["metadata"]["labels"][QUARANTINE_LABEL] == "true"
    done = release_node(hc.kube, "gpu-node-2", opts, quiet(), confirm=lambda q: True)
    assert "uncordon it (gpustack cordoned it)" in done
    node = hc.node("gpu-node-2")
    assert not node["spec"].get("unschedulable") and TAINT not in (node["spec"].get("taints") or [])
    assert QUARANTINE_LABEL not in (node["metadata"].get("labels") or {})
    assert (
        ANN_RELEASED_AT in node["metadata"]["annotations"] and ANN_QUARANTINED_AT not in node["metadata"]["annotations"]
    )


def test_release_refused_while_a_state_signal_holds(hc: HealthCluster) -> None:
    hc.prom.add("DCGM_FI_DEV_ROW_REMAP_FAILURE", {"node": "gpu-node-1", "gpu": "2", "UUID": "u2"}, 1)
    health(hc, apply=True, now=1.0)
    diag_pass(hc, "gpu-node-1")
    with pytest.raises(GpustackError, match="still active: row-remap-failure on GPU 2"):
        release_node(hc.kube, "gpu-node-1", HealthOptions(), quiet(), confirm=lambda q: True)


def test_released_node_is_not_quarantined_again_for_old_xids(hc: HealthCluster) -> None:
    hc.xid("gpu-node-1", 0, 79)
    health(hc, apply=True, now=1.0)
    diag_pass(hc, "gpu-node-1")
    with pytest.raises(GpustackError, match=r"needs `reboot` .* has not restarted since the quarantine"):
        release_node(hc.kube, "gpu-node-1", HealthOptions(), quiet(), confirm=lambda q: True)
    hc.api.seed([booted(hc.node("gpu-node-1"), "boot-2")])  # the node rebooted
    release_node(hc.kube, "gpu-node-1", HealthOptions(), quiet(), confirm=lambda q: True)
    released = hc.node("gpu-node-1")["metadata"]["annotations"][ANN_RELEASED_AT]
    from gpustack.health.actions import parse_time

    t = parse_time(released)
    assert t is not None
    hc.prom.queries.clear()
    f = node_finding(health(hc, apply=True, now=t + 60), "gpu-node-1")
    assert f.status == "pass" and "XIDs not evaluated until" in f.evidence
    # five minutes later its XIDs count again, from the release on (a query of its own, on a shorter window)
    hc.prom.queries.clear()
    f = node_finding(health(hc, apply=True, now=t + 400, max_nodes=5), "gpu-node-1")
    assert any('node="gpu-node-1"' in q and "[100s]" in q for q in hc.prom.queries)
    assert f.status == "warn"  # the (recorded) series still shows a 79 inside the new window: quarantined again


def test_the_cronjob_runs_with_least_privilege(hc: HealthCluster) -> None:
    objs = health_manifests(Config(remediation=Remediation(enabled=True, image="registry.example.com/gpustack:0.1.0")))
    cluster_rules, roles = rbac_rules(objs)
    hc.api.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}}])
    hc.api.authorizer = authz = RbacAuthorizer(cluster_rules, roles)
    hc.xid("gpu-node-2", 3, 79)
    findings = health(hc, apply=True)
    assert authz.denied == []
    assert node_finding(findings, "gpu-node-2").status == "warn" and ledger(hc)
    # and nothing beyond: it may not delete a node, read a Secret, or proxy to another Service
    for method, path in (("DELETE", "/api/v1/nodes/gpu-node-2"), ("GET", "/api/v1/namespaces/monitoring/secrets"),
                         ("GET", "/api/v1/namespaces/monitoring/services/kube-prometheus-stack-grafana:http-web/proxy/api/health")):  # fmt: skip
        with pytest.raises(Exception, match=r"Forbidden|403"):
            hc.kube.request(method, path)
