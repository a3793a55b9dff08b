"""The usage rules' tables of MIG shares (gpustack/templates/monitoring/gpu-usage.rules.yaml) against the MIG
profiles gpustack knows (gpustack/config/mig.py): every profile of every listed family counts its compute slices
out of the GPU's (7; 4 on A30), by its GPU_I_PROFILE (DCGM) and by its resource name (kube-state-metrics)."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from gpustack.config import mig
from gpustack.monitoring.rules import record_rules

TERM = re.compile(r'=~"(?P<re>[^"]+)"\}\)(?: \* (?P<num>\d+))?(?: / (?P<den>\d+))?\s*$')


def _chain(record: str) -> list[tuple[re.Pattern[str], Fraction]]:
    """(anchored regex, share) of each MIG term of a rule, in evaluation order (``or`` keeps the first match)."""
    [rule] = [r for r in record_rules() if r["record"] == record]
    out = []
    for term in re.split(r"\n\s*or\n", str(rule["expr"])):
        m = TERM.search(term.strip())
        if m and ("GPU_I_PROFILE" in term or "nvidia_com_mig_" in term):
            share = Fraction(int(m["num"] or 1), int(m["den"] or 1))
            out.append((re.compile(m["re"]), share))
    return out


def _share(chain: list[tuple[re.Pattern[str], Fraction]], name: str) -> Fraction | None:
    """The share the first matching term gives (Prometheus anchors label regexes at both ends)."""
    return next((share for pattern, share in chain if pattern.fullmatch(name)), None)


def _ksm(resource: str) -> str:
    """kube-state-metrics' label value of a resource name: nvidia.com/mig-1g.10gb.me -> nvidia_com_mig_1g_10gb_me."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", resource)


CASES = [(f.name, p, Fraction(mig.compute_slices(p), f.slices)) for f in mig.FAMILIES for p in f.profiles]


@pytest.mark.parametrize(("family", "profile", "want"), CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_every_known_profile_counts_its_compute_slices(family: str, profile: str, want: Fraction) -> None:
    assert _share(_chain("gpustack:gpu_instance_share:ratio"), profile) == want
    assert _share(_chain("gpustack:gpu_resource_share:ratio"), _ksm(mig.resource_name(profile))) == want


def test_the_tables_are_read_and_a_whole_gpu_profile_is_one() -> None:
    assert len(_chain("gpustack:gpu_instance_share:ratio")) == len(_chain("gpustack:gpu_resource_share:ratio")) == 8
    assert _share(_chain("gpustack:gpu_resource_share:ratio"), "nvidia_com_mig_7g_80gb") == 1
    assert _share(_chain("gpustack:gpu_instance_share:ratio"), "1g.6gb") == Fraction(1, 4)  # A30 before the 7s
    assert _share(_chain("gpustack:gpu_resource_share:ratio"), "nvidia_com_gpu") is None  # not a MIG term
