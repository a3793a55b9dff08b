"""verify/doctor's monitoring and Grafana checks against a REAL Prometheus scraping replayed
dcgm-exporters (2 nodes x 8 GPUs), and a fake Grafana whose panel queries run on that Prometheus."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.diagnose import checks_grafana, checks_monitoring, registry
from gpustack.diagnose.collect import CollectContext
from gpustack.diagnose.collect_grafana import collect_grafana
from gpustack.diagnose.collect_prometheus import QUERIES, collect_prometheus
from gpustack.diagnose.snapshot import Snapshot
from gpustack.monitoring.counters import CounterFile, load_counters
from gpustack.monitoring.dashboard import load_capacity_dashboard, load_dashboard
from tests.fakes.grafana_api import FakeGrafana

from .harness import PrometheusServer, Stack, wait_for, write_prometheus_config
from .releases import Release
from .replay_exporter import default_nodes
from .replay_server import DcgmReplay, KsmReplay

PROM_CHECKS = ("M02", "M03", "M04", "M05", "M08")
GRAFANA_CHECKS = ("R01", "R02", "R03", "R04")


def ctx(stack: Stack, **extra: object) -> CollectContext:
    node = next(iter(stack.exporters))
    return CollectContext(
        cfg=Config(), command="verify", kubeconfig=None, timeout=60, workload=False,
        extra={"prometheus_url": stack.prometheus.url, "exporter_url": f"http://{stack.exporters[node].address}",
               **extra},
    )  # fmt: skip


def collect(context: CollectContext, sources: list[str]) -> Snapshot:
    """Run these sources the way collect() does (errors recorded, never raised)."""
    snap = Snapshot()
    fns = {"prometheus": collect_prometheus, "grafana": collect_grafana}
    for name in sources:
        try:
            fns[name](context, snap)
        except Exception as exc:
            snap.errors[name] = f"{type(exc).__name__}: {exc}"
    return snap


def run(snap: Snapshot, prefixes: tuple[str, ...]) -> dict[str, list[Finding]]:
    """Run this layer's checks by id prefix (independent of other modules' registrations)."""
    assert checks_monitoring.BOTH and checks_grafana.BOTH
    registry.load_all()  # M02/M04 live in checks_gpu_metrics.py
    specs = [s for s in registry.REGISTRY.values() if s.id.split("-", 1)[0] in prefixes and "verify" in s.commands]
    findings = registry.run(sorted(specs, key=lambda s: s.id), snap)
    out: dict[str, list[Finding]] = {}
    for f in findings:
        out.setdefault(f.id.split("-", 1)[0], []).append(f)
    return out


def statuses(by_id: dict[str, list[Finding]]) -> dict[str, set[str]]:
    return {k: {f.status for f in v} for k, v in by_id.items()}


def test_healthy_stack_passes_every_monitoring_check(stack: Stack) -> None:
    snap = collect(ctx(stack), ["prometheus"])
    assert "prometheus" not in snap.errors
    assert set(snap.prometheus.queries) == set(QUERIES), "queries holds instant vectors only"
    assert snap.prometheus.exporter_scrape and snap.prometheus.exporter_scrape["gpu_util_series"] > 0
    result = run(snap, PROM_CHECKS)
    assert statuses(result) == {k: {"pass"} for k in PROM_CHECKS}, result


def test_unreachable_prometheus_is_a_finding_not_a_crash(stack: Stack) -> None:
    context = ctx(stack, prometheus_url="http://127.0.0.1:9", exporter_url="http://127.0.0.1:9")
    snap = collect(context, ["prometheus"])
    assert "prometheus" in snap.errors
    result = run(snap, PROM_CHECKS)
    assert result["M03"][0].status == "fail" and "127.0.0.1:9" in result["M03"][0].evidence
    assert result["M02"][0].status == "fail"
    assert {f.status for k in ("M04", "M05", "M08") for f in result[k]} == {"skip"}


def test_missing_gpu_fails_per_node_count(scenario_stack: Stack) -> None:
    scenario_stack.set_scenario("node-b", "gpu_missing")
    try:

        def seven() -> Snapshot | None:
            snap = collect(ctx(scenario_stack), ["prometheus"])
            return snap if any(f.status == "fail" for f in run(snap, ("M04",))["M04"]) else None

        snap = wait_for("node-b reporting 7 GPUs", seven, timeout=30)
    finally:
        scenario_stack.set_scenario("node-b", "healthy")
    [finding] = run(snap, ("M04",))["M04"]
    assert finding.host == "node-b"
    assert "7 of 8" in finding.summary and finding.fix


def test_exporter_down_reports_target_down_with_last_error(scenario_stack: Stack) -> None:
    """Runs last in this module: it stops node-b's exporter for good."""
    scenario_stack.exporters["node-b"].stop()

    def down() -> Snapshot | None:
        # a scrape in flight when the exporter stopped ends "connection reset by peer" (seen in CI under load); the
        # next one, "connection refused", is the steady state the evidence is checked on
        snap = collect(ctx(scenario_stack), ["prometheus"])
        failing = [f for f in run(snap, ("M03",))["M03"] if f.status == "fail"]
        return snap if failing and "connection refused" in failing[0].evidence.lower() else None

    snap = wait_for("node-b target down, refusing connections", down, timeout=60)
    [finding] = run(snap, ("M03",))["M03"]
    assert finding.host == "node-b"
    assert "lastError=" in finding.evidence and "connection refused" in finding.evidence.lower()
    assert "(none)" not in finding.evidence
    assert [t["labels"]["node"] for t in snap.prometheus.targets] == ["node-b"], "only the down target's details"


