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


def _on_containerd(s: sc.Scenario, version: str) -> sc.Scenario:
    for node in s.nodes():
        node["status"]["nodeInfo"]["containerRuntimeVersion"] = f"containerd://{version}"
    return s


def test_a_supported_cluster_passes(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    """Nodes on containerd 2.3.6 (no security release after it is known): nothing to act on."""
    _on_containerd(sc.healthy(3), "2.3.6").load(fake_api)
    snap = sc.collect_kube(fake_api, kubeconfig)
    assert chart_versions(snap) == {name: c.version for name, c in pins.CHARTS.items() if name != "dcgm-exporter"}
    (f,) = k10(snap)
    assert f.status == "pass", f
    for part in ("containerd 2.3", "kubernetes 1.36", "nvidia-driver R595", "gpu-operator 26.7", "os ubuntu-24.04"):
        assert part in f.summary, f.summary
    # Prometheus is judged by its own version (buildinfo, else its resource's spec.version), never by its chart; this
    # snapshot has neither: tests/unit/diagnose/test_support_prometheus.py
    assert f.summary.startswith("within upstream support for 90+ days") and "prometheus" not in f.summary


def test_the_pinned_containerd_warns_about_its_open_security_releases(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    """gpustack pins 2.3.4; 2.3.5 and 2.3.6 fix CVEs but are not pinned (one checksum source): every node on 2.3.4
    gets a warning naming the CVEs, why they are not pinned, and how to install 2.3.6 anyway."""
    s = sc.healthy(2)
    assert pins.CONTAINERD_VERSION == "2.3.4"
    _on_containerd(s, pins.CONTAINERD_VERSION).load(fake_api)
    (f,) = k10(sc.collect_kube(fake_api, kubeconfig))
    assert f.status == "warn" and f.summary.startswith(
        "containerd 2.3.4 (2.3): open security releases 2.3.5 (2026-09-04"
    )
    for cve in ("CVE-2026-53495", "GHSA-rp3h-jf77-q9p4", "CVE-2026-53493"):
        assert cve in f.summary
    assert "one public source only" in f.summary
    assert "https://github.com/containerd/containerd/releases/tag/v2.3.6" in f.evidence
    assert "versions.containerd: 2.3.6" in f.fix and "containerd-2.3.6-linux-{arch}.tar.gz.sha256sum" in f.fix
    assert f.fix.endswith("`gpustack up --only containerd`")


def test_end_of_life_containerd_and_kubernetes_minor_warn_with_the_way_out(
    fake_api: FakeKubeAPI, kubeconfig: Path
) -> None:
    s = sc.healthy(3)
    for i, node in enumerate(s.nodes()):
        info = node["status"]["nodeInfo"]
        info["containerRuntimeVersion"] = "containerd://2.2.7"  # end of life 2026-11-06 (no security release known)
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
    ("today", "warn", "noted"),
    [("2026-11-26", set(), set()), ("2026-12-15", set(), {"nvidia-driver"}),
     ("2027-05-01", {"kubernetes"}, set())],
)  # fmt: skip
def test_only_what_has_a_way_out_warns(
    fake_api: FakeKubeAPI,
    kubeconfig: Path,
    monkeypatch: pytest.MonkeyPatch,
    today: str,
    warn: set[str],
    noted: set[str],
) -> None:
    """The pinned cluster on three days: nothing today; from December the R595 driver branch (March 2027) is within
    90 days, but the pinned GPU Operator supports no newer branch still in support (R610 ended August 2026), so
    `upgrade --components` would reinstall 595.91.07: a note, not a warning; by May Kubernetes 1.36 (2027-06-28)
    nears its end, a warning because gpustack offers 1.37."""
    _on_containerd(sc.healthy(1), "2.3.6").load(fake_api)
    snap = sc.collect_kube(fake_api, kubeconfig)
    monkeypatch.setenv("GPUSTACK_TODAY", today)
    found = k10(snap)
    assert {f.summary.split(" ")[0] for f in found if f.status == "warn"} == warn
    if warn:  # Kubernetes 1.36 (2027-06-28) has a way out since 1.37 is offered: `gpustack upgrade --to 1.37`
        assert all(f.fix == "`gpustack upgrade --to 1.37` (one minor at a time)" for f in found), found
        return
    (f,) = found
    assert f.status == "pass"
    assert {n for n in ("nvidia-driver", "kubernetes") if f"{n} " in f.evidence.partition("noted")[2]} == noted
    if "nvidia-driver" in noted:
        assert "595.91.07" in f.evidence and "R610: past" in f.evidence and "reinstall 595.91.07" in f.evidence


def test_a_newer_supported_driver_branch_of_the_pinned_operator_is_a_warning_naming_it(
    fake_api: FakeKubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Had the pinned GPU Operator listed an R620 driver (LTSB, until September 2029), R595 nearing its end would
    warn and name it."""
    chart = pins.CHARTS["gpu-operator"].version
    monkeypatch.setitem(pins.GPU_OPERATOR_DRIVERS, chart, ("620.10.01", *pins.GPU_OPERATOR_DRIVERS[chart]))
    _on_containerd(sc.healthy(1), "2.3.6").load(fake_api)
    snap = sc.collect_kube(fake_api, kubeconfig)
    monkeypatch.setenv("GPUSTACK_TODAY", "2026-12-15")
    (f,) = k10(snap)
    assert f.status == "warn" and f.summary.startswith("nvidia-driver 595.91.07 (R595) is near its end of support")
    assert f.fix.startswith("driver 620.10.01 (R620") and chart in f.fix


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
