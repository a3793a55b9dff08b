"""Contract tests against a real GPU: what gpustack's tables and test doubles assume, checked against the capture
scripts/gpu_probe.py and scripts/nvml_probe.py took on a real NVIDIA H100 80GB HBM3 (PCI 10de:2330, driver
580.159.04, MIG mode disabled, Ubuntu 24.04 VM) on 2026-11-27, saved in
tests/fixtures/gpu-probe/ubuntu2404-h100-80gb-hbm3 (docs/gpu-probe.md#recorded-captures).

- gpustack/config/mig.py's H100 80GB family (GI profiles, how many of each fit, compute slices) against NVML's
  ``nvmlDeviceGetGpuInstanceProfileInfoV`` and ``nvidia-smi mig -lgip`` on that GPU;
- every mig-parted layout gpustack may label a node with (``all-<profile>``, ``all-balanced``) fits the GPU's
  real placements (``nvmlDeviceGetGpuInstancePossiblePlacements``: memory slices 0..7);
- the ``nvidia-smi -L`` line the fake cluster's CUDA pods print has the real line's shape, and G18's expectation
  for a whole or time-sliced GPU ("GPU ") matches the real output.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gpustack.checks import preflight as pf
from gpustack.config import mig
from gpustack.config.model import Config, Node
from gpustack.diagnose import registry
from gpustack.diagnose.snapshot import Snapshot
from tests.prometheus.cli_cluster import NVIDIA_SMI

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-probe" / "ubuntu2404-h100-80gb-hbm3"
#: nvidia-smi -L on a whole GPU (a UUID is GPU- and 8-4-4-4-12 hex digits)
SMI_L = re.compile(r"^GPU \d+: NVIDIA [^(]+ \(UUID: GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\)$")
#: one row of ``nvidia-smi mig -lgip``: GPU, name, profile id, free/total, memory GiB
LGIP_ROW = re.compile(r"^\|\s+(\d+)\s+MIG (\S+)\s+(\d+)\s+(\d+)/(\d+)\s+([0-9.]+)\s")


@cache
def nvml() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CAPTURE / "nvml.json").read_text())
    return data


def real_profiles() -> dict[str, dict[str, Any]]:
    """GI profile name (``1g.10gb``) -> NVML's profile info and placements, for the profiles the GPU has."""
    out = {}
    for entry in nvml()["devices"][0]["gpu_instance_profiles"]:
        info = entry.get("value")
        if info and info["instanceCount"]:
            out[info["name"].removeprefix("MIG ")] = {**info, "placements": entry["placements"]["value"]}
    return out


def h100() -> mig.MigFamily:
    facts = json.loads((CAPTURE.parents[1] / "facts" / f"{CAPTURE.name}.json").read_text())
    device_id = facts["nvidia_pci_devices"][0]["device_id"]
    family = mig.family_of(device_id)
    assert family is not None, f"{device_id} (the capture's GPU) is not in gpustack/config/mig.py"
    return family


def test_the_capture_is_the_gpu_it_says() -> None:
    dev = nvml()["devices"][0]
    assert dev["name"]["value"] == "NVIDIA H100 80GB HBM3"
    assert dev["mig_mode_current_pending"]["value"] == [0, 0]  # read as found: MIG off, nothing pending
    assert h100().name == "H100/H800/A100/A800 80GB"


def test_the_h100_profile_table_is_what_the_gpu_reports() -> None:
    family, real = h100(), real_profiles()
    assert set(family.profiles) == set(real)
    for name, info in real.items():
        assert family.profiles[name] == info["instanceCount"], name
        assert mig.compute_slices(name) == info["sliceCount"], name
    assert family.slices == real["7g.80gb"]["sliceCount"] == 7  # report's denominator (docs/report.md)


def test_nvidia_smi_mig_lgip_agrees_with_nvml() -> None:
    rows = [m.groups() for line in (CAPTURE / "nvidia-smi-mig.txt").read_text().splitlines()
            if (m := LGIP_ROW.match(line))]  # fmt: skip
    real = real_profiles()
    assert {name: (int(pid), int(total)) for _, name, pid, _, total, _ in rows} == {
        name: (info["id"], info["instanceCount"]) for name, info in real.items()
    }


def fits(layout: dict[str, int], placements: dict[str, list[dict[str, int]]], memory_slices: int = 8) -> bool:
    """Whether the GI instances of ``layout`` can be placed together (no two share a memory slice)."""
    wanted = sorted((p for p, n in layout.items() for _ in range(n)), key=lambda p: -placements[p][0]["size"])

    def place(i: int, used: frozenset[int]) -> bool:
        if i == len(wanted):
            return True
        for spot in placements[wanted[i]]:
            cells = frozenset(range(spot["start"], spot["start"] + spot["size"]))
            if max(cells) < memory_slices and not cells & used and place(i + 1, used | cells):
                return True
        return False

    return place(0, frozenset())