def without_profiling(counters: CounterFile) -> CounterFile:
    return CounterFile(tuple(c for c in counters.counters if not c.name.startswith("DCGM_FI_PROF_")))


@pytest.fixture(scope="module")
def no_prof_stack(tmp_path_factory: pytest.TempPathFactory, prometheus_release: Release) -> Iterator[Stack]:
    """Like the harness stack, but the exporters serve no DCGM_FI_PROF_* (consumer GPU / no SYS_ADMIN)."""
    workdir: Path = tmp_path_factory.mktemp("prometheus-noprof")
    specs = default_nodes()
    counters = without_profiling(load_counters())
    exporters = {s.node: DcgmReplay(s, counters) for s in specs}
    ksm = KsmReplay(specs)
    for replay in [*exporters.values(), ksm]:
        replay.start()
    server = PrometheusServer(config=write_prometheus_config(workdir / "prometheus.yml", exporters, ksm),
                              data_dir=workdir / "tsdb", log=workdir / "prometheus.log", release=prometheus_release)  # fmt: skip
    try:
        running = Stack(server.start(), exporters, ksm)
        running.wait_until_scraped(samples=2)
        yield running
    finally:
        server.stop()
        for replay in [*exporters.values(), ksm]:
            replay.stop()


def test_profiling_metrics_absent_fails_with_fix(no_prof_stack: Stack) -> None:
    snap = collect(ctx(no_prof_stack), ["prometheus"])
    result = run(snap, ("M04", "M08"))
    assert {f.status for f in result["M04"]} == {"pass"}
    [finding] = result["M08"]
    assert finding.status == "fail"
    assert "node-a" in finding.evidence and "H100" in finding.evidence
    assert "datacenter GPU" in finding.fix and "SYS_ADMIN" in finding.fix


# --- Grafana -------------------------------------------------------------------------------------------


def test_grafana_panels_return_data_through_the_real_prometheus(stack: Stack) -> None:
    with FakeGrafana.running(stack.prometheus.url, password="pw") as grafana:
        grafana.add_dashboard(load_dashboard())
        grafana.add_dashboard(load_capacity_dashboard())
        snap = collect(ctx(stack, grafana_url=grafana.url, grafana_password="pw"), ["grafana"])
    assert "grafana" not in snap.errors
    assert snap.grafana.panel_results["GPU Utilization"] == 16
    assert snap.grafana.panel_results["XID Errors (last XID per GPU)"] == 0  # healthy: an empty problem table
    assert snap.grafana.panel_results["GPU capacity and cost: GPUs allocated"] == 1  # one stat, from the rules
    assert snap.grafana.panel_results["GPU capacity and cost: Pending pods"] == 0  # nobody waits: allowed empty
    result = run(snap, GRAFANA_CHECKS)
    assert statuses(result) == {k: {"pass"} for k in GRAFANA_CHECKS}, result


