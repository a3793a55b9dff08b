"""`gpustack upgrade --components` against the fake Kubernetes API and the fake helm (TEST DOUBLES):
every pinned chart's CRDs (its subcharts' too) applied before any release moves, the releases at
their pins, the ClusterPolicy checked for every key gpustack set (and a lost one reported)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from gpustack import commands
from gpustack.commands import components
from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.engine.options import RunOptions
from gpustack.engine.steps import RunResult
from gpustack.errors import StageError
from tests.fakes.kube_api import FakeKubeAPI

FAKE_HELM = Path(__file__).resolve().parents[2] / "fakes" / "helm"
NODES = [{"name": "cp", "address": "192.0.2.10", "role": "control-plane", "connection": "local"}]
OLD = {"gpu_operator": "v25.10.1", "kube_prometheus_stack": "80.1.0", "dcgm_exporter": "4.6.0"}


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    state = tmp_path / "state"
    (state / "bin").mkdir(parents=True)
    (state / "bin" / "helm").symlink_to(FAKE_HELM)
    with FakeKubeAPI.running() as fake:
        (state / "clusters" / "gpustack").mkdir(parents=True)
        fake.write_kubeconfig(state / "clusters" / "gpustack" / "admin.conf")
        monkeypatch.setenv("GPUSTACK_STATE_DIR", str(state))
        monkeypatch.setenv("FAKE_HELM_STATE", str(tmp_path / "helm-state"))
        monkeypatch.setenv("FAKE_HELM_LOG", str(tmp_path / "helm.jsonl"))
        monkeypatch.setenv("FAKE_HELM_API", fake.url)
        monkeypatch.delenv("FAKE_HELM_FAIL", raising=False)
        monkeypatch.delenv("FAKE_HELM_CLUSTERPOLICY_DROP", raising=False)
        yield fake


def run(versions: dict[str, str] | None = None) -> RunResult:
    cfg = Config.model_validate({"nodes": NODES, "versions": versions or {}})
    stages = commands.sequence("components").select(skip=["preflight"])
    opts = RunOptions(stages=stages, facts={"cp": {}})
    return components.upgrade_components(cfg, opts, Console(stream=io.StringIO(), color=False))


def helm_calls(tmp_path: Path) -> list[list[str]]:
    return [json.loads(line)["argv"] for line in (tmp_path / "helm.jsonl").read_text().splitlines()]


def crd_version(api: FakeKubeAPI, name: str) -> str:
    crd = api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
    assert crd is not None, name
    return str(crd["metadata"]["annotations"]["gpustack.test/chart-version"])


def test_crds_first_then_the_releases_at_their_pins(api: FakeKubeAPI, tmp_path: Path) -> None:
    run(OLD)
    assert crd_version(api, "clusterpolicies.nvidia.com") == OLD["gpu_operator"]
    start = len(helm_calls(tmp_path))
    api.reset_requests()

    result = run()
    calls = helm_calls(tmp_path)[start:]
    pulls = [i for i, c in enumerate(calls) if c[0] == "pull"]
    upgrades = [i for i, c in enumerate(calls) if c[0] == "upgrade"]
    assert len(pulls) == 3 and len(upgrades) == 3 and max(pulls) < min(upgrades)
    for c in calls:
        if c[0] == "pull":
            chart = c[1]
            assert c[c.index("--version") + 1] == pins.CHARTS[chart].version
    # the new charts' CRDs, the subcharts' included (NFD under gpu-operator, kube-prometheus-stack's crds chart)
    assert crd_version(api, "clusterpolicies.nvidia.com") == pins.CHARTS["gpu-operator"].version
    assert crd_version(api, "nodefeaturerules.nfd.k8s-sigs.io") == pins.CHARTS["gpu-operator"].version
    assert crd_version(api, "servicemonitors.monitoring.coreos.com") == pins.CHARTS["kube-prometheus-stack"].version
    # applied by gpustack before helm touched the ClusterPolicy
    paths = [p for m, p, _ in api.mutating_requests() if m == "PATCH"]
    crd_at = next(i for i, p in enumerate(paths) if "customresourcedefinitions/clusterpolicies.nvidia.com" in p)
    policy_at = next(i for i, p in enumerate(paths) if "/clusterpolicies/cluster-policy" in p)
    assert crd_at < policy_at
    rows = {s.stage: s for s in result.summaries}
    assert rows["check"].status == "ok" and rows["crds"].changed == 3

    # converged: the CRDs are applied again (cheap, idempotent), no release moves
    run()
    assert [c for c in helm_calls(tmp_path)[start + len(calls) :] if c[0] == "upgrade"] == []


def test_a_clusterpolicy_that_lost_a_key_is_reported(api: FakeKubeAPI, monkeypatch: pytest.MonkeyPatch) -> None:
    run(OLD)
    monkeypatch.setenv("FAKE_HELM_CLUSTERPOLICY_DROP", "cdi")
    with pytest.raises(StageError) as err:
        run()
    assert err.value.stage == "check" and "cdi (missing)" in err.value.message


def test_chart_crds_reads_every_crds_directory(tmp_path: Path) -> None:
    chart = tmp_path / "kube-prometheus-stack"
    (chart / "charts" / "crds" / "crds").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("name: kube-prometheus-stack\n")
    (chart / "charts" / "crds" / "Chart.yaml").write_text("name: crds\n")
    crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: %s}\n"
    (chart / "charts" / "crds" / "crds" / "b.yaml").write_text(crd % "b.example.com")
    (chart / "charts" / "crds" / "crds" / "a.yaml").write_text(
        "# two documents\n" + crd % "a.example.com" + "---\n" + "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
    )
    (chart / "templates").mkdir()
    (chart / "templates" / "crds").mkdir()  # a templates/crds directory is not a chart's crds/
    (chart / "templates" / "crds" / "c.yaml").write_text(crd % "c.example.com")
    assert components.crd_names(components.chart_crds(chart)) == ["a.example.com", "b.example.com"]


def test_clusterpolicy_drift() -> None:
    values = {"operator": {"runtimeClass": "nvidia"}, "driver": {"enabled": False}, "nfd": {"enabled": True}}
    spec = {"operator": {"runtimeClass": "nvidia", "defaultRuntime": "containerd"}, "driver": {"enabled": True}}
    assert components.clusterpolicy_drift(values, spec) == ["driver.enabled (True, gpustack set False)"]
    assert components.clusterpolicy_drift(values, {}) == ["operator (missing)", "driver (missing)"]
    assert components.clusterpolicy_drift({"nfd": {"enabled": True}}, {}) == []


def test_the_components_sequence() -> None:
    seq = commands.sequence("components")
    assert seq.stage_ids == ("preflight", "crds", "cluster", "check")
    assert all(s.runner != "ansible" for s in seq.stages)
