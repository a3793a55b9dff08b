"""`gpustack doctor` host and runtime checks against a REAL host (systemd, sshd, containerd, iptables
real; facts collected over SSH by the same preflight playbook `up` runs), broken for real, then
`doctor --fix` repairing the firewall."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .cluster import run_gpustack, up, write_config
from .hosts import Testbed
from .pytest_plugin import TestbedFactory
from .services import Sources

POD_DROP = "-s 10.244.0.0/16 -j DROP"


@pytest.fixture
def bed(testbed_factory: TestbedFactory) -> Testbed:
    return testbed_factory(["solo"])


def doctor(cfg: Path, state: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    run = run_gpustack(cfg, state, "doctor", "--output", "json", *args, timeout=300)
    try:
        report = json.loads(run.stdout)
    except ValueError:
        pytest.fail(f"doctor printed no JSON report (rc {run.rc}):\n{run.output}")
    return run.rc, report, run.output


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in report["checks"]}


def test_doctor_finds_real_host_breakage_and_fixes_the_firewall(
    bed: Testbed,
    tmp_path: Path,
    sources: Sources,
) -> None:
    cfg = write_config(bed, tmp_path / "gpustack.yaml", sources)
    state = tmp_path / "state"
    host = bed.hosts[0]

    prepared = up(cfg, state, "--only", "os,firewall,containerd")
    assert prepared.rc == 0, prepared.output

    # --- healthy after the host stages: the checks `up` set up pass
    rc, report, output = doctor(cfg, state, "--layer", "host,runtime")
    checks = by_id(report)
    for cid in ("H00-host-facts", "H01-swap", "H02-bridge-netfilter", "H03-ip-forward", "H04-firewall", "C02-cri"):
        assert checks[cid]["status"] == "pass", (cid, output)
    assert report["summary"]["fail"] == 0 and rc == 0, output

    # --- break the host for real (vm.* sysctls are read-only in the container: swap via fstab)
    host.sudo("echo '/swap.img none swap sw 0 0' >> /etc/fstab", check=True)
    host.sudo("sysctl -w net.ipv4.ip_forward=0", check=True)
    host.sudo("sysctl -w net.bridge.bridge-nf-call-iptables=0", check=True)
    host.sudo(f"iptables -w -I INPUT 1 {POD_DROP}", check=True)
    host.sudo("systemctl stop containerd", check=True)
    assert host.run("systemctl is-active containerd").stdout.strip() != "active"

    rc, report, output = doctor(cfg, state, "--layer", "host,runtime")
    assert rc == 1, output
    checks = by_id(report)
    expected = {
        "H01-swap": ("/swap.img", "swapoff -a"),
        "H02-bridge-netfilter": ("bridge-nf-call-iptables = 0", "bridge-nf-call-iptables=1"),
        "H03-ip-forward": ("ip_forward = 0", "net.ipv4.ip_forward=1"),
        "H04-firewall": (POD_DROP, "gpustack up --only firewall"),
        "C02-cri": ("containerd.service is not active", "systemctl restart containerd"),
    }
    for cid, (evidence, fix) in expected.items():
        found = checks[cid]
        assert found["status"] == "fail", (cid, output)
        assert found["host"] == host.name
        assert evidence in found["evidence"], (cid, found)
        assert fix in found["fix"], (cid, found)
    assert {c["id"] for c in report["checks"] if c["status"] == "fail"} == set(expected), output

    # --- doctor --fix --yes for the firewall only: the firewall stage puts our jump back on top
    rc, report, output = doctor(cfg, state, "--fix", "--yes", "--check", "H04")
    assert [(c["id"], c["status"]) for c in report["checks"]] == [("H04-firewall", "pass")], output
    # no failure left; only the sources H04 reads were collected (no cluster on this bed, no exit 3)
    assert rc == 0, output
    assert "H04-firewall after the fix: pass" in output
    rules = host.sudo("iptables -w -S INPUT", check=True).stdout.splitlines()
    assert rules[1] == "-A INPUT -j GPUSTACK-INPUT", rules
    assert f"-A INPUT {POD_DROP}" in rules, "doctor --fix keeps the host's own rules"

    # the other breakage is untouched by a --check H04 fix and still reported
    rc, report, output = doctor(cfg, state, "--layer", "host,runtime")
    fails = {c["id"] for c in report["checks"] if c["status"] == "fail"}
    assert fails == set(expected) - {"H04-firewall"}, output
