"""Prometheus judged by its own version (issue 30): doctor K10 and ``gpustack status`` read the running Prometheus'
``/api/v1/status/buildinfo`` through the API server's service proxy (the fake API server in front of the Prometheus
API double), else its ``Prometheus`` resource's ``spec.version``, never the chart: kube-prometheus-stack 88.5.3 ran
3.14.0 by its default and runs the 3.13.5 LTS with gpustack's values. A cluster still on 3.14 is past its support,
with ``gpustack upgrade --components`` (which sets 3.13.5) as the fix. The day is GPUSTACK_TODAY (2026-11-26)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpustack.checks.model import Finding
from gpustack.cluster import status
from gpustack.config import advice, lifecycle, pins, support
from gpustack.config.model import Config
from gpustack.constants import MONITORING_NAMESPACE, PROMETHEUS_PORT, PROMETHEUS_SERVICE
from gpustack.diagnose import registry
from gpustack.diagnose.checks_support import CHECK
from gpustack.diagnose.collect import CollectContext, collect
from gpustack.diagnose.snapshot import Snapshot
from gpustack.runners.kubeconfig import kube_from_file
from tests.fakes import scenarios as sc
from tests.fakes.kube_api import FakeKubeAPI
from tests.fakes.prometheus_api import FakePrometheus

KPS = pins.CHARTS["kube-prometheus-stack"].version


@pytest.fixture
def prom(fake_api: FakeKubeAPI) -> Iterator[FakePrometheus]:
    """The Prometheus API double behind the fake API server's proxy, where kube-prometheus-stack's Service is."""
    fake = FakePrometheus().start()
    fake_api.proxy_upstreams[(MONITORING_NAMESPACE, PROMETHEUS_SERVICE, PROMETHEUS_PORT)] = fake.url
    try:
        yield fake
    finally:
        fake.stop()


def cluster(fake_api: FakeKubeAPI, resource_version: str | None) -> None:
    """A healthy cluster on containerd 2.3.6 (nothing else to warn about); its Prometheus resource carries
    ``spec.version`` as kube-prometheus-stack renders it from ``prometheusSpec.image.tag`` (None: not set)."""
    s = sc.healthy(2)
    for node in s.nodes():
        node["status"]["nodeInfo"]["containerRuntimeVersion"] = "containerd://2.3.6"
    for obj in s.objects:
        if obj.get("kind") == "Prometheus" and resource_version:
            obj["spec"]["version"] = resource_version
            obj["spec"]["image"] = f"quay.io/prometheus/prometheus:{resource_version}"
    s.load(fake_api)


def doctor_k10(kubeconfig: Path) -> list[Finding]:
    """K10 on what doctor collects: the ``kubernetes`` and ``prometheus`` sources (buildinfo through the proxy)."""
    ctx = CollectContext(cfg=Config.model_validate({}), command="doctor", kubeconfig=kubeconfig, timeout=30,
                         workload=False, layers=("kubernetes", "monitoring"))  # fmt: skip
    snap: Snapshot = collect(ctx, sources=["kubernetes", "prometheus"])
    return registry.run([registry.load_all()[CHECK]], snap)


def test_a_cluster_still_on_3_14_is_past_with_upgrade_components_as_the_fix(
    fake_api: FakeKubeAPI, kubeconfig: Path, prom: FakePrometheus
) -> None:
    """Installed by a gpustack before the LTS pin: the resource and Prometheus itself say 3.14.0."""
    prom.version = "3.14.0"
    cluster(fake_api, "v3.14.0-distroless")
    (f,) = doctor_k10(kubeconfig)
    assert f.status == "warn" and f.summary.startswith("prometheus 3.14.0 (3.14) is past its end of support"), f
    assert "2026-09-28" in f.summary and f.evidence.startswith(f"on {lifecycle.BUILDINFO}; as of 2026-11-26")
    assert f.fix.startswith(f"`gpustack upgrade --components` runs Prometheus {pins.PROMETHEUS_VERSION} with "
                            f"kube-prometheus-stack {KPS} (back from a newer non-LTS minor")  # fmt: skip


def test_the_lts_gpustack_deploys_passes(fake_api: FakeKubeAPI, kubeconfig: Path, prom: FakePrometheus) -> None:
    assert prom.version == pins.PROMETHEUS_VERSION == "3.13.5"
    cluster(fake_api, pins.PROMETHEUS_IMAGE_TAG[KPS])
    (f,) = doctor_k10(kubeconfig)
    assert f.status == "pass" and f.summary.startswith("within upstream support for 90+ days"), f
    assert "prometheus 3.13" in f.summary


def test_prometheus_own_version_wins_over_its_resource(
    fake_api: FakeKubeAPI, kubeconfig: Path, prom: FakePrometheus
) -> None:
    """The resource already names the LTS (values applied), the server still answers as 3.14.0 (not rolled yet):
    what runs is judged."""
    prom.version = "3.14.0"
    cluster(fake_api, pins.PROMETHEUS_IMAGE_TAG[KPS])
    (f,) = doctor_k10(kubeconfig)
    assert f.status == "warn" and f.summary.startswith("prometheus 3.14.0 (3.14)"), f


def test_without_prometheus_the_resource_tells_and_never_the_chart(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    """No Prometheus behind the proxy: the resource's spec.version is judged; with none, Prometheus is not judged
    (the chart alone cannot tell 3.14.0 from 3.13.5)."""
    cluster(fake_api, "v3.14.0-distroless")
    (f,) = doctor_k10(kubeconfig)
    assert f.status == "warn" and f.summary.startswith("prometheus 3.14.0 (3.14) is past"), f
    assert "Prometheus resource monitoring/kube-prometheus-stack-prometheus (spec.version" in f.evidence
    cluster(fake_api, None)
    (f,) = doctor_k10(kubeconfig)
    assert f.status == "pass" and "prometheus" not in f.summary, f


def test_status_reads_buildinfo_through_the_proxy(
    fake_api: FakeKubeAPI, kubeconfig: Path, prom: FakePrometheus
) -> None:
    prom.version = "3.14.0"
    cluster(fake_api, pins.PROMETHEUS_IMAGE_TAG[KPS])
    kube = kube_from_file(kubeconfig, request_timeout=5)
    assert status.running_prometheus(kube) == ("3.14.0", lifecycle.BUILDINFO)
    _, found = status.support_warnings([], [], Config(), status.running_prometheus(kube))
    (w,) = found
    assert (w["component"], w["version"], w["status"], w["level"]) == ("prometheus", "3.14.0", "past", "warn")
    assert w["fix"].startswith("`gpustack upgrade --components` runs Prometheus 3.13.5")
    prom.version = pins.PROMETHEUS_VERSION
    assert status.support_warnings([], [], Config(), status.running_prometheus(kube))[1] == []


def test_status_falls_back_to_the_resource(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    cluster(fake_api, "v3.14.0-distroless")
    kube = kube_from_file(kubeconfig, request_timeout=5)
    version, where = status.running_prometheus(kube)
    assert version == "3.14.0" and where.startswith("Prometheus resource monitoring/kube-prometheus-stack-prometheus")


@pytest.mark.parametrize(
    ("buildinfo", "resource", "expected"),
    [
        ("3.14.0", "v3.13.5-distroless", "3.14.0"),
        ("", "v3.13.5-distroless", "3.13.5"),
        ("2.42.0+ds", "", "2.42.0"),
        ("", "", ""),
        ("not a version", "", ""),
    ],
)
def test_running_prometheus_reads_its_own_version_first(buildinfo: str, resource: str, expected: str) -> None:
    resources = [{"metadata": {"namespace": "monitoring", "name": "p"}, "spec": {"version": resource}}]
    assert lifecycle.running_prometheus(buildinfo, resources)[0] == expected


@pytest.mark.parametrize(
    ("version", "level"),
    [("3.14.0", "warn"), ("3.9.1", "warn"), ("3.13.5", None), ("3.13.2", None)],
)
def test_a_way_out_only_to_a_supported_different_prometheus(version: str, level: str | None) -> None:
    """3.14 and 3.9 are past: the LTS gpustack deploys is a way out (down from 3.14, up from 3.9); 3.13.x runs
    within its support: nothing to say."""
    on = support.today()
    found = advice.advise([lifecycle.judge("prometheus", version, on, ["Prometheus"])], on)
    assert [a.level for a in found] == ([level] if level else [])
    if level:
        assert found[0].fix.startswith(f"`gpustack upgrade --components` runs Prometheus {pins.PROMETHEUS_VERSION}")
        assert ("back from a newer non-LTS minor" in found[0].fix) == (version == "3.14.0")