@pytest.mark.parametrize("config", sorted(h100().configs()))
def test_every_layout_gpustack_labels_fits_the_real_placements(config: str) -> None:
    placements = {name: info["placements"] for name, info in real_profiles().items()}
    layout = h100().configs()[config]
    assert fits(layout, placements), f"{config} {layout} does not fit the H100's placements"
    assert sum(mig.compute_slices(p) * n for p, n in layout.items()) <= h100().slices


def test_the_fit_check_can_fail() -> None:
    placements = {name: info["placements"] for name, info in real_profiles().items()}
    assert not fits({"4g.40gb": 1, "3g.40gb": 2}, placements)  # 4 + 4 + 4 memory slices of 8
    assert not fits({"1g.20gb": 4, "1g.10gb": 1}, placements)
    assert fits({"4g.40gb": 1, "3g.40gb": 1}, placements)


def test_the_fake_cuda_pods_print_the_real_nvidia_smi_l_shape() -> None:
    real = (CAPTURE / "commands" / "nvidia-smi-L.txt").read_text().splitlines()
    assert real and all(SMI_L.match(line) for line in real), real
    assert SMI_L.match(NVIDIA_SMI.strip()), NVIDIA_SMI


@pytest.mark.parametrize(("logs", "status"), [("real", "pass"), ("real twice", "fail"), ("", "fail")])
def test_g18_reads_the_real_nvidia_smi_l_of_a_time_sliced_gpu(logs: str, status: str) -> None:
    """A time-sliced node's test pod (collect_sharing.targets expects "GPU "): the real output passes; two GPUs
    or none fail."""
    real = (CAPTURE / "commands" / "nvidia-smi-L.txt").read_text()
    text = {"real": real, "real twice": real + real.replace("GPU 0", "GPU 1"), "": ""}[logs]
    pod = {"phase": "Succeeded", "logs": text, "deleted": True, "pod": "gpustack-shared-x"}
    rec = {"node": "gpu-1", "mode": "time-slicing", "resource": "nvidia.com/gpu", "expect": "GPU ", "pod": pod}
    snap = Snapshot(kube={"Node": []})
    snap.workload["sharing"] = [rec]
    (finding,) = registry.run([registry.load_all()["G18-shared-gpu-test-pod"]], snap)
    assert finding.status == status, finding


def test_gr_engine_activity_follows_the_busy_share_of_time() -> None:
    """report's used GPU-hours read DCGM_FI_PROF_GR_ENGINE_ACTIVE (NVML GPM GRAPHICS_UTIL) as the share of time the
    GPU was busy: on the real H100, a load busy half of each 100 ms read about half, a saturating one nearly all,
    idle zero (docs/report.md#what-counts-as-what)."""
    act = nvml()["activity"]
    gr = {k: act[k]["gpm_percent"]["GRAPHICS_UTIL"] / 100 for k in ("idle", "duty_50", "busy")}
    assert gr["idle"] == 0.0
    assert abs(gr["duty_50"] - 0.5) < 0.1
    assert gr["busy"] > 0.9
    assert abs(act["duty_50"]["utilization_rates"]["value"]["gpu"] / 100 - gr["duty_50"]) < 0.1


def test_the_preflight_on_the_real_hosts_facts() -> None:
    """gpustack's preflight on the facts gpustack_facts collected on the real machine: nothing fails, the GPU and
    its preinstalled driver are seen, all-1g.10gb is accepted for that GPU with the preinstalled driver's caveat
    (P26 warns: the MIG manager stops host GPU clients across a mode change), and the clock is unknown (that VM
    has no timedatectl)."""
    facts = json.loads((CAPTURE.parents[1] / "facts" / f"{CAPTURE.name}.json").read_text())
    node = Node(name="h100", address="10.0.0.11", gpu_sharing={"mode": "mig", "profile": "all-1g.10gb"})
    found = {f.id: f for f in pf.run_checks(Config(nodes=[node]), {"h100": facts})}
    assert [i for i, f in found.items() if f.status == "fail"] == []
    assert found["P08-gpu"].status == "pass" and "driver 580.159.04 preinstalled" in found["P08-gpu"].summary
    assert [i for i, f in found.items() if f.status == "warn"] == ["P13-time-sync", "P26-gpu-sharing"]
    assert "1g.10gb x7 per GPU; the driver is preinstalled" in found["P26-gpu-sharing"].summary
    assert "10de:2330" in (found["P26-gpu-sharing"].evidence or "")
