"""Grafana on doctor's production path, with data: the fake Grafana reached through the fake API server's
service proxy (session login, cookie; the proxy drops ``Authorization``), its panel queries answered by a
REAL Prometheus scraping the replayed exporters. The admin credentials are only in the cluster (the Secret
Grafana's Deployment references; no state file, none given): every Grafana check passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack.config.model import Config
from gpustack.constants import MONITORING_NAMESPACE
from gpustack.diagnose import checks_grafana, registry
from gpustack.diagnose.collect import CollectContext, collect
from gpustack.diagnose.collect_grafana import GRAFANA_PORT, GRAFANA_SERVICE
from gpustack.monitoring.dashboard import load_capacity_dashboard, load_dashboard
from tests.fakes import scenarios as sc
from tests.fakes.grafana_api import FakeGrafana
from tests.fakes.kube_api import FakeKubeAPI

from .harness import Stack


def test_grafana_checks_pass_through_the_api_server_proxy(stack: Stack, tmp_path: Path) -> None:
    state = tmp_path / "state"  # empty: this machine did not build the cluster
    with (
        FakeKubeAPI.running() as api,
        FakeGrafana.running(stack.prometheus.url, password=sc.GRAFANA_PASSWORD) as grafana,
        pytest.MonkeyPatch.context() as mp,
    ):
        mp.setenv("GPUSTACK_STATE_DIR", str(state))
        sc.healthy(1).load(api)
        grafana.add_dashboard(load_dashboard())
        grafana.add_dashboard(load_capacity_dashboard())
        api.proxy_upstreams[(MONITORING_NAMESPACE, GRAFANA_SERVICE, GRAFANA_PORT)] = grafana.url
        ctx = CollectContext(cfg=Config(), command="verify", kubeconfig=api.write_kubeconfig(tmp_path / "kc"),
                             timeout=60, layers=("grafana",))  # fmt: skip
        snap = collect(ctx, sources=["kubernetes", "grafana"])
    assert "grafana" not in snap.errors and "grafana:login" not in snap.errors, snap.errors
    assert (
        snap.grafana.login["state"] == "ok"
        and "Secret monitoring/gpustack-grafana-admin" in snap.grafana.login["source"]
    )
    assert not state.exists(), "nothing read from or written to a state directory"
    assert snap.grafana.panel_results["GPU Utilization"] == 16, "2 nodes x 8 GPUs, through Grafana"
    queries = [p for m, p in grafana.requests if m == "POST" and p == "/api/ds/query"]
    assert len(queries) == 2 + len(snap.grafana.panel_results), "the datasource and usage-rules probes, one per panel"
    assert {scheme for _, scheme, _ in grafana.auth_seen} == {""}, "no Authorization reached Grafana"
    assert checks_grafana.BOTH
    specs = sorted((s for s in registry.REGISTRY.values() if s.id[:3] in ("R01", "R02", "R03", "R04", "R05")),
                   key=lambda s: s.id)  # fmt: skip
    findings = registry.run(specs, snap)
    assert len(findings) == 5 and {f.status for f in findings} == {"pass"}, findings
