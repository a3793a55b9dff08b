"""The scheduled evaluation's objects: valid for Kubernetes 1.36, rendered only when enabled, applied by
`up`'s cluster layer and removed again when remediation is switched off; the config rules."""

from __future__ import annotations

import io
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gpustack.cluster.layer import run_cluster_layer
from gpustack.config.load import load
from gpustack.config.model import Config
from gpustack.config.monitoring import Remediation
from gpustack.console import Console
from gpustack.errors import ConfigError
from gpustack.health.manifests import FILE, evaluation_args, health_manifests
from gpustack.render.manifests import render_manifests
from gpustack.render.values import FactsSummary
from gpustack.runners.helm import Helm
from gpustack.runners.kubeconfig import kube_from_file
from tests.fakes.kube_api import FakeKubeAPI

K8S = "1.36.0" if "1.36.0" in kubernetes_validate.utils.all_versions() else kubernetes_validate.utils.latest_version()
IMAGE = "registry.example.com/gpustack:0.1.0"
ENABLED = Config.model_validate({"monitoring": {"prometheus_storage": {"storage_class": "local-path"}},
                                 "remediation": {"enabled": True, "image": IMAGE, "max_nodes_per_window": 3}})  # fmt: skip
FAKE_HELM = str(Path(__file__).resolve().parents[2] / "fakes" / "helm")


def test_objects_are_valid_and_least_privilege() -> None:
    objs = health_manifests(ENABLED)
    for obj in objs:
        kubernetes_validate.validate(obj, K8S, strict=True)
    kinds = [o["kind"] for o in objs]
    assert kinds[0] == "Namespace" and kinds[-1] == "CronJob"
    [cluster_role] = [o for o in objs if o["kind"] == "ClusterRole"]
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}]
    verbs = {v for o in objs if o["kind"] in ("Role", "ClusterRole") for r in o["rules"] for v in r["verbs"]}
    assert verbs <= {"get", "list", "patch", "create"}  # never delete, never update, never watch
    cron = objs[-1]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpustack-health" and pod["securityContext"]["runAsNonRoot"] is True
    [c] = pod["containers"]
    assert c["image"] == IMAGE and c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["command"] == evaluation_args(ENABLED.remediation)
    assert c["command"][:4] == ["gpustack", "health", "--apply", "--in-cluster"] and "3" in c["command"]


def test_rendered_only_when_enabled() -> None:
    assert FILE not in render_manifests(ENABLED.model_copy(update={"remediation": Remediation()}))
    assert FILE in render_manifests(ENABLED)


def test_enabled_needs_an_image_and_bad_values_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"remediation\.image"):
        Remediation(enabled=True)
    path = tmp_path / "gpustack.yaml"
    nodes = [{"name": "cp", "address": "192.0.2.10", "role": "control-plane"}]
    path.write_text(yaml.safe_dump({"nodes": nodes, "remediation": {"enabled": True}}))
    with pytest.raises(ConfigError, match=r"remediation.*remediation\.image"):
        load(path, environ={})
    path.write_text(yaml.safe_dump({"nodes": nodes, "remediation": {"window": "an hour", "schedule": "hourly"}}))
    with pytest.raises(ConfigError) as exc:
        load(path, environ={})
    assert "remediation.window" in exc.value.message and "remediation.schedule" in exc.value.message


def test_up_applies_it_and_removes_the_cronjob_when_disabled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_HELM_STATE", str(tmp_path / "helm-state"))
    monkeypatch.setenv("FAKE_HELM_LOG", str(tmp_path / "helm.jsonl"))
    for var in ("FAKE_HELM_FAIL", "FAKE_HELM_DELAY"):
        monkeypatch.delenv(var, raising=False)
    with FakeKubeAPI.running() as api:
        monkeypatch.setenv("FAKE_HELM_API", api.url)
        kc = api.write_kubeconfig(tmp_path / "kc")

        def up(cfg: Config) -> list:
            return run_cluster_layer(cfg, kc, FactsSummary(), Console(stream=io.StringIO()),
                                     helm=Helm(kc, executable=FAKE_HELM), kube=kube_from_file(kc),
                                     state_root=tmp_path / "state")  # fmt: skip

        up(ENABLED)
        assert api.get("batch/v1", "CronJob", "gpustack-health", "gpustack-system")
        assert api.get("rbac.authorization.k8s.io/v1", "ClusterRole", "gpustack-health")
        assert api.get("rbac.authorization.k8s.io/v1", "Role", "gpustack-health-prometheus", "monitoring")
        disabled = ENABLED.model_copy(update={"remediation": Remediation()})
        steps = up(disabled)
        assert api.get("batch/v1", "CronJob", "gpustack-health", "gpustack-system") is None
        assert "GPU health CronJob removed" in next(x for x in steps if x.step == "manifests").detail
        steps = up(disabled)  # converged: nothing to remove any more
        assert next(x for x in steps if x.step == "manifests").status == "unchanged"