def test_grafana_dashboard_missing_fails(stack: Stack) -> None:
    with FakeGrafana.running(stack.prometheus.url, password="pw") as grafana:
        snap = collect(ctx(stack, grafana_url=grafana.url, grafana_password="pw"), ["grafana"])
    result = run(snap, GRAFANA_CHECKS)
    assert result["R03"][0].status == "fail" and "gpustack-dcgm" in result["R03"][0].summary
    assert "grafana_dashboard=1" in result["R03"][0].fix
    assert result["R04"][0].status == "skip"
    assert {f.status for f in result["R01"] + result["R02"]} == {"pass"}


def test_no_data_panels_are_named(no_prof_stack: Stack) -> None:
    with FakeGrafana.running(no_prof_stack.prometheus.url, password="pw") as grafana:
        grafana.add_dashboard(load_dashboard())
        snap = collect(ctx(no_prof_stack, grafana_url=grafana.url, grafana_password="pw"), ["grafana"])
    [finding] = run(snap, ("R04",))["R04"]
    assert finding.status == "fail"
    assert "Tensor Core Utilization" in finding.evidence and "Engine Activity" in finding.evidence
    assert "GPU Utilization;" not in finding.evidence + ";"


def test_broken_datasource_and_wrong_password(stack: Stack) -> None:
    with FakeGrafana.running("http://127.0.0.1:9", password="pw") as grafana:
        grafana.add_dashboard(load_dashboard())
        snap = collect(ctx(stack, grafana_url=grafana.url, grafana_password="pw"), ["grafana"])
        bad = collect(ctx(stack, grafana_url=grafana.url, grafana_password="nope"), ["grafana"])
    result = run(snap, GRAFANA_CHECKS)
    assert result["R02"][0].status == "fail" and "127.0.0.1:9" in result["R02"][0].evidence
    assert result["R04"][0].status == "fail"
    bad_result = run(bad, (*GRAFANA_CHECKS, "R05"))
    assert bad_result["R01"][0].status == "pass", "Grafana is healthy; the password is R05's finding"
    assert bad_result["R05"][0].status == "fail" and "401" in bad_result["R05"][0].evidence
    assert {f.status for k in ("R02", "R03", "R04") for f in bad_result[k]} == {"skip"}


def test_through_the_api_server_service_proxy(stack: Stack, tmp_path: Path) -> None:
    """The production path: Prometheus and the exporter reached via /api/v1/.../services/{name}:{port}/proxy."""
    from gpustack.runners.kubeconfig import kube_from_file
    from tests.fakes.kube_api import FakeKubeAPI

    with FakeKubeAPI.running() as api:
        api.proxy_upstreams[("monitoring", "kube-prometheus-stack-prometheus", "http-web")] = stack.prometheus.url
        node = next(iter(stack.exporters))
        api.proxy_upstreams[("gpu-operator", "dcgm-exporter", "metrics")] = f"http://{stack.exporters[node].address}"
        kube = kube_from_file(api.write_kubeconfig(tmp_path / "kubeconfig"), request_timeout=5)
        context = CollectContext(cfg=Config(), command="doctor", kubeconfig=None, timeout=60, extra={"kube": kube})
        snap = collect(context, ["prometheus"])
        proxied = [p for _, p, _ in api.requests if "/proxy/" in p]
    assert "prometheus" not in snap.errors, snap.errors
    prom = "/services/kube-prometheus-stack-prometheus:http-web/proxy/api/v1/"
    assert any(prom + "status/buildinfo" in p for p in proxied) and any(prom + "query?" in p for p in proxied)
    assert not any(prom + "targets" in p for p in proxied), "a healthy cluster's target list is never fetched"
    assert any("/services/dcgm-exporter:metrics/proxy/metrics" in p for p in proxied)
    result = run(snap, PROM_CHECKS)
    assert statuses(result) == {k: {"pass"} for k in PROM_CHECKS}, result
