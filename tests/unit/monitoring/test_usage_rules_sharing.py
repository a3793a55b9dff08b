"""The usage rules' table of MIG compute slices (gpustack/templates/monitoring/gpu-usage.rules.yaml) against the MIG
profiles gpustack knows (gpustack/config/mig.py): every profile of every listed family keys its compute slices, by
its GPU_I_PROFILE (DCGM) and by its resource name (kube-state-metrics), and a MIG resource on a node DCGM reports
nothing for is divided by its GPU's slices (7; 4 on A30).

Each rule keys a profile with ``label_replace`` (``mig_slices="<N>"``, later calls overriding earlier ones) and
joins the key with its table of constants (``label_replace(vector(1), "mig_slices", "1", "", "")`` ...): this test
applies the rule's own regexes the way Prometheus does (anchored at both ends, ``$1``/``${1}`` expanded, no match =
label unchanged) and looks the key up in that rule's table. What the shares add up to on a carved GPU (one GPU in
every layout) is evaluated by a real promtool: tests/prometheus/test_mig_capacity.py."""

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


INSTANCE = "gpustack:gpu_instance_slices:count"
RESOURCE = "gpustack:gpu_resource_share:ratio"
CASES = [(f.name, p, f.slices) for f in mig.FAMILIES for p in f.profiles]
#: the fallback divisors of the resource rule, in order: ``or on (node) (<N> * group by (node) (...{resource=~"<re>"}))``
FALLBACK = re.compile(
    r'\((?P<n>\d+) \* group by \(node\) \(kube_node_status_allocatable\{resource=~"(?P<re>[^"]+)"\}\)\)'
)


def _fallback(resource: str) -> int | None:
    """The GPU's slices the resource rule divides ``resource`` by where DCGM reports nothing for the node."""
    for m in FALLBACK.finditer(_expr(RESOURCE)):
        if re.fullmatch(m["re"], resource):
            return int(m["n"])
    return None


@pytest.mark.parametrize(("family", "profile", "slices"), CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_every_known_profile_keys_its_compute_slices(family: str, profile: str, slices: int) -> None:
    want = mig.compute_slices(profile)
    assert _share(INSTANCE, "GPU_I_PROFILE", profile) == want
    for name in (mig.resource_name(profile), mig.resource_name(profile) + ".shared"):  # renamed replicas too
        assert _share(RESOURCE, "resource", _ksm(name)) == want
        assert _fallback(_ksm(name)) == slices, name


def test_the_table_is_read_and_unknown_names_are_not_counted() -> None:
    assert _table(INSTANCE) == _table(RESOURCE) == {str(n): n for n in (1, 2, 3, 4, 7)}
    assert _share(RESOURCE, "resource", "nvidia_com_mig_7g_80gb") == 7
    assert _share(INSTANCE, "GPU_I_PROFILE", "1g.12gb") == 1  # GH200 96GB: not an A30 profile
    assert _fallback("nvidia_com_mig_1g_12gb") == 7 and _fallback("nvidia_com_mig_1g_6gb_me") == 4
    assert _fallback("nvidia_com_mig_1g_60gb") == 7  # anchored: not A30's 1g.6gb
    assert _share(RESOURCE, "resource", "nvidia_com_gpu") is None  # not a MIG resource
    assert _fallback("nvidia_com_gpu") is None
    assert _share(INSTANCE, "GPU_I_PROFILE", "8g.80gb") is None  # no such key: not counted as a MIG share
    assert _share(INSTANCE, "GPU_I_PROFILE", "5g.50gb") is None  # keyed, but not in the table
