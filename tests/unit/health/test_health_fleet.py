"""gpustack health on a fake cluster (fake API server + recorded series) as issue 17 asks: one signal per node
quarantines exactly the nodes NVIDIA's catalogue says, never more than the breaker allows; the breaker holds
its limit against skewed evaluator clocks, different windows, races, and an unreadable ledger."""

from __future__ import annotations

import json
import threading
import time

import pytest

from gpustack.checks.model import Finding
from gpustack.console import Console
from gpustack.constants import BREAKER_CONFIGMAP, QUARANTINE_ACTION_LABEL, QUARANTINE_LABEL, SYSTEM_NAMESPACE
from gpustack.health.policy import Settings
from gpustack.health.runner import HealthOptions, run_health
from gpustack.runners.kubeconfig import kube_from_file
from tests.unit.diag.conftest import gpu_node

from .conftest import NOW, HealthCluster, booted


def quiet() -> Console:
    return Console(color=False, stream=open("/dev/null", "w"))


def run(hc: HealthCluster, *, local: float = NOW, apply: bool = True, max_nodes: int = 2, window: int = 3600,
        kube: object = None) -> list[Finding]:  # fmt: skip
    """One evaluator whose own clock reads ``local`` (the API server's clock is whatever ``hc.at`` set)."""
    opts = HealthOptions(settings=Settings(max_nodes=max_nodes, max_percent=100, window=window), apply=apply,
                         by=f"evaluator@{local:.0f}/{window}s")  # fmt: skip
    return run_health(kube or hc.kube, opts, quiet(), now=local)  # type: ignore[arg-type]


def quarantined(hc: HealthCluster) -> dict[str, str]:
    """node -> the action it was quarantined for."""
    out = {}
    for name in (f"gpu-node-{i}" for i in range(1, 10)):
        obj = hc.api.get("v1", "Node", name)
        labels = (obj or {}).get("metadata", {}).get("labels") or {}
        if labels.get(QUARANTINE_LABEL) == "true":
            out[name] = labels.get(QUARANTINE_ACTION_LABEL, "")
    return out


def ledger_nodes(hc: HealthCluster) -> list[str]:
    cm = hc.api.get("v1", "ConfigMap", BREAKER_CONFIGMAP, SYSTEM_NAMESPACE)
    return [e["node"] for e in json.loads(cm["data"]["ledger.json"])["entries"]] if cm else []


def by_host(findings: list[Finding], check: str) -> dict[str | None, Finding]:
    return {f.host: f for f in findings if f.id == check}


def fatal_on(hc: HealthCluster, *nodes: int) -> None:
    for n in nodes:
        hc.xid(f"gpu-node-{n}", 0, 48)


def test_the_issues_skewed_evaluator_case_now_gives_the_limit(hc: HealthCluster) -> None:
    # issue 17: an evaluator 2 minutes behind neither counted nor kept the others' entries: 4 quarantines
    # against a limit of 2. Now both count on the API server's clock.
    fatal_on(hc, 1, 2, 3, 4)
    hc.at(NOW)
    run(hc, local=NOW)
    hc.at(NOW + 30)
    behind = run(hc, local=NOW + 30 - 120)
    assert sorted(quarantined(hc)) == ["gpu-node-1", "gpu-node-2"] and ledger_nodes(hc) == ["gpu-node-1", "gpu-node-2"]
    assert {h: f.status for h, f in by_host(behind, "Q01-gpu-health").items()} == {
        "gpu-node-1": "warn", "gpu-node-2": "warn", "gpu-node-3": "fail", "gpu-node-4": "fail", "gpu-node-5": "pass"}  # fmt: skip
    hc.at(NOW + 600)
    run(hc, local=NOW + 600 + 120)  # and one 2 minutes ahead
    assert len(quarantined(hc)) == 2


def test_a_short_window_run_neither_prunes_the_ledger_nor_spends_the_hourly_budget(hc: HealthCluster) -> None:
    fatal_on(hc, 1, 2, 3, 4)
    hc.at(NOW)
    run(hc)
    hc.at(NOW + 400)
    # --window 60: the hourly run's entries are outside its window (and the margin of 240 s for clock skew)
    short = run(hc, window=60, local=NOW + 400)
    assert "2 per 60 min (evaluator@" in by_host(short, "Q01-gpu-health")["gpu-node-3"].summary
    assert ledger_nodes(hc) == ["gpu-node-1", "gpu-node-2"]  # not pruned
    hc.at(NOW + 460)
    run(hc, local=NOW + 460)  # the next default run does not spend the budget again
    assert sorted(quarantined(hc)) == ["gpu-node-1", "gpu-node-2"]


