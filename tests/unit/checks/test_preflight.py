"""Preflight checks on recorded host facts: each failure case yields the right id, status and a fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpustack.checks import preflight as pf
from gpustack.config.model import Config, Node

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "facts" / "ubuntu2204-gpu.json"
CP = Node(name="gpu-node-1", address="10.0.0.11", role="control-plane", user="ubuntu")
CFG = Config(nodes=[CP, Node(name="w", address="10.0.0.12")])


def facts(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = json.loads(FIXTURE.read_text())
    base.update(over)
    return base


def by_id(f: dict[str, Any]) -> dict[str, pf.Finding]:
    return {x.id: x for x in pf.run_checks(CFG, {"gpu-node-1": f, "w": facts()}) if x.host == "gpu-node-1"}


def test_healthy_gpu_host_passes_everything_that_matters() -> None:
    found = by_id(facts())
    assert not [f for f in found.values() if f.status == "fail"]
    assert found["P08-gpu"].status == "pass" and "8 NVIDIA GPU(s)" in found["P08-gpu"].summary
    assert found["P15-kernel-modules"].status == "warn"  # br_netfilter not loaded yet: the os stage loads it


@pytest.mark.parametrize(
    ("over", "check", "status"),
    [
        ({"os_id": "centos", "os_version_id": "9"}, "P01-os", "fail"),
        ({"os_id": "ubuntu", "os_version_id": "20.04"}, "P01-os", "fail"),
        ({"os_id": "debian", "os_version_id": "12"}, "P01-os", "pass"),
        ({"os_id": "ubuntu", "os_version_id": "24.04"}, "P01-os", "pass"),
        ({"arch": "ppc64le"}, "P02-arch", "fail"),
        ({"cpus": 1}, "P03-cpu", "fail"),
        ({"mem_total_bytes": 2 * 1024**3}, "P04-memory", "fail"),
        ({"disk_free_bytes": {"/": 5 * 1024**3, "/var/lib": 5 * 1024**3}}, "P05-disk", "fail"),
        ({"swap_active": [{"device": "/swap.img", "size_bytes": 1}]}, "P06-swap", "warn"),
        ({"fstab_swap_lines": ["/swap.img none swap sw 0 0"]}, "P06-swap", "warn"),
        (
            {"listening": [{"proto": "tcp", "address": "0.0.0.0", "port": 6443, "process": "haproxy"}]},
            "P07-ports",
            "fail",
        ),
        ({"listening": [{"proto": "udp", "address": "0.0.0.0", "port": 8472, "process": None}]}, "P07-ports", "fail"),
        # Flannel 0.28.9's flanneld listens on 0.0.0.0:8081 (hostNetwork): a host service there crash-loops it
        ({"listening": [{"proto": "tcp", "address": "0.0.0.0", "port": 8081, "process": "java"}]}, "P07-ports", "fail"),
        ({"node_exporter_on_9100": True}, "P16-node-exporter", "warn"),
        ({"nvidia_pci_devices": []}, "P08-gpu", "warn"),
        ({"nouveau_loaded": True}, "P09-nouveau", "fail"),
        ({"nouveau_loaded": True, "nvidia_pci_devices": []}, "P09-nouveau", "fail"),
        ({"secure_boot": "enabled"}, "P10-secure-boot", "warn"),
        ({"secure_boot": "enabled", "nvidia_driver_version": "595.91.07"}, "P10-secure-boot", "pass"),
        (
            {"kubernetes": {"admin_conf": True, "kubelet_conf": True, "gpustack_marker": None}},
            "P11-existing-kubernetes",
            "fail",
        ),
        ({"sudo_nopasswd": False, "is_root": False}, "P12-sudo", "fail"),
        ({"sudo_nopasswd": False, "is_root": True}, "P12-sudo", "pass"),
        ({"time_synced": False}, "P13-time-sync", "warn"),
        ({"time_synced": None}, "P13-time-sync", "warn"),
        ({"peers": {"10.0.0.12": False}}, "P14-reachability", "fail"),
    ],
)
def test_each_problem(over: dict[str, Any], check: str, status: str) -> None:
    f = by_id(facts(**over))[check]
    assert f.status == status, f
    if status == "fail":
        assert f.fix, f"{check} must say how to fix it"


def test_ports_owned_by_existing_gpustack_install_are_fine() -> None:
    f = facts(
        listening=[{"proto": "tcp", "address": "0.0.0.0", "port": 6443, "process": "kube-apiserver"}],
        kubernetes={"admin_conf": True, "kubelet_conf": True, "gpustack_marker": {"cluster": "gpustack"}},
    )
    found = by_id(f)
    assert found["P07-ports"].status == "pass"
    assert found["P11-existing-kubernetes"].status == "pass"
    # flanneld's own health port on a node of an earlier run is ours too
    f["listening"] = [{"proto": "tcp", "address": "0.0.0.0", "port": 8081, "process": "flanneld"}]
    assert by_id(f)["P07-ports"].status == "pass"


def test_the_flannel_health_port_is_named_when_taken() -> None:
    f = by_id(facts(listening=[{"proto": "tcp", "address": "0.0.0.0", "port": 8081, "process": "java"}]))["P07-ports"]
    assert "8081/tcp (Flannel health (flanneld --healthz-port)) used by java" in f.evidence


def test_missing_facts_is_a_failure() -> None:
    out = pf.run_checks(CFG, {"gpu-node-1": facts()})
    assert [(f.host, f.id, f.status) for f in out if f.host == "w"] == [("w", "P00-facts", "fail")]


def test_ignore_by_name_id_or_all() -> None:
    bad = pf.run_checks(CFG, {"gpu-node-1": facts(cpus=1, nouveau_loaded=True), "w": facts()})
    for ignore, left in ((["cpu"], {"P09-nouveau"}), (["P09-nouveau", "cpu"], set()), (["all"], set())):
        out = pf.apply_ignores(bad, ignore)
        assert {f.id for f in out if f.status == "fail"} == left
    assert "(ignored)" in next(f for f in pf.apply_ignores(bad, ["cpu"]) if f.id == "P03-cpu").summary


def test_check_names_are_stable_and_unique() -> None:
    names = pf.check_names()
    assert len(names) == len(set(names)) == len(pf.CHECKS)
    assert all(n.startswith("P") for n in names)
