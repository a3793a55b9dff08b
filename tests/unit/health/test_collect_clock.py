"""health/collect.py keeps one clock: a release (dated by the API server) is compared with Prometheus'
evaluation time, not with the evaluator's (issue 29)."""

from __future__ import annotations

from gpustack.constants import ANN_RELEASED_AT
from gpustack.diag.runner import now_rfc3339
from gpustack.health.collect import collect
from gpustack.health.policy import Settings

from .conftest import NOW, HealthCluster


def released(hc: HealthCluster, node: str, at: float) -> None:
    obj = hc.node(node)
    obj["metadata"].setdefault("annotations", {})[ANN_RELEASED_AT] = now_rfc3339(at)
    hc.api.seed([obj])


def test_a_release_is_compared_with_prometheus_time_on_the_api_servers_clock(hc: HealthCluster) -> None:
    released(hc, "gpu-node-1", NOW)
    hc.xid("gpu-node-1", 0, 79)
    # 60 s after the release by the API server's clock; Prometheus' clock is 500 s ahead of it and the
    # evaluator's 1,000 s: only one of them agrees with the release time, yet each reads "60 s ago"
    hc.api.clock = lambda: NOW + 60
    hc.prom.now = NOW + 560
    snap, _ = collect(hc.kube, Settings(), now=NOW + 1060)
    assert snap.now == NOW + 560  # Prometheus' clock: the time its windows end at
    assert "gpu-node-1" in snap.xid_paused and "released at 08:00:00" in snap.xid_paused["gpu-node-1"]
    assert not [x for x in snap.xids if x.node == "gpu-node-1"]
    # 400 s after the release on every clock: the node's XIDs count again, over the 100 s since the window
    hc.prom.queries.clear()
    hc.api.clock = lambda: NOW + 400
    hc.prom.now = NOW + 900
    snap, _ = collect(hc.kube, Settings(), now=NOW - 5000)
    assert any('node="gpu-node-1"' in q and "[100s]" in q for q in hc.prom.queries)
    assert [x.xid for x in snap.xids if x.node == "gpu-node-1"] == [79]


def test_without_a_prometheus_time_the_evaluators_clock_stands_in(hc: HealthCluster) -> None:
    released(hc, "gpu-node-2", NOW)
    hc.api.clock = lambda: NOW + 60
    hc.prom.now = float("nan")  # an answer without a usable time
    snap, _ = collect(hc.kube, Settings(), now=NOW + 60)
    assert snap.now == NOW + 60 and "gpu-node-2" in snap.xid_paused