@pytest.mark.parametrize("first", ["hourly", "short"])
def test_two_evaluators_with_skewed_clocks_and_different_windows_race(hc: HealthCluster, first: str) -> None:
    fatal_on(hc, 1, 2, 3, 4, 5)
    hc.at(NOW)
    # both read the (absent) ledger before either writes it; ``first`` reads (and so writes) first
    hc.api.delay(rf"configmaps/{BREAKER_CONFIGMAP}$", 0.5, times=2, method="GET")
    results: list[list[Finding]] = []
    evaluators = {"hourly": dict(local=NOW, window=3600), "short": dict(local=NOW - 120, window=60)}

    def evaluate(kw: dict) -> None:
        results.append(run(hc, kube=kube_from_file(hc.kubeconfig), **kw))

    order = [first, *(name for name in evaluators if name != first)]
    threads = [threading.Thread(target=evaluate, args=(evaluators[name],)) for name in order]
    for t in threads:
        t.start()
        time.sleep(0.15)
    for t in threads:
        t.join(timeout=30)
    assert len(results) == 2
    assert len(quarantined(hc)) == 2 and len(ledger_nodes(hc)) == 2
    writes = [p for m, p, _ in hc.api.requests if m in ("POST", "PATCH") and "configmaps" in p]
    assert len(writes) >= 2  # the loser's write was refused (409) and it decided again
    # later runs of either kind, either clock, keep within the limit while the hourly window lasts
    for t, local, window in ((NOW + 90, NOW - 30, 60), (NOW + 600, NOW + 720, 3600), (NOW + 1800, NOW + 1680, 60)):
        hc.at(t)
        run(hc, local=local, window=window)
        assert len(quarantined(hc)) == 2, (t, window)


def test_an_unreadable_ledger_holds_every_quarantine(hc: HealthCluster) -> None:
    hc.api.seed([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": BREAKER_CONFIGMAP,
                  "namespace": SYSTEM_NAMESPACE}, "data": {"ledger.json": '{"version": 2, "entries": [{"node": '}}])  # fmt: skip
    before = hc.api.get("v1", "ConfigMap", BREAKER_CONFIGMAP, SYSTEM_NAMESPACE)
    quiet_run = by_host(run(hc), "Q02-circuit-breaker")[None]  # reported before it is needed
    assert quiet_run.status == "fail" and quiet_run.evidence == "nothing to quarantine now; the next would be held"
    fatal_on(hc, 1, 3)
    for apply in (False, True):
        findings = run(hc, apply=apply)
        q02 = by_host(findings, "Q02-circuit-breaker")[None]
        assert q02.status == "fail" and "ledger is unreadable: ledger.json is not JSON" in q02.summary
        assert "kubectl -n gpustack-system get configmap gpustack-health-breaker" in q02.fix
        node = by_host(findings, "Q01-gpu-health")["gpu-node-3"]
        assert (
            node.status == "fail"
            and "circuit breaker is holding" in node.summary
            and "delete the ConfigMap" in node.fix
        )
    assert quarantined(hc) == {}
    assert hc.api.get("v1", "ConfigMap", BREAKER_CONFIGMAP, SYSTEM_NAMESPACE) == before  # never overwritten


