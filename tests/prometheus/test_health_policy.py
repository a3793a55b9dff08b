"""gpustack health's policy queries on a real Prometheus, reached through the fake API server's service
proxy as in a cluster: replayed exporters with a fatal XID hidden behind an application XID, a row-remap
failure with a withdrawn GPU, growing remapped rows pending a reset (alert only), an exporter without XID
counts whose last-XID gauge shows 48, and a GPU node without an exporter; then a quarantine through the
circuit breaker."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpustack.console import Console
from gpustack.constants import MONITORING_NAMESPACE, PROMETHEUS_PORT, PROMETHEUS_SERVICE, QUARANTINE_LABEL
from gpustack.health.collect import collect
from gpustack.health.policy import Settings, evaluate
from gpustack.health.runner import HealthOptions, run_health
from gpustack.runners.kube import Kube
from gpustack.runners.kubeconfig import kube_from_file
from tests.fakes.kube_api import FakeKubeAPI
from tests.unit.diag.conftest import gpu_node

from .harness import Stack, running_stack, wait_for
from .releases import Release
from .replay_exporter import NodeSpec, gpu_uuid


@pytest.fixture(scope="module")
def policy_stack(tmp_path_factory: pytest.TempPathFactory, prometheus_release: Release) -> Iterator[Stack]:
    specs = [
        NodeSpec("node-a", pods={}, scenario="xid48_app13"),
        NodeSpec("node-b", pods={}, scenario="row_remap_failure", unhealthy_gpus=1),
        NodeSpec("node-c", pods={}, scenario="remap_growth"),
        NodeSpec("node-e", pods={}, scenario="xid48", counters_without=("DCGM_EXP_XID_ERRORS_COUNT",)),
    ]
    with running_stack(tmp_path_factory.mktemp("prometheus-health"), specs, release=prometheus_release) as running:
        running.wait_until_scraped(samples=3)
        yield running


@pytest.fixture
def cluster(policy_stack: Stack, tmp_path: Path) -> Iterator[tuple[FakeKubeAPI, Kube]]:
    with FakeKubeAPI.running() as api:
        api.seed([gpu_node("node-a"), gpu_node("node-b", allocatable=7), gpu_node("node-c"), gpu_node("node-d"),
                  gpu_node("node-e")])  # fmt: skip
        api.proxy_upstreams[(MONITORING_NAMESPACE, PROMETHEUS_SERVICE, PROMETHEUS_PORT)] = policy_stack.prometheus.url
        yield api, kube_from_file(api.write_kubeconfig(tmp_path / "kc"))


def signals(kube: Kube) -> dict[str, list[tuple[str, str, str]]]:
    snap, _ = collect(kube, Settings())
    assert snap.errors == {}
    return {v.node: [(s.rule, s.gpu, s.action) for s in v.signals] for v in evaluate(snap)}


def sources(kube: Kube) -> dict[str, str]:
    snap, _ = collect(kube, Settings())
    return {v.node: v.source for v in evaluate(snap)}


def test_every_signal_from_the_real_prometheus(policy_stack: Stack, cluster: tuple[FakeKubeAPI, Kube]) -> None:
    _, kube = cluster

    # growth needs two samples of a rising counter inside the window
    def grown() -> dict[str, Any] | None:
        now = signals(kube)
        return now if len(now["node-c"]) == 2 else None

    got = wait_for("remapped-rows growth on node-c", grown, timeout=30)
    assert got["node-a"] == [("xid-13", "2", "alert"), ("xid-48", "2", "reset")]
    assert got["node-b"] == [("row-remap-failure", "1", "rma"), ("row-remap-pending", "1", "reset"),
                             ("gpu-allocatable-below-capacity", "", "reset")]  # fmt: skip
    # growth of the uncorrectable count is a recorded remap (an alert); the remap pending a reset quarantines
    # for it, as DCGM rates DCGM_FR_PENDING_ROW_REMAP (issue 29)
    assert got["node-c"] == [("row-remap-pending", "6", "reset"), ("uncorrectable-remapped-rows-growth", "6", "alert")]
    assert got["node-d"] == []
    # an exporter without DCGM_EXP_XID_ERRORS_COUNT: the last-XID gauge stands in; none at all: no XID source
    assert got["node-e"] == [("xid-last-48", "2", "reset")]
    assert sources(kube) == {"node-a": "count", "node-b": "count", "node-c": "count", "node-d": "none",
                             "node-e": "last-xid"}  # fmt: skip
    # what the policy avoids: the last-XID gauge shows the application's 13, and the XID alert stays quiet
    [last] = policy_stack.prometheus.query('DCGM_FI_DEV_XID_ERRORS{node="node-a", gpu="2"}')
    assert last["value"][1] == "13" and last["metric"]["UUID"] == gpu_uuid("node-a", 2)

    def critical() -> dict[str, str] | None:
        found = {a["labels"]["node"]: a["labels"]["action"] for a in policy_stack.prometheus.alerts()
                 if a["labels"]["alertname"] == "GPUXidCritical"}  # fmt: skip
        return found or None

    assert wait_for("GPUXidCritical", critical, timeout=30) == {
        "node-e": "reset"
    }  # the alert says what the policy says


def test_apply_quarantines_through_the_breaker(policy_stack: Stack, cluster: tuple[FakeKubeAPI, Kube]) -> None:
    api, kube = cluster
    wait_for("growth", lambda: len(signals(kube)["node-c"]) == 2, timeout=30)
    api.reset_requests()
    opts = HealthOptions(settings=Settings(max_nodes=2, max_percent=100), apply=True, by="test")
    findings = run_health(kube, opts, Console(stream=io.StringIO()))
    status = {f.host: f.status for f in findings if f.id == "Q01-gpu-health"}
    # node-c (a pending remap: reset) is the third candidate under a limit of 2: held
    assert status == {"node-a": "warn", "node-b": "warn", "node-c": "fail", "node-d": "skip", "node-e": "fail"}
    missing = {f.host: f.status for f in findings if f.id == "Q00-signal-sources" and f.host}
    assert missing == {"node-d": "fail", "node-e": "warn"}
    for name, quarantined in (
        ("node-a", True),
        ("node-b", True),
        ("node-c", False),
        ("node-d", False),
        ("node-e", False),
    ):
        node = api.get("v1", "Node", name)
        assert ((node["metadata"].get("labels") or {}).get(QUARANTINE_LABEL) == "true") is quarantined
        assert bool(node["spec"].get("unschedulable")) is quarantined
    reasons = json.loads(api.get("v1", "Node", "node-b")["metadata"]["annotations"]["gpustack.io/quarantine-reason"])
    assert {r["rule"] for r in reasons} == {"row-remap-failure", "row-remap-pending", "gpu-allocatable-below-capacity"}
    assert api.get("v1", "Node", "node-b")["metadata"]["labels"]["gpustack.io/quarantine-action"] == "rma"
    assert api.get("v1", "Node", "node-a")["metadata"]["labels"]["gpustack.io/quarantine-action"] == "reset"
    proxied = [p for m, p, _ in api.requests if "/proxy/api/v1/query" in p]
    assert len(proxied) == 9  # the policy's fixed set of queries (time() included), whatever the node count
