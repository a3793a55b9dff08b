"""The fatal-signal policy on snapshots (pure)."""

from __future__ import annotations

import pytest

from gpustack.health.policy import (
    FATAL_XIDS,
    POLICY_VERSION,
    RULE_IDS,
    RULES,
    GpuSample,
    NodeState,
    Settings,
    Snapshot,
    evaluate,
    state_signals,
)

UUID3 = "GPU-8c4f5d61-bea0-4f54-a132-4d5e6f708193"


def snap(**kw: object) -> Snapshot:
    nodes = {"gpu-1": NodeState("gpu-1", 8, 8), "gpu-2": NodeState("gpu-2", 8, 8)}
    return Snapshot(now=1_800_000_000.0, nodes=nodes, **kw)  # type: ignore[arg-type]


def rules(s: Snapshot, node: str = "gpu-1") -> list[str]:
    return [sig.rule for v in evaluate(s) if v.node == node for sig in v.signals]


def test_table() -> None:
    assert POLICY_VERSION == "1"
    assert len(set(RULE_IDS)) == len(RULES)
    assert {f"xid-{c}" for c in (48, 64, 74, 79, 119, 120)} <= set(RULE_IDS)
    assert {"xid-94-95-row-remap-failure", "row-remap-failure", "uncorrectable-remapped-rows-growth",
            "gpu-allocatable-below-capacity"} <= set(RULE_IDS)  # fmt: skip
    assert all(r.signal and r.source and r.condition and r.why for r in RULES)


def test_healthy() -> None:
    s = snap(xids=[GpuSample("gpu-1", "0", "u0", 0.0, None)], allocatable_max={"gpu-1": 8, "gpu-2": 8})
    assert all(not v.fatal for v in evaluate(s))


@pytest.mark.parametrize("code", sorted(FATAL_XIDS))
def test_each_fatal_xid(code: int) -> None:
    s = snap(xids=[GpuSample("gpu-1", "3", UUID3, 1.0, code)])
    [v] = [v for v in evaluate(s) if v.node == "gpu-1"]
    [sig] = v.signals
    assert sig.rule == f"xid-{code}" and sig.gpu == "3" and sig.uuid == UUID3
    assert not [v for v in evaluate(s) if v.node == "gpu-2" and v.fatal]


def test_a_fatal_xid_is_not_hidden_by_a_later_application_xid() -> None:
    # the count keeps both codes of the window; the last-XID gauge would show only 13
    s = snap(xids=[GpuSample("gpu-1", "3", UUID3, 1, 79), GpuSample("gpu-1", "3", UUID3, 4, 13)])
    assert rules(s) == ["xid-79"]


def test_xid_94_95_only_with_a_row_remap_failure() -> None:
    plain = snap(xids=[GpuSample("gpu-1", "2", "u2", 1, 95)])
    [v] = [v for v in evaluate(plain) if v.node == "gpu-1"]
    assert not v.fatal and "without a row-remap failure" in v.notes[0]
    failed = snap(xids=[GpuSample("gpu-1", "2", "u2", 1, 94)], remap_failures=[GpuSample("gpu-1", "2", "u2", 1)])
    assert rules(failed) == ["xid-94-95-row-remap-failure", "row-remap-failure"]
    other_gpu = snap(xids=[GpuSample("gpu-1", "2", "u2", 1, 94)], remap_failures=[GpuSample("gpu-1", "5", "u5", 1)])
    assert rules(other_gpu) == ["row-remap-failure"]


def test_remapped_rows_growth() -> None:
    s = snap(growth=[GpuSample("gpu-2", "6", "u6", 3.0)])
    [sig] = [sig for v in evaluate(s) if v.node == "gpu-2" for sig in v.signals]
    assert sig.rule == "uncorrectable-remapped-rows-growth" and "3 more row(s)" in sig.detail


def test_allocatable_below_capacity_must_hold() -> None:
    nodes = {"gpu-1": NodeState("gpu-1", 8, 7)}
    confirmed = Snapshot(now=0, nodes=nodes, allocatable_max={"gpu-1": 7})
    [v] = evaluate(confirmed)
    assert [s.rule for s in v.signals] == ["gpu-allocatable-below-capacity"]
    assert state_signals(v) == list(v.signals)
    flapping = Snapshot(now=0, nodes=nodes, allocatable_max={"gpu-1": 8})  # 8 were allocatable within the window
    [v] = evaluate(flapping)
    assert not v.fatal and "not confirmed yet (8 were allocatable" in v.notes[0]
    no_ksm = Snapshot(now=0, nodes=nodes)
    [v] = evaluate(no_ksm)
    assert not v.fatal and "no kube-state-metrics data" in v.notes[0]


def test_breaker_limit() -> None:
    assert Settings(max_nodes=2, max_percent=10).limit(100) == 2
    assert Settings(max_nodes=20, max_percent=10).limit(100) == 10
    assert Settings(max_nodes=2, max_percent=10).limit(3) == 1  # rounded up: a small cluster can quarantine one
    assert Settings(max_nodes=0, max_percent=10).limit(100) == 0
