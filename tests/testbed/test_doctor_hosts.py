"""`gpustack doctor` host and runtime checks against a REAL host (systemd, sshd, containerd, iptables
real; facts collected over SSH by the same preflight playbook `up` runs), broken for real, then
`doctor --fix` repairing the firewall."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from gpustack.config import pins

from .cluster import run_gpustack, up, write_config
from .hosts import Testbed
from .prepare import write_files
from .pytest_plugin import TestbedFactory
from .services import Sources

POD_DROP = "-s 10.244.0.0/16 -j DROP"


NEXT_KERNEL = re.sub(r"-(\d+)-", lambda m: f"-{int(m.group(1)) + 1}-", os.uname().release, count=1)
if os.uname().release == NEXT_KERNEL:
    NEXT_KERNEL += "+next"
TOOLKIT_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
# what the NVIDIA container toolkit writes for containerd 2 (config version 3): the nvidia runtime
NVIDIA_RUNTIME = """\
version = 3
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]
    BinaryName = "/usr/bin/nvidia-container-runtime"
"""


@pytest.fixture
def bed(testbed_factory: TestbedFactory) -> Testbed:
    # unattended-upgrades as Debian configures it (its program is a stand-in: the hosts have no archive to
    # install it from), and a kernel installed to boot next without its headers
    return testbed_factory(["solo"], prepare=write_files({
        "/usr/bin/unattended-upgrade": "#!/bin/sh\nexit 0\n",
        "/etc/apt/apt.conf.d/20auto-upgrades":
            'APT::Periodic::Update-Package-Lists "1";\nAPT::Periodic::Unattended-Upgrade "1";\n',
        "/etc/apt/apt.conf.d/50unattended-upgrades":
            'Unattended-Upgrade::Origins-Pattern {\n  "origin=Debian,codename=${distro_codename},label=Debian-Security";\n};\n'
            'Unattended-Upgrade::Package-Blacklist {\n  "nvidia-";\n};\n',
        f"/lib/modules/{NEXT_KERNEL}/kernel/.keep": "",
        f"/boot/vmlinuz-{NEXT_KERNEL}": "",
    }, mode=0o755))  # fmt: skip


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

    prepared = up(cfg, state, "--only", "os,firewall,containerd,kubernetes")
    assert prepared.rc == 0, prepared.output

    # --- healthy after the host stages: the checks `up` set up pass
    rc, report, output = doctor(cfg, state, "--layer", "host,runtime", "--save-snapshot", str(tmp_path / "snap.json"))
    checks = by_id(report)
    for cid in ("H00-host-facts", "H01-swap", "H02-bridge-netfilter", "H03-ip-forward", "H04-firewall", "C02-cri",
                "C05-containerd-config-version", "C06-containerd-drop-ins",
                "H12-fabric-manager", "H13-unattended-upgrades", "H14-next-kernel-headers"):  # fmt: skip
        assert checks[cid]["status"] == "pass", (cid, output)
    # the bed's containerd is Debian forky's 2.1 standing in for the pinned 2.3: it runs the kubelet 1.36, but
    # containerd recommends 2.3.0+ or 2.2.0+ for 1.36 (RELEASES.md), and doctor says so
    assert checks["C04-containerd-version"]["status"] == "warn", output
    assert "not among containerd's recommendations for Kubernetes 1.36" in checks["C04-containerd-version"]["summary"]
    # the bed's kernel runs cgroup v1 (hybrid), so every bed host does (write_config ignores P17 for `up`): the
    # kubelet 1.36 the kubernetes stage installed would refuse to start on it, and doctor says so
    cgroup = checks["C03-cgroup-v2"]
    assert cgroup["status"] == "fail" and f"kubelet {pins.KUBERNETES['1.36']}" in cgroup["evidence"], output
    assert "systemd.unified_cgroup_hierarchy=1" in cgroup["fix"]
    assert report["summary"]["fail"] == 1 and rc == 1, output
    # the facts behind them, read on the real host (kubelet: the package's double; containerd: Debian forky's 2.1)
    facts = json.loads((tmp_path / "snap.json").read_text())["hosts"][host.name]
    assert facts["kubelet_version"] == pins.KUBERNETES["1.36"] and facts["cgroup_v2"] is False
    assert facts["containerd"]["version"].startswith("2.1.") and facts["containerd"]["config_version"] == 3
    # up's containerd stage keeps the NVIDIA toolkit's drop-in directory imported (no drop-in there yet)
    assert facts["containerd"]["imports"] == ["/etc/containerd/conf.d/*.toml"] and facts["containerd"]["drop_ins"] == []
    assert facts["unattended_upgrades"] == {
        "installed": True, "enabled": True, "blacklist": ["nvidia-"], "automatic_reboot": False,
        "origins": ["origin=Debian,codename=${distro_codename},label=Debian-Security"]}  # fmt: skip
    assert {"release": NEXT_KERNEL, "headers": False, "image": True} in facts["kernels"]
    assert (
        isinstance(facts["gpu_packages"], list) and facts["nvidia_nvswitches"] == 0 and facts["fabricmanager"] is None
    )

    # --- break the host for real (vm.* sysctls are read-only in the container: swap via fstab)
    host.sudo("echo '/swap.img none swap sw 0 0' >> /etc/fstab", check=True)
    host.sudo("sysctl -w net.ipv4.ip_forward=0", check=True)
    host.sudo("sysctl -w net.bridge.bridge-nf-call-iptables=0", check=True)
    host.sudo(f"iptables -w -I INPUT 1 {POD_DROP}", check=True)
    host.sudo(
        f"mkdir -p {Path(TOOLKIT_DROP_IN).parent} && printf '%s' '{NVIDIA_RUNTIME}' > {TOOLKIT_DROP_IN}", check=True
    )
    # ...and config.toml rewritten by something else without up's import (`containerd config default`'s
    # `imports = []`): the toolkit's runtime is lost
    host.sudo("sed -i 's#^imports = .*#imports = []#' /etc/containerd/config.toml", check=True)
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
        "C06-containerd-drop-ins": (TOOLKIT_DROP_IN, 'imports = ["/etc/containerd/conf.d/*.toml"'),
        "C03-cgroup-v2": ("cgroup v1", "systemd.unified_cgroup_hierarchy=1"),  # the bed's kernel, from the start
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

    # --- the drop-in's exact fix, run on the host: containerd 2 reads the nvidia runtime from it
    fix = checks["C06-containerd-drop-ins"]["fix"].split("   (", 1)[0]
    host.sudo(fix, check=True)
    dump = host.sudo("containerd config dump", check=True).stdout
    assert "runtimes.nvidia" in dump and "/usr/bin/nvidia-container-runtime" in dump, dump[-2000:]
    rc, report, output = doctor(cfg, state, "--check", "C06")
    assert [(c["id"], c["status"]) for c in report["checks"]] == [("C06-containerd-drop-ins", "pass")], output
