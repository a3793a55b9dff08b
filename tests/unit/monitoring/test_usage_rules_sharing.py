"""The usage rules' table of MIG shares (gpustack/templates/monitoring/gpu-usage.rules.yaml) against the MIG
profiles gpustack knows (gpustack/config/mig.py): every profile of every listed family counts its compute slices
out of the GPU's (7; 4 on A30), by its GPU_I_PROFILE (DCGM) and by its resource name (kube-state-metrics).

Each rule keys a profile with ``label_replace`` (``mig_slices="<slices>/<of>"``, later calls overriding earlier
ones) and joins the key with its table of constants (``label_replace(vector(1/7), "mig_slices", "1/7", "", "")``
...): this test applies the rule's own regexes the way Prometheus does (anchored at both ends, ``$1``/``${1}``
expanded, no match = label unchanged) and looks the key up in that rule's table."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from gpustack.config import mig
from gpustack.monitoring.rules import record_rules

KEY = "mig_slices"
#: label_replace(v, "mig_slices", "<replacement>", "<source label>", "<regex>")
SETS_KEY = re.compile(rf'"{KEY}",\s*"(?P<repl>[^"]*)",\s*"(?P<src>[^"]*)",\s*"(?P<re>[^"]*)"')
#: label_replace(vector(<num>[/<den>]), "mig_slices", "<key>", "", "")
ENTRY = re.compile(rf'vector\((?P<num>\d+)(?:/(?P<den>\d+))?\),\s*"{KEY}",\s*"(?P<key>[^"]+)"')


def _expr(record: str) -> str:
    [rule] = [r for r in record_rules() if r["record"] == record]
    return str(rule["expr"])


def _table(record: str) -> dict[str, Fraction]:
    return {m["key"]: Fraction(int(m["num"]), int(m["den"] or 1)) for m in ENTRY.finditer(_expr(record))}


def _key(record: str, label: str, value: str) -> str | None:
    """The ``mig_slices`` key the rule's label_replace calls give a series whose ``label`` is ``value``
    (innermost call first: it is written last in the text's nesting, so the calls apply in text order)."""
    key: str | None = None
    for m in SETS_KEY.finditer(_expr(record)):
        if m["src"] != label:
            continue
        hit = re.fullmatch(m["re"], value)
        if hit:
            key = hit.expand(re.sub(r"\$\{?(\d+)\}?", r"\\g<\1>", m["repl"]))  # Go's $1 / ${1} as Python's
    return key


def _share(record: str, label: str, value: str) -> Fraction | None:
    key = _key(record, label, value)
    return None if key is None else _table(record).get(key)


def _ksm(resource: str) -> str:
    """kube-state-metrics' label value of a resource name: nvidia.com/mig-1g.10gb.me -> nvidia_com_mig_1g_10gb_me."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", resource)


INSTANCE = "gpustack:gpu_instance_share:ratio"
RESOURCE = "gpustack:gpu_resource_share:ratio"
CASES = [(f.name, p, Fraction(mig.compute_slices(p), f.slices)) for f in mig.FAMILIES for p in f.profiles]


@pytest.mark.parametrize(("family", "profile", "want"), CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_every_known_profile_counts_its_compute_slices(family: str, profile: str, want: Fraction) -> None:
    assert _share(INSTANCE, "GPU_I_PROFILE", profile) == want
    assert _share(RESOURCE, "resource", _ksm(mig.resource_name(profile))) == want
    assert _share(RESOURCE, "resource", _ksm(mig.resource_name(profile) + ".shared")) == want  # renamed replicas


def test_the_table_is_read_and_a_whole_gpu_profile_is_one() -> None:
    assert _table(INSTANCE) == _table(RESOURCE) and len(_table(INSTANCE)) == 8
    assert set(_table(INSTANCE).values()) <= {Fraction(n, d) for d in (4, 7) for n in range(1, d + 1)}
    assert _share(RESOURCE, "resource", "nvidia_com_mig_7g_80gb") == 1
    assert _share(INSTANCE, "GPU_I_PROFILE", "1g.6gb") == Fraction(1, 4)  # A30: the override wins over the 7s
    assert _share(INSTANCE, "GPU_I_PROFILE", "1g.12gb") == Fraction(1, 7)  # GH200 96GB: not an A30 profile
    assert _share(RESOURCE, "resource", "nvidia_com_gpu") is None  # not a MIG resource
    assert _share(INSTANCE, "GPU_I_PROFILE", "8g.80gb") is None  # no such key: not counted as a MIG share
