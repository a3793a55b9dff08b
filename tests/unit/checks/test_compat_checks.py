"""Preflight refusals of the compatibility matrix, per host: cgroup v1, an old containerd, the
GPU Operator's range on the OS, no driver container, no kernel headers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpustack.checks import preflight as pf
from gpustack.config import pins
from gpustack.config.model import Config, Gpu, Node, Versions

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "facts" / "ubuntu2204-gpu.json"
CP = Node(name="gpu-node-1", address="10.0.0.11", role="control-plane")


def facts(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = json.loads(FIXTURE.read_text())
    base.update(over)
    return base


def check(f: dict[str, Any], **versions: Any) -> dict[str, pf.Finding]:
    gpu = versions.pop("gpu", Gpu())
    cfg = Config(nodes=[CP], versions=Versions(**versions), gpu=gpu)
    return {x.id: x for x in pf.run_checks(cfg, {CP.name: f})}


def test_matrix_checks_pass_on_a_good_host() -> None:
    found = check(facts())
    for cid in ("P17-cgroup-v2", "P18-containerd", "P19-gpu-operator"):
        assert found[cid].status == "pass", found[cid]
        assert found[cid].host == CP.name


def test_debian_13_is_supported() -> None:
    assert check(facts(os_id="debian", os_version_id="13", nvidia_pci_devices=[]))["P01-os"].status == "pass"


@pytest.mark.parametrize(("minor", "status"), [("1.36", "fail"), ("1.35", "fail"), ("1.34", "warn")])
def test_cgroup_v1(minor: str, status: str) -> None:
    found = check(facts(cgroup_v2=False), kubernetes=minor)["P17-cgroup-v2"]
    assert found.status == status
    if status == "fail":
        assert "failCgroupV1" in found.summary and "unified_cgroup_hierarchy" in found.fix


def test_old_containerd_is_replaced_by_the_release_archive() -> None:
    found = check(facts(containerd={"path": "/usr/bin/containerd", "version": "1.6.20"}))["P18-containerd"]
    assert found.status == "warn" and f"installs {pins.CONTAINERD_VERSION} from the release archive" in found.summary


def test_old_containerd_refused_with_the_distribution_package() -> None:
    old = {"path": "/usr/bin/containerd", "version": "1.6.20"}
    found = check(facts(containerd=old), kubernetes="1.35", containerd_source="distribution")["P18-containerd"]
    assert found.status == "fail"
    assert "containerd 1.6.20 is too old for Kubernetes 1.35 (needs 1.7.28 or newer)" in found.summary
    assert "containerd_source: release" in found.fix
    new = {"path": "/usr/bin/containerd", "version": "1.7.28"}
    ok = check(facts(containerd=new), kubernetes="1.35", containerd_source="distribution")["P18-containerd"]
    assert ok.status == "pass"
    # below containerd's floor for 1.35 (1.7.28+ on the 1.7 branch): refused since issue 30 (the floor is the minimum)
    below = {"path": "/usr/bin/containerd", "version": "1.7.27"}
    refused = check(facts(containerd=below), kubernetes="1.35", containerd_source="distribution")["P18-containerd"]
    assert refused.status == "fail" and "(needs 1.7.28 or newer)" in refused.summary


def test_a_release_containerd_outside_containerds_recommendation_warns() -> None:
    found = check(facts(), containerd="2.1.9")["P18-containerd"]
    assert found.status == "warn" and "containerd 2.1 is not among containerd's recommendations" in found.summary
    assert check(facts())["P18-containerd"].status == "pass"  # the pin: 2.3, recommended for 1.36


def test_distribution_package_not_installed_yet_judged_by_the_os_archive() -> None:
    deb12 = facts(os_id="debian", os_version_id="12", containerd={"path": None, "version": None}, nvidia_pci_devices=[])
    found = check(deb12, kubernetes="1.35", containerd_source="distribution")["P18-containerd"]
    assert found.status == "fail" and "Debian 12 ships containerd 1.6" in found.evidence
    deb13 = dict(deb12, os_version_id="13")
    assert check(deb13, kubernetes="1.35", containerd_source="distribution")["P18-containerd"].status == "pass"


def test_gpu_operator_range_on_this_os(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        pins.GPU_OPERATOR_VALIDATED,
        "v26.7.0",
        pins.GpuOperatorRange("1.35", "1.36", per_os=((("ubuntu", "24.04"), ("1.34", "1.36")),)),
    )
    # config validation lets 1.34 through (one OS validates it); the Ubuntu 22.04 host does not
    found = check(facts(), kubernetes="1.34")["P19-gpu-operator"]
    assert found.status == "fail" and "validated on Kubernetes 1.35-1.36 on this OS, not 1.34" in found.summary
    assert check(facts(os_version_id="24.04"), kubernetes="1.34")["P19-gpu-operator"].status == "pass"


def test_no_kernel_headers_where_the_operator_builds_the_driver() -> None:
    found = check(facts(kernel_headers=False))["P19-gpu-operator"]
    assert found.status == "fail" and "linux-headers-5.15.0-125-generic" in found.fix
    # a preinstalled driver (found, or declared) needs no headers
    assert check(facts(kernel_headers=False, nvidia_driver_version="595.91.07"))["P19-gpu-operator"].status == "pass"
    declared = check(facts(kernel_headers=False), gpu=Gpu(driver="preinstalled"))["P19-gpu-operator"]
    assert declared.status == "pass"


def test_debian_gpu_host_needs_a_preinstalled_driver() -> None:
    found = check(facts(os_id="debian", os_version_id="12"))["P19-gpu-operator"]
    assert found.status == "fail" and "no driver container for Debian 12" in found.summary
    cpu_only = check(facts(os_id="debian", os_version_id="12", nvidia_pci_devices=[]))["P19-gpu-operator"]
    assert cpu_only.status == "pass"


# --- rules the preflight shares with doctor (gpustack.checks.hostrules) ------------------------------------


def test_shared_host_rules_pass_on_a_good_host() -> None:
    found = check(facts())
    for cid in ("P20-containerd-drop-ins", "P21-unattended-upgrades", "P22-next-kernel-headers", "P23-fabric-manager"):
        assert found[cid].status == "pass", found[cid]


def test_unimported_toolkit_drop_in_is_a_warning_before_up() -> None:
    drop_in = {"path": "/etc/containerd/conf.d/99-nvidia.toml", "imported": False}
    found = check(facts(containerd={"path": "/usr/bin/containerd", "version": "1.7.24", "imports": [],
                                    "drop_ins": [drop_in]}))["P20-containerd-drop-ins"]  # fmt: skip
    assert found.status == "warn" and "99-nvidia.toml" in found.summary and "imports" in found.fix


def test_unattended_upgrades_without_kernel_headers_where_the_operator_builds_the_driver() -> None:
    uu = {"installed": True, "enabled": True, "blacklist": [], "origins": [], "automatic_reboot": False}
    pkgs = [{"name": "linux-image-generic", "version": "6.8.0.48.48", "held": False}]
    found = check(facts(unattended_upgrades=uu, gpu_packages=pkgs))["P21-unattended-upgrades"]
    assert found.status == "warn" and "without headers" in found.summary
    assert "apt-mark hold linux-image-generic" in found.fix
    preinstalled = check(facts(unattended_upgrades=uu, gpu_packages=pkgs), gpu=Gpu(driver="preinstalled"))
    assert preinstalled["P21-unattended-upgrades"].status == "pass", "no driver to build: the headers do not matter"


def test_next_kernel_without_headers_fails_where_the_operator_builds_the_driver() -> None:
    kernels = [{"release": "5.15.0-119-generic", "headers": True, "image": True},
               {"release": "5.15.0-124-generic", "headers": False, "image": True}]  # fmt: skip
    found = check(facts(kernel="5.15.0-119-generic", kernels=kernels))["P22-next-kernel-headers"]
    assert found.status == "fail" and "linux-headers-5.15.0-124-generic" in found.fix


def test_nvswitch_host_driver_without_fabric_manager() -> None:
    f = facts(nvidia_nvswitches=4, nvidia_driver_version="595.91.07", nvidia_smi=True,
              fabricmanager={"installed": False, "active": None})  # fmt: skip
    found = check(f)["P23-fabric-manager"]
    assert found.status == "fail" and "nvidia-fabricmanager-595" in found.fix
    operator = check(facts(nvidia_nvswitches=4))["P23-fabric-manager"]
    assert operator.status == "pass" and "driver container" in operator.summary
