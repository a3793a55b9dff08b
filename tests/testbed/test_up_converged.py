"""Converged re-runs on a real host: a stage whose stamp and probes match is not visited; drift
(a deleted firewall jump, SystemdCgroup turned off by hand, a forgotten stamp) sends exactly the
affected stages back to the host, which repairs it; ``--full`` visits everything.

kubeadm/kubelet/kubectl/helm on the host are the test bed's doubles (see test_up_single.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .cluster import UpRun, up, write_config
from .hosts import Testbed
from .pytest_plugin import TestbedFactory
from .services import Sources

HOST_STAGES = ["os", "firewall", "containerd", "kubernetes", "control-plane", "network", "helm"]


@pytest.fixture
def bed(testbed_factory: TestbedFactory) -> Testbed:
    return testbed_factory(["conv"])


def _visited(run: UpRun, host: str) -> set[str]:
    """Stages of the host layer whose play ran tasks on ``host`` (the preflight always does)."""
    return {stage for stage, row in run.summary().items() if host in row["hosts"] and stage != "preflight"}


def test_converged_stages_are_skipped_and_drift_is_repaired(bed: Testbed, tmp_path: Path, sources: Sources) -> None:
    host = bed.hosts[0]
    cfg = write_config(bed, tmp_path / "gpustack.yaml", sources)
    state = tmp_path / "state"

    first = up(cfg, state)
    assert first.rc == 0, first.output
    assert set(HOST_STAGES) <= _visited(first, host.name)
    stamps = host.sudo("ls /var/lib/gpustack/stages", check=True).stdout.split()
    assert sorted(stamps) == sorted(f"{s}.json" for s in HOST_STAGES)
    assert host.sudo("stat -c %a /var/lib/gpustack/stages/os.json", check=True).stdout.strip() == "600"
    stamp = json.loads(host.sudo("cat /var/lib/gpustack/stages/containerd.json", check=True).stdout)
    assert stamp["probes"]["services"]["containerd.service"] == "active/enabled"

    # --- nothing to do: no stage visits the host, nothing changes
    second = up(cfg, state)
    assert second.rc == 0, second.output
    assert "converged, nothing to do:" in second.stdout
    assert _visited(second, host.name) == set(), second.summary()
    assert all(v == 0 for v in second.changed().values()), second.changed()
    facts = json.loads((second.last_run_dir() / "facts" / f"{host.name}.json").read_text())
    assert all(v == {"converged": True, "reasons": []} for v in facts["stages"].values()), facts["stages"]
    summary = second.summary()
    assert summary["os"]["note"] == f"converged on {host.name}"

    # --- drift in two stages, and a stage whose stamp was forgotten (an interrupted run)
    host.sudo("iptables -D INPUT -j GPUSTACK-INPUT", check=True)
    host.sudo("sed -i 's/SystemdCgroup = true/SystemdCgroup = false/' /etc/containerd/config.toml", check=True)
    host.sudo("rm /var/lib/gpustack/stages/kubernetes.json", check=True)
    third = up(cfg, state)
    assert third.rc == 0, third.output
    facts = json.loads((third.last_run_dir() / "facts" / f"{host.name}.json").read_text())
    assert any("file /etc/containerd/config.toml" in r for r in facts["stages"]["containerd"]["reasons"])
    assert any("command chain" in r for r in facts["stages"]["firewall"]["reasons"])
    assert "no stamp" in facts["stages"]["kubernetes"]["reasons"][0]
    assert _visited(third, host.name) == {"firewall", "containerd", "kubernetes"}
    changed = third.changed()
    assert changed["firewall"] > 0 and changed["containerd"] > 0 and changed["kubernetes"] == 0, changed
    rules = host.sudo("iptables -S INPUT", check=True).stdout
    assert rules.count("-A INPUT -j GPUSTACK-INPUT") == 1
    containerd = host.sudo("cat /etc/containerd/config.toml", check=True).stdout
    assert "SystemdCgroup = true" in containerd and "SystemdCgroup = false" not in containerd
    assert host.run("systemctl is-active containerd", check=True).stdout.strip() == "active"

    # --- converged again; --full visits every stage and still changes nothing
    fourth = up(cfg, state)
    assert fourth.rc == 0 and _visited(fourth, host.name) == set(), fourth.summary()
    full = up(cfg, state, "--full")
    assert full.rc == 0, full.output
    assert set(HOST_STAGES) <= _visited(full, host.name)
    assert all(v == 0 for v in full.changed().values()), full.changed()
