"""K10-support-horizons: doctor reads what the cluster runs (through the real client, the fake API server and the
``kubernetes`` source) and warns when a component is past, or within 90 days of, its end of upstream support;
on a supported cluster it passes and says nothing else. The day is GPUSTACK_TODAY (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack.checks.model import Finding
from gpustack.config import pins
from gpustack.diagnose import registry
from gpustack.diagnose.checks_support import CHECK, chart_versions
from gpustack.diagnose.snapshot import Snapshot
from tests.fakes import scenarios as sc
from tests.fakes.kube_api import FakeKubeAPI


def k10(snap: Snapshot) -> list[Finding]:
    return registry.run([registry.load_all()[CHECK]], snap)


def test_a_supported_cluster_passes(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    sc.healthy(3).load(fake_api)
    snap = sc.collect_kube(fake_api, kubeconfig)
    assert chart_versions(snap) == {name: c.version for name, c in pins.CHARTS.items() if name != "dcgm-exporter"}
    (f,) = k10(snap)
    assert f.status == "pass", f
    for part in ("containerd 2.3", "kubernetes 1.36", "nvidia-driver R595", "gpu-operator 26.7", "os ubuntu-24.04"):
        assert part in f.summary, f.summary
    # kube-prometheus-stack 88.5.3's Prometheus 3.14 is not an LTS: its end rests on an estimate (3.15's month),
    # which `gpustack version` shows; doctor names it in the evidence, not as a finding about the cluster
    assert "estimated only" in f.evidence and "prometheus 3.14.0" in f.evidence


def test_end_of_life_containerd_and_kubernetes_minor_warn_with_the_way_out(
    fake_api: FakeKubeAPI, kubeconfig: Path
) -> None:
    s = sc.healthy(3)
    for i, node in enumerate(s.nodes()):
        info = node["status"]["nodeInfo"]
        info["containerRuntimeVersion"] = "containerd://2.2.7"  # end of life 2026-11-06
        if i == 2:
            info["kubeletVersion"] = info["kubeProxyVersion"] = "v1.34.11"  # end of life 2026-10-27
    s.load(fake_api)
    found = {f.summary.split(" is ")[0]: f for f in k10(sc.collect_kube(fake_api, kubeconfig))}
    assert set(found) == {"containerd 2.2.7 (2.2)", "kubernetes 1.34.11 (1.34)"}, list(found)
    cd = found["containerd 2.2.7 (2.2)"]
    assert cd.status == "warn" and "past its end of support" in cd.summary and "20 days ago" in cd.summary
    assert cd.evidence.startswith(f"on {', '.join(n['metadata']['name'] for n in s.nodes())}; as of 2026-11-26")
    assert "containerd RELEASES.md" in cd.evidence and "`gpustack up --only containerd`" in cd.fix
    k8s = found["kubernetes 1.34.11 (1.34)"]
    assert k8s.status == "warn" and k8s.fix.startswith("`gpustack upgrade --to 1.35`")


@pytest.mark.parametrize(
    ("today", "expect"),
    [("2026-11-26", set()), ("2026-12-15", {"nvidia-driver"}), ("2027-05-01", {"nvidia-driver", "kubernetes"})],
)
def test_warnings_come_90_days_ahead(
    fake_api: FakeKubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, today: str, expect: set[str]
) -> None:
    """The pinned cluster on three days: nothing today; the R595 driver branch (March 2027) within 90 days from
    December; Kubernetes 1.36 (2027-06-28) too by May."""
    sc.healthy(1).load(fake_api)
    snap = sc.collect_kube(fake_api, kubeconfig)
    monkeypatch.setenv("GPUSTACK_TODAY", today)
    warns = {f.summary.split(" ")[0] for f in k10(snap) if f.status == "warn"}
    assert warns == expect


def test_an_old_gpu_operator_chart_warns() -> None:
    operator = {"metadata": {"name": "gpu-operator", "namespace": "gpu-operator",
                             "labels": {"helm.sh/chart": "gpu-operator-v25.10.1"}}}  # fmt: skip
    (f,) = k10(Snapshot(kube={"Node": [], "Deployment": [operator]}))
    assert f.status == "warn" and f.summary.startswith("gpu-operator v25.10.1 (25.10) is past its end of support")
    assert "life-cycle-policy.rst" in f.evidence and "upgrade --components" in f.fix


def test_odd_objects_never_crash_the_check() -> None:
    snap = Snapshot(kube={"Node": [{"status": "x"}, {"metadata": {"labels": "y"}}, "z"], "Deployment": [7]})
    (f,) = k10(snap)
    assert f.status == "pass" and "no versions read" in f.summary
