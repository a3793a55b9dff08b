"""gpustack health's policy queries on a real Prometheus, reached through the fake API server's service
proxy as in a cluster: replayed exporters with a fatal XID hidden behind an application XID, a row-remap
failure with a withdrawn GPU, and growing remapped rows; then a quarantine through the circuit breaker."""

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
    ]
    with running_stack(tmp_path_factory.mktemp("prometheus-health"), specs, release=prometheus_release) as running:
        running.wait_until_scraped(samples=3)
        yield running


@pytest.fixture
def cluster(policy_stack: Stack, tmp_path: Path) -> Iterator[tuple[FakeKubeAPI, Kube]]:
    with FakeKubeAPI.running() as api:
        api.seed([gpu_node("node-a"), gpu_node("node-b", allocatable=7), gpu_node("node-c"), gpu_node("node-d")])
        api.proxy_upstreams[(MONITORING_NAMESPACE, PROMETHEUS_SERVICE, PROMETHEUS_PORT)] = policy_stack.prometheus.url
        yield api, kube_from_file(api.write_kubeconfig(tmp_path / "kc"))


def signals(kube: Kube) -> dict[str, list[tuple[str, str]]]:
    snap, _ = collect(kube, Settings())
    assert snap.errors == {}
    return {v.node: [(s.rule, s.gpu) for s in v.signals] for v in evaluate(snap)}


def test_every_signal_from_the_real_prometheus(policy_stack: Stack, cluster: tuple[FakeKubeAPI, Kube]) -> None:
    _, kube = cluster

    # growth needs two samples of a rising counter inside the window
    def grown() -> dict[str, Any] | None:
        now = signals(kube)
        return now if now["node-c"] else None

    got = wait_for("remapped-rows growth on node-c", grown, timeout=30)
    assert got["node-a"] == [("xid-48", "2")]
    assert got["node-b"] == [("row-remap-failure", "1"), ("gpu-allocatable-below-capacity", "")]
    assert got["node-c"] == [("uncorrectable-remapped-rows-growth", "6")]
    assert got["node-d"] == []  # no metrics at all: nothing fatal (doctor reports missing exporters)
    # what the policy avoids: the last-XID gauge shows the application's 13, and the XID alert stays quiet
    [last] = policy_stack.prometheus.query('DCGM_FI_DEV_XID_ERRORS{node="node-a", gpu="2"}')
    assert last["value"][1] == "13" and last["metric"]["UUID"] == gpu_uuid("node-a", 2)
    assert not [a for a in policy_stack.prometheus.alerts() if a["labels"]["alertname"] == "GPUXidCritical"]


def test_apply_quarantines_through_the_breaker(policy_stack: Stack, cluster: tuple[FakeKubeAPI, Kube]) -> None:
    api, kube = cluster
    wait_for("growth", lambda: signals(kube)["node-c"], timeout=30)
    api.reset_requests()
    opts = HealthOptions(settings=Settings(max_nodes=2, max_percent=100), apply=True, by="test")
    findings = run_health(kube, opts, Console(stream=io.StringIO()))
    status = {f.host: f.status for f in findings if f.id == "Q01-gpu-health"}
    assert status == {"node-a": "warn", "node-b": "warn", "node-c": "fail", "node-d": "pass"}
    for name, quarantined in (("node-a", True), ("node-b", True), ("node-c", False), ("node-d", False)):
        node = api.get("v1", "Node", name)
        assert ((node["metadata"].get("labels") or {}).get(QUARANTINE_LABEL) == "true") is quarantined
        assert bool(node["spec"].get("unschedulable")) is quarantined
    reasons = json.loads(api.get("v1", "Node", "node-b")["metadata"]["annotations"]["gpustack.io/quarantine-reason"])
    assert {r["rule"] for r in reasons} == {"row-remap-failure", "gpu-allocatable-below-capacity"}
    proxied = [p for m, p, _ in api.requests if "/proxy/api/v1/query" in p]
    assert len(proxied) == 5  # the policy's fixed set of queries, whatever the node count
