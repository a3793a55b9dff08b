"""GPU Operator checks: every failure scenario fails with its id and a fix (real client -> FakeKubeAPI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes import scenarios as sc
from tests.fakes.kube_api import FakeKubeAPI

G_FAILURES = [n for n in sc.FAILURES if sc.FAILURES[n][1](sc.healthy(sc.FAILURES[n][0])).startswith("G")]


@pytest.mark.parametrize("name", G_FAILURES)
def test_failure_scenario_fails_with_its_id_and_a_fix(fake_api: FakeKubeAPI, kubeconfig: Path, name: str) -> None:
    scenario, want = sc.failure(name)
    scenario.load(fake_api)
    snap = sc.collect_kube(fake_api, kubeconfig, hosts=scenario.hosts)
    fails = [f for f in sc.run_checks(snap) if f.status == "fail"]
    hit = [f for f in fails if f.id == want]
    assert hit, f"{name}: expected {want} to fail, got {[f.id for f in fails]}"
    assert all(f.fix.strip() for f in hit)


@pytest.mark.parametrize("stage", sc.VALIDATION_STAGES)
def test_validator_names_the_stuck_stage(fake_api: FakeKubeAPI, kubeconfig: Path, stage: str) -> None:
    scenario, _ = sc.failure(f"validator-{stage}")
    scenario.load(fake_api)
    [f] = [f for f in sc.run_checks(sc.collect_kube(fake_api, kubeconfig)) if f.id == "G03-validator-stage"]
    assert f"stuck in {stage}" in f.summary
    assert f"waiting for {stage.split('-')[0]}" in f.evidence  # the init container's log tail


def test_healthy_operator_exporter_mode(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    sc.healthy(3, exporter="operator").load(fake_api)
    findings = sc.run_checks(sc.collect_kube(fake_api, kubeconfig))
    assert not [f for f in findings if f.status == "fail"]


def test_preinstalled_driver_with_driver_disabled_passes(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    scenario, _ = sc.failure("driver-preinstalled")
    scenario.find("ClusterPolicy", "cluster-policy")["spec"]["driver"]["enabled"] = False
    scenario.load(fake_api)
    findings = sc.run_checks(sc.collect_kube(fake_api, kubeconfig, hosts=scenario.hosts))
    assert [f.status for f in findings if f.id == "G05-driver-preinstalled"] == ["pass"]


def test_nvml_fix_is_the_symlink_command(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    scenario, _ = sc.failure("nvml-unknown-error")
    scenario.load(fake_api)
    [f] = [f for f in sc.run_checks(sc.collect_kube(fake_api, kubeconfig)) if f.id == "G09-nvml-unknown-error"]
    assert "nvidia-ctk system create-dev-char-symlinks --create-all" in f.fix
    assert f.host == "gpu-node-1"


def test_oom_fix_raises_the_limit(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    scenario, _ = sc.failure("exporter-oomkilled")
    scenario.load(fake_api)
    [f] = [f for f in sc.run_checks(sc.collect_kube(fake_api, kubeconfig)) if f.id == "G08-exporter-health"]
    assert "OOMKilled" in f.evidence and "1Gi" in f.fix


def test_driver_upgrade_failed_names_the_node_and_its_driver_pod(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    scenario, _ = sc.failure("driver-upgrade-failed")
    scenario.load(fake_api)
    [f] = [f for f in sc.run_checks(sc.collect_kube(fake_api, kubeconfig)) if f.id == "G11-driver-upgrade-failed"]
    assert f.status == "fail" and f.host == "gpu-node-2" and "stays cordoned" in f.summary
    assert "nvidia.com/gpu-driver-upgrade-state=upgrade-failed" in f.evidence and "CrashLoopBackOff" in f.evidence
    assert "logs nvidia-driver-daemonset-00002 --all-containers" in f.fix
    assert "delete pod nvidia-driver-daemonset-00002" in f.fix


def test_driver_upgrade_done_passes(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    scenario = sc.healthy(3)
    for node in scenario.nodes():
        node["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] = "upgrade-done"
    scenario.load(fake_api)
    findings = [f for f in sc.run_checks(sc.collect_kube(fake_api, kubeconfig)) if f.id == "G11-driver-upgrade-failed"]
    assert [f.status for f in findings] == ["pass"]
