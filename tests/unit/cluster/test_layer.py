"""The cluster-layer engine end to end with the fake helm executable and the fake API server."""

from __future__ import annotations

import io
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpustack.cluster.layer import MONITORING_CRDS, grafana_password, release_specs, run_cluster_layer
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.errors import ConfigError
from gpustack.paths import grafana_password_path
from gpustack.render.values import FactsSummary, render_values
from gpustack.runners.helm import Helm, HelmError
from gpustack.runners.kubeconfig import kube_from_file
from tests.fakes.kube_api import FakeKubeAPI

FAKE_HELM = str(Path(__file__).resolve().parents[2] / "fakes" / "helm")
CFG = Config.model_validate({"monitoring": {"prometheus_storage": {"storage_class": "local-path"}}})


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeKubeAPI, Path]]:
    with FakeKubeAPI.running() as api:
        monkeypatch.setenv("FAKE_HELM_STATE", str(tmp_path / "helm-state"))
        monkeypatch.setenv("FAKE_HELM_LOG", str(tmp_path / "helm.jsonl"))
        monkeypatch.setenv("FAKE_HELM_API", api.url)
        for var in ("FAKE_HELM_FAIL", "FAKE_HELM_DELAY"):
            monkeypatch.delenv(var, raising=False)
        yield api, api.write_kubeconfig(tmp_path / "kubeconfig")


def run(kc: Path, tmp: Path, cfg: Config = CFG, **kw: Any) -> tuple[list[Any], Helm]:
    helm = Helm(kc, executable=FAKE_HELM)
    out = run_cluster_layer(
        cfg,
        kc,
        FactsSummary(),
        Console(stream=io.StringIO()),
        helm=helm,
        kube=kube_from_file(kc),
        state_root=tmp / "state",
        **kw,
    )
    return out, helm


def test_fresh_then_converged(env: tuple[FakeKubeAPI, Path], tmp_path: Path) -> None:
    api, kc = env
    steps, helm = run(kc, tmp_path)
    assert [s.step for s in steps] == ["namespaces", "secrets", "releases", "crds", "manifests", "gpu-sharing"]
    assert {s.step: s.status for s in steps} == {
        "namespaces": "changed",
        "secrets": "changed",
        "releases": "changed",
        "crds": "unchanged",
        "manifests": "changed",
        "gpu-sharing": "unchanged",  # no node shares its GPUs
    }
    assert all(s.seconds >= 0 for s in steps)
    assert helm.call_counts()["mutating"] == 3
    assert api.get("monitoring.coreos.com/v1", "ServiceMonitor", "dcgm-exporter", "monitoring")
    assert api.get("monitoring.coreos.com/v1", "PrometheusRule", "gpustack-gpu-alerts", "monitoring")
    assert api.get("v1", "ConfigMap", "gpustack-dcgm-dashboard", "monitoring")
    for crd in MONITORING_CRDS:
        assert api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)
    secret = api.get("v1", "Secret", "gpustack-grafana-admin", "monitoring")
    assert secret is not None and set(secret["data"]) == {"admin-user", "admin-password"}

    writes = len(api.mutating_requests())
    steps2, helm2 = run(kc, tmp_path)
    assert {s.status for s in steps2} == {"unchanged"}
    assert helm2.call_counts()["mutating"] == 0
    # applies happen (SSA is the idempotent write) but change nothing: same resourceVersions
    assert api.get("v1", "Secret", "gpustack-grafana-admin", "monitoring") == secret
    assert len(api.mutating_requests()) > writes


