"""Contract: the GPU kubelet double (tests/fakes/gpu_kubelet.py) prints ``nvidia-smi -L`` lines of the shape NVIDIA
documents, and G18's parser reads NVIDIA's own lines (facts: upstream/nvidia_smi_l.yaml)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack.diagnose.checks_sharing import SMI_GPU, SMI_MIG
from gpustack.diagnose.collect_sharing import GPU_RESOURCE, MIG_RESOURCE
from tests.fakes import scenarios as sc
from tests.fakes import sharing_scenarios as ss
from tests.fakes.gpu_kubelet import nvidia_smi_l

FACTS: dict[str, Any] = yaml.safe_load((Path(__file__).parent / "upstream" / "nvidia_smi_l.yaml").read_text())
#: a documented line with its UUID and device index generalised: the shape the double must print
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def shape(line: str) -> str:
    return re.sub(r"Device +\d+:", "Device N:", UUID.sub("U", line))


@pytest.mark.parametrize("case", ["mig_all_1g_10gb", "mig_mixed"])
def test_g18_reads_nvidias_lines(case: str) -> None:
    lines = FACTS[case]["lines"]
    assert SMI_GPU.match(lines[0].strip())
    profiles = [m["profile"] for line in lines[1:] if (m := SMI_MIG.match(line.strip()))]
    assert len(profiles) == len(lines) - 1 and profiles[0] in ("1g.10gb", "3g.40gb")


def test_the_double_prints_the_documented_shape() -> None:
    s = sc.healthy(1)
    node = ss.make_mig(s)
    documented = {shape(line) for case in ("mig_all_1g_10gb", "mig_mixed") for line in FACTS[case]["lines"]}
    for resource in ("nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-2g.20gb.shared"):
        printed = nvidia_smi_l(node, resource, "pod-1").splitlines()
        assert len(printed) == 2 and {shape(line) for line in printed} <= documented, printed


def test_renamed_resources_are_matched() -> None:
    suffix = FACTS["renamed_resources"]["suffix"]
    assert GPU_RESOURCE.fullmatch("nvidia.com/gpu" + suffix)
    m = MIG_RESOURCE.fullmatch("nvidia.com/mig-1g.10gb" + suffix)
    assert m is not None and m["profile"] == "1g.10gb"
    assert not GPU_RESOURCE.fullmatch("nvidia.com/gpu.count") and not MIG_RESOURCE.fullmatch("nvidia.com/mig.config")
