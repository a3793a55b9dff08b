"""Kubernetes-layer checks: every failure scenario fails with its id and a fix; healthy clusters do not fail.

Each scenario goes through the real ``kubernetes`` client -> FakeKubeAPI -> the ``kubernetes`` source
-> the registered checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes import scenarios as sc
from tests.fakes.kube_api import FakeKubeAPI

K_FAILURES = [n for n in sc.FAILURES if sc.FAILURES[n][1](sc.healthy(sc.FAILURES[n][0])).startswith("K")]


@pytest.mark.parametrize("nodes", [1, 3])
@pytest.mark.parametrize("command", ["doctor", "verify"])
def test_healthy_cluster_has_no_failure(fake_api: FakeKubeAPI, kubeconfig: Path, nodes: int, command: str) -> None:
    sc.healthy(nodes).load(fake_api)
    snap = sc.collect_kube(fake_api, kubeconfig)
    findings = sc.run_checks(snap, command)
    assert not [f for f in findings if f.status == "fail"]
    assert {f.id for f in findings} == {s.id for s in sc.my_specs(command)}


@pytest.mark.parametrize("name", K_FAILURES)
def test_failure_scenario_fails_with_its_id_and_a_fix(fake_api: FakeKubeAPI, kubeconfig: Path, name: str) -> None:
    scenario, want = sc.failure(name)
    scenario.load(fake_api)
    snap = sc.collect_kube(fake_api, kubeconfig, hosts=scenario.hosts)
    fails = [f for f in sc.run_checks(snap) if f.status == "fail"]
    hit = [f for f in fails if f.id == want]
    assert hit, f"{name}: expected {want} to fail, got {[f.id for f in fails]}"
    assert all(f.fix.strip() and f.evidence.strip() for f in hit)
    assert not [f for f in fails if "could not evaluate" in f.summary]


def test_taint_fix_is_the_exact_command(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    scenario, _ = sc.failure("control-plane-taint")
    scenario.load(fake_api)
    [f] = [f for f in sc.run_checks(sc.collect_kube(fake_api, kubeconfig)) if f.id == "K02-control-plane-taint"]
    assert f.fix == "kubectl taint nodes gpu-node-1 node-role.kubernetes.io/control-plane:NoSchedule-"
    assert "untolerated taint" in f.evidence


def test_multi_node_control_plane_taint_is_fine(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    sc.healthy(3).load(fake_api)  # cp-1 keeps its taint: workers run the pods
    findings = sc.run_checks(sc.collect_kube(fake_api, kubeconfig))
    assert [f.status for f in findings if f.id == "K02-control-plane-taint"] == ["pass"]


def test_pod_to_api_fix_has_the_firewall_rules(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    scenario, _ = sc.failure("pod-to-api-timeout")
    scenario.load(fake_api)
    [f] = [f for f in sc.run_checks(sc.collect_kube(fake_api, kubeconfig)) if f.id == "K06-pod-to-api"]
    assert "gpustack up --only firewall" in f.fix
    assert "-s 10.244.0.0/16 -d 10.96.0.1 -p tcp --dport 443 -j ACCEPT" in f.fix
    assert "dial tcp 10.96.0.1:443: i/o timeout" in f.evidence


def test_pod_failures_carry_reason_and_last_event(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    scenario, _ = sc.failure("image-pull-backoff")
    scenario.load(fake_api)
    [f] = [f for f in sc.run_checks(sc.collect_kube(fake_api, kubeconfig)) if f.id == "K07-pod-failures"]
    assert "ImagePullBackOff" in f.summary
    assert "Back-off pulling image" in f.evidence
    assert "crictl pull" in f.fix


def test_verify_runs_only_the_verify_subset() -> None:
    ids = {s.id.split("-")[0] for s in sc.my_specs("verify")}
    sharing = {"G12", "G13", "G14", "G15", "G16", "G17", "G18"}  # GPU sharing (checks_sharing.py)
    assert ids == {"K00", "K01", "K03", "K05", "K06", "K09", "G01", "G02", "G06", "G10"} | sharing
    doctor = {s.id.split("-")[0] for s in sc.my_specs("doctor")}
    # K09, G10, G18 start test pods: verify only; K12 (kubelet serving CSRs) is doctor's only
    assert ids - {"K09", "G10", "G18"} < doctor and len(doctor) == 28 and "K12" in doctor


def test_unreachable_cluster_is_one_fail_and_skips(tmp_path: Path) -> None:
    with FakeKubeAPI.running() as api:
        kc = api.write_kubeconfig(tmp_path / "kc")
    snap = sc.collect_kube(api, kc, timeout=5)  # the server is gone
    assert "kubernetes" in snap.errors and not snap.kube
    findings = sc.run_checks(snap)
    assert [f.id for f in findings if f.status == "fail"] == ["K00-api-unreachable"]
    assert all(f.status == "skip" for f in findings if f.id != "K00-api-unreachable")


def test_no_kubeconfig(tmp_path: Path) -> None:
    snap = sc.collect_kube(None, None)  # type: ignore[arg-type]
    assert "gpustack up" in snap.errors["kubernetes"]
    assert [f.id for f in sc.run_checks(snap) if f.status == "fail"] == ["K00-api-unreachable"]