def test_password_generated_once_0600_and_reused(tmp_path: Path) -> None:
    first = grafana_password(CFG, tmp_path)
    path = grafana_password_path(CFG.cluster.name, tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert grafana_password(CFG, tmp_path, generate=lambda: "other") == first


def test_missing_alert_secret_fails_before_any_change(env: tuple[FakeKubeAPI, Path], tmp_path: Path) -> None:
    api, kc = env
    cfg = Config.model_validate(
        {
            "monitoring": {"prometheus_storage": {"ephemeral": True}},
            "alerting": {
                "receivers": [{"type": "slack", "name": "chat", "api_url_env": "GPUSTACK_TEST_SLACK", "channel": "#g"}],
                "routes": {"critical": "chat"},
            },
        }
    )
    with pytest.raises(ConfigError, match="GPUSTACK_TEST_SLACK"):
        run(kc, tmp_path, cfg, environ={})
    assert api.mutating_requests() == []
    steps, _ = run(kc, tmp_path, cfg, environ={"GPUSTACK_TEST_SLACK": "https://hooks.slack.com/x"})
    assert api.get("v1", "Secret", "gpustack-alertmanager", "monitoring")
    assert "gpustack-alertmanager" in steps[1].detail


def test_helm_failure_surfaces_release(
    env: tuple[FakeKubeAPI, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, kc = env
    monkeypatch.setenv("FAKE_HELM_FAIL", "dcgm-exporter")
    with pytest.raises(HelmError, match="dcgm-exporter"):
        run(kc, tmp_path)


def test_release_specs_follow_pins_and_order() -> None:
    specs = release_specs(CFG, render_values(CFG, FactsSummary()))
    assert [(s.release, s.namespace, s.version) for s in specs] == [
        ("kube-prometheus-stack", "monitoring", "88.5.3"),
        ("gpu-operator", "gpu-operator", "v26.7.0"),
        ("dcgm-exporter", "gpu-operator", "4.8.2"),
    ]
    assert specs[1].repo == "https://helm.ngc.nvidia.com/nvidia" and specs[1].timeout == "15m"
    assert all(s.archive is None for s in specs)


def test_release_specs_from_a_mirror_or_a_bundle(tmp_path: Path) -> None:
    mirrored = CFG.model_copy(
        update={
            "sources": CFG.sources.model_copy(update={"chart_repos": {"gpu-operator": "https://charts.example/nv"}})
        }
    )
    specs = {s.release: s for s in release_specs(mirrored, render_values(CFG, FactsSummary()))}
    assert specs["gpu-operator"].repo == "https://charts.example/nv"
    assert specs["dcgm-exporter"].repo == "https://nvidia.github.io/dcgm-exporter/helm-charts"
    archive = tmp_path / "gpu-operator-v26.7.0.tgz"
    bundled = {s.release: s for s in release_specs(CFG, render_values(CFG, FactsSummary()), {"gpu-operator": archive})}
    assert bundled["gpu-operator"].archive == archive and bundled["kube-prometheus-stack"].archive is None


def test_gpu_sharing_configmap_before_the_releases_labels_after(env: tuple[FakeKubeAPI, Path], tmp_path: Path) -> None:
    """The device-plugin ConfigMap is applied with the namespaces (the operator mounts it: without it the device
    plugin's pods stay ContainerCreating), the node label in the last step (a converged re-run: test_sharing.py)."""
    from tests.unit.nodes_cluster import node

    api, kc = env
    api.seed([node("cp", cp=True), node("w1")])
    cfg = Config.model_validate({
        "monitoring": {"prometheus_storage": {"storage_class": "local-path"}},
        "nodes": [{"name": "cp", "address": "192.0.2.10", "role": "control-plane"},
                  {"name": "w1", "address": "192.0.2.11", "gpu_sharing": {"mode": "time-slicing", "replicas": 4}}],
    })  # fmt: skip
    steps, _ = run(kc, tmp_path, cfg)
    assert "ConfigMap/gpustack-device-plugin-config" in steps[0].detail
    assert steps[-1].step == "gpu-sharing" and steps[-1].status == "changed"
    assert "w1: device-plugin.config=time-slicing-4" in steps[-1].detail
    w1 = api.get("v1", "Node", "w1")
    assert w1 is not None and w1["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "time-slicing-4"