@pytest.mark.parametrize(("max_nodes", "expected"), [
    (10, {"gpu-node-1": "reset", "gpu-node-2": "reboot", "gpu-node-3": "rma", "gpu-node-6": "reset",
          "gpu-node-7": "reset"}),
    (2, {"gpu-node-1": "reset", "gpu-node-2": "reboot"}),
])  # fmt: skip
def test_one_signal_per_node_quarantines_what_the_catalogue_says(
    hc: HealthCluster, max_nodes: int, expected: dict[str, str]
) -> None:
    hc.api.seed([booted(gpu_node(f"gpu-node-{i}")) for i in (6, 7, 8)])
    hc.api.seed([booted(gpu_node("gpu-node-4", allocatable=7))])
    hc.prom.series["kube_node_status_allocatable"] = [
        ({"node": f"gpu-node-{i}"}, 7 if i == 4 else 8) for i in range(1, 9)
    ]
    hc.xid("gpu-node-1", 0, 95)  # reset (catalogue RESET_GPU), fatal on its own
    hc.xid("gpu-node-2", 1, 79)  # reboot (RESTART_BM)
    hc.xid("gpu-node-3", 2, 64)  # rma (remap failure: a reset cannot fix it)
    hc.last_xid("gpu-node-4", 3, 94)  # alert: XID 94, and the device plugin withdrew the GPU for it
    hc.exporter("gpu-node-5")  # nothing wrong
    hc.exporter("gpu-node-6", counts=False)  # an exporter without XID counts: the last-XID gauge shows 48
    hc.last_xid("gpu-node-6", 1, 48)
    hc.exporter("gpu-node-7")  # a pending remap: reset (DCGM rates it DCGM_ERROR_RESET, issue 29)
    hc.prom.add("DCGM_FI_DEV_ROW_REMAP_PENDING", {"node": "gpu-node-7", "gpu": "0", "UUID": "GPU-gpu-node-7-0"}, 1)
    hc.prom.add(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", {"node": "gpu-node-7", "gpu": "0", "UUID": "GPU-gpu-node-7-0"}, 1
    )
    hc.drop_exporter("gpu-node-5")  # gpu-node-8: no exporter at all; gpu-node-5: its exporter went away
    hc.exporter("gpu-node-5")
    findings = run(hc, max_nodes=max_nodes)
    assert quarantined(hc) == expected
    q01 = by_host(findings, "Q01-gpu-health")
    statuses = {h: f.status for h, f in q01.items()}
    held = {n for n in ("gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-6", "gpu-node-7") if n not in expected}
    assert statuses == {**{n: "warn" for n in expected}, **{n: "fail" for n in held}, "gpu-node-4": "warn",
                        "gpu-node-5": "pass", "gpu-node-8": "skip"}  # fmt: skip
    assert "needs a GPU reset" in q01["gpu-node-1"].summary or "gpu-node-1" in held
    assert (
        "restart the device plugin" in q01["gpu-node-4"].fix
        and "after XID 94 (alert only)" in q01["gpu-node-4"].summary
    )
    assert "row-remap-pending" in q01["gpu-node-7"].summary and "needs a GPU reset" in q01["gpu-node-7"].summary
    sources = {f.host: f.status for f in findings if f.id == "Q00-signal-sources" and f.host}
    assert sources == {"gpu-node-6": "warn", "gpu-node-8": "fail"}  # missing sources are findings, per node
    assert q01["gpu-node-8"].summary.startswith("XIDs and row remapping not evaluated")
    assert len(quarantined(hc)) <= max_nodes


def test_a_deleted_or_emptied_ledger_is_restored_from_the_nodes(hc: HealthCluster) -> None:
    # issue 29: a ledger edited to no entries, or deleted, started from zero without a trace
    fatal_on(hc, 1, 2, 3, 4)
    hc.at(NOW)
    run(hc)
    assert sorted(quarantined(hc)) == ["gpu-node-1", "gpu-node-2"]
    path = f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/configmaps/{BREAKER_CONFIGMAP}"
    for step, t in ((0, NOW + 600), (1, NOW + 900)):
        if step == 0:
            hc.kube.request("DELETE", path)
        else:
            hc.kube.request("PATCH", path, body={"data": {"ledger.json": '{"version": 2, "entries": []}'}},
                            content_type="application/merge-patch+json")  # fmt: skip
        hc.at(t)
        findings = run(hc, local=t)
        assert sorted(quarantined(hc)) == ["gpu-node-1", "gpu-node-2"], step  # nothing freed
        q02 = by_host(findings, "Q02-circuit-breaker")[None]
        assert q02.status == "warn" and "the ledger lacked 2 quarantine(s) the nodes record" in q02.evidence
        data = json.loads(
            (hc.api.get("v1", "ConfigMap", BREAKER_CONFIGMAP, SYSTEM_NAMESPACE) or {})["data"]["ledger.json"]
        )
        assert [e["node"] for e in data["entries"]] == ["gpu-node-1", "gpu-node-2"]  # written back, marked
        assert all("restored from the node" in e["by"] for e in data["entries"])
        if step == 0:  # a new ledger says when and why it was started
            assert "deleted" in data["created"]["reason"] and data["created"]["at"] == t
    hc.at(NOW + 3600 + 300)
    run(hc, local=NOW + 3600 + 300)  # an hour on, the budget is back
    assert len(quarantined(hc)) == 4


def test_an_api_server_replica_with_its_clock_ahead_is_not_obeyed(hc: HealthCluster) -> None:
    # issue 29: a replica 40 min ahead freed the budget early (4 approvals in 25 min)
    fatal_on(hc, 1, 2, 3, 4)
    hc.at(NOW)
    run(hc)
    hc.at(NOW + 25 * 60 + 40 * 60)
    findings = run(hc, local=NOW + 25 * 60)
    assert sorted(quarantined(hc)) == ["gpu-node-1", "gpu-node-2"]
    q02 = by_host(findings, "Q02-circuit-breaker")[None]
    assert q02.status == "fail" and "differ by 2400 s" in q02.summary and "chronyc tracking" in q02.fix
    node = by_host(findings, "Q01-gpu-health")["gpu-node-3"]
    assert node.status == "fail" and "does not trust the API server's clock" in node.summary
    # the correct replica again: the ledger holds no time from the future, the window still counts
    hc.at(NOW + 25 * 60)
    run(hc, local=NOW + 25 * 60)
    assert len(quarantined(hc)) == 2
