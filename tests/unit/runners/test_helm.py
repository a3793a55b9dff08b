"""The pyhelm3 facade against the fake helm executable (tests/fakes/helm)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpustack.runners.helm import Helm, HelmError, ReleaseSpec, error_summary, failing_resource
from tests.fakes import fake_helm

FAKE_HELM = str(Path(__file__).resolve().parents[2] / "fakes" / "helm")


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FAKE_HELM_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("FAKE_HELM_LOG", str(tmp_path / "log.jsonl"))
    for var in ("FAKE_HELM_FAIL", "FAKE_HELM_DELAY", "FAKE_HELM_RENDEZVOUS", "FAKE_HELM_API", "FAKE_HELM_FAIL_MESSAGE"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def log(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def spec(name: str, values: dict[str, Any] | None = None, version: str = "1.0.0") -> ReleaseSpec:
    return ReleaseSpec(name, name, "https://charts.example.com", version, "ns-" + name, values or {"k": name})


SPECS = [spec("kube-prometheus-stack"), spec("gpu-operator"), spec("dcgm-exporter")]


def test_fresh_install_order_values_and_concurrency(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_HELM_DELAY", "0.4")
    # the two after the CRD owner must both be running at once to get past the rendezvous (not timing: load-proof)
    monkeypatch.setenv("FAKE_HELM_RENDEZVOUS", f"{fake / 'meet'}:gpu-operator,dcgm-exporter")
    helm = Helm(executable=FAKE_HELM)
    results = helm.ensure_releases(SPECS)
    assert [(r.release, r.action, r.revision) for r in results] == [
        ("kube-prometheus-stack", "installed", 1),
        ("gpu-operator", "installed", 1),
        ("dcgm-exporter", "installed", 1),
    ]
    upgrades = [r for r in log(fake) if r["mutating"]]
    assert upgrades[0]["argv"][1] == "kube-prometheus-stack"
    by = {r["argv"][1]: r for r in upgrades}
    kps, gpu, dcgm = by["kube-prometheus-stack"], by["gpu-operator"], by["dcgm-exporter"]
    assert kps["end"] <= min(gpu["start"], dcgm["start"])  # CRD owner first
    assert gpu["met"] is True and dcgm["met"] is True  # the rest overlap: each waited until the other had started
    assert kps["met"] is None
    assert gpu["values"] == {"k": "gpu-operator"}  # values reach helm on stdin, as one dict
    argv = gpu["argv"]
    for flag in ("--install", "--rollback-on-failure", "--wait", "--create-namespace"):
        assert flag in argv
    assert argv[argv.index("--version") + 1] == "1.0.0"
    assert argv[argv.index("--repo") + 1].rstrip("/") == "https://charts.example.com"  # pydantic adds the slash
    assert argv[argv.index("--namespace") + 1] == "ns-gpu-operator"
    assert argv[argv.index("--timeout") + 1] == "10m"
    assert helm.call_counts()["mutating"] == 3


def test_converged_rerun_makes_no_mutating_call(fake: Path) -> None:
    Helm(executable=FAKE_HELM).ensure_releases(SPECS)
    helm = Helm(executable=FAKE_HELM)
    results = helm.ensure_releases(SPECS)
    assert {r.action for r in results} == {"unchanged"}
    assert helm.call_counts()["mutating"] == 0
    assert {c.argv[0] for c in helm.calls} <= {"status", "get"}
    assert not [r for r in log(fake)[-len(helm.calls) :] if r["mutating"]]


def test_changed_values_or_version_upgrade_only_that_release(fake: Path) -> None:
    Helm(executable=FAKE_HELM).ensure_releases(SPECS)
    helm = Helm(executable=FAKE_HELM)
    results = helm.ensure_releases(
        [SPECS[0], spec("gpu-operator", {"k": "new"}), spec("dcgm-exporter", version="1.0.1")]
    )
    assert [r.action for r in results] == ["unchanged", "upgraded", "upgraded"]
    assert [r.revision for r in results] == [1, 2, 2]
    assert sorted(c.argv[1] for c in helm.calls if c.mutating) == ["dcgm-exporter", "gpu-operator"]


def test_failure_names_release_and_resource(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_HELM_FAIL", "gpu-operator")
    with pytest.raises(HelmError) as info:
        Helm(executable=FAKE_HELM).ensure_releases(SPECS)
    err = info.value
    assert err.release == "gpu-operator" and err.stage == "helm"
    assert "'gpu-operator'" in err.message and "DaemonSet.apps 'nvidia-driver-daemonset'" in err.message
    assert "INSTALLATION FAILED" in err.message
    assert err.exit_code == 1


def test_first_release_failure_stops_the_rest(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_HELM_FAIL", "kube-prometheus-stack")
    with pytest.raises(HelmError, match="kube-prometheus-stack"):
        Helm(executable=FAKE_HELM).ensure_releases(SPECS)
    assert {r["argv"][1] for r in log(fake) if r["mutating"]} == {"kube-prometheus-stack"}


def test_pending_upgrade_is_rolled_back_then_upgraded(fake: Path) -> None:
    fake_helm.seed(
        fake / "state",
        "gpu-operator",
        "ns-gpu-operator",
        "gpu-operator",
        "1.0.0",
        {"k": "old"},
        ["deployed", "pending-upgrade"],
    )
    helm = Helm(executable=FAKE_HELM)
    result = helm.ensure_release(spec("gpu-operator"))
    assert result.repaired == "rolled back release stuck in pending-upgrade"
    assert result.action == "upgraded" and result.revision == 4
    assert [c.argv[0] for c in helm.calls if c.mutating] == ["rollback", "upgrade"]


def test_pending_upgrade_with_same_values_only_rolls_back(fake: Path) -> None:
    fake_helm.seed(
        fake / "state",
        "gpu-operator",
        "ns-gpu-operator",
        "gpu-operator",
        "1.0.0",
        {"k": "gpu-operator"},
        ["deployed", "pending-upgrade"],
    )
    helm = Helm(executable=FAKE_HELM)
    result = helm.ensure_release(spec("gpu-operator"))
    assert (result.action, result.repaired is not None) == ("unchanged", True)
    assert [c.argv[0] for c in helm.calls if c.mutating] == ["rollback"]


def test_pending_install_is_uninstalled_then_installed(fake: Path) -> None:
    fake_helm.seed(
        fake / "state", "dcgm-exporter", "ns-dcgm-exporter", "dcgm-exporter", "1.0.0", {}, ["pending-install"]
    )
    helm = Helm(executable=FAKE_HELM)
    result = helm.ensure_release(spec("dcgm-exporter"))
    assert (result.action, result.revision) == ("installed", 1)
    assert [c.argv[0] for c in helm.calls if c.mutating] == ["uninstall", "upgrade"]


def test_failed_release_is_upgraded_again(fake: Path) -> None:
    fake_helm.seed(
        fake / "state", "gpu-operator", "ns-gpu-operator", "gpu-operator", "1.0.0", {"k": "gpu-operator"}, ["failed"]
    )
    result = Helm(executable=FAKE_HELM).ensure_release(spec("gpu-operator"))
    assert (result.action, result.revision) == ("upgraded", 2)


def test_error_parsing() -> None:
    stderr = 'Error: UPGRADE FAILED: 1 error occurred:\n\t* Deployment.apps "grafana" is invalid: x\n'
    assert failing_resource(stderr) == "Deployment.apps 'grafana'"
    assert error_summary(stderr) == "UPGRADE FAILED: 1 error occurred:"
    assert failing_resource("Error: timed out") is None
    assert error_summary("") == "helm failed without a message"
