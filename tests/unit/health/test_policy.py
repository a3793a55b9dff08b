"""The fault policy on snapshots (pure): each signal's action, the node's action, the XID sources."""

from __future__ import annotations

import pytest

from gpustack.health.policy import (
    POLICY_VERSION,
    SOURCE_COUNT,
    SOURCE_LAST,
    SOURCE_NONE,
    GpuSample,
    NodeState,
    Settings,
    Snapshot,
    Verdict,
    evaluate,
    state_signals,
)

UUID3 = "GPU-8c4f5d61-bea0-4f54-a132-4d5e6f708193"


def snap(counts: bool = True, **kw: object) -> Snapshot:
    nodes = {"gpu-1": NodeState("gpu-1", 8, 8), "gpu-2": NodeState("gpu-2", 8, 8)}
    zero = [GpuSample(n, "0", f"u-{n}", 0.0) for n in nodes]
    kw.setdefault("xid_last", zero)
    return Snapshot(now=1_800_000_000.0, nodes=nodes, xid_count_nodes=set(nodes) if counts else set(), **kw)  # type: ignore[arg-type]


def verdict(s: Snapshot, node: str = "gpu-1") -> Verdict:
    return next(v for v in evaluate(s) if v.node == node)


def rules(s: Snapshot, node: str = "gpu-1") -> list[tuple[str, str]]:
    return [(sig.rule, sig.action) for sig in verdict(s, node).signals]


def test_version_comes_from_the_data() -> None:
    assert POLICY_VERSION == "3"


def test_healthy() -> None:
    s = snap(xids=[GpuSample("gpu-1", "0", "u0", 0.0, None)], allocatable_max={"gpu-1": 8, "gpu-2": 8})
    assert all(not v.signals and v.source == SOURCE_COUNT for v in evaluate(s))


@pytest.mark.parametrize(
    ("code", "action", "quarantine"),
    [(95, "reset", True), (140, "reset", True), (109, "reset", True), (48, "reset", True), (79, "reboot", True),
     (64, "rma", True), (94, "alert", False), (63, "alert", False), (160, "alert", False), (999, "rma", True)],
)  # fmt: skip
def test_each_xid_takes_its_action(code: int, action: str, quarantine: bool) -> None:
    s = snap(xids=[GpuSample("gpu-1", "3", UUID3, 1.0, code)])
    v = verdict(s)
    [sig] = v.signals
    assert (sig.rule, sig.action, sig.gpu, sig.uuid) == (f"xid-{code}", action, "3", UUID3)
    assert v.quarantine is quarantine and v.action is not None and v.action.id == action
    assert not verdict(s, "gpu-2").signals


def test_a_fatal_xid_is_not_hidden_by_a_later_application_xid() -> None:
    # the count keeps both codes of the window; the last-XID gauge would show only 13
    s = snap(xids=[GpuSample("gpu-1", "3", UUID3, 1, 79), GpuSample("gpu-1", "3", UUID3, 4, 13)])
    assert rules(s) == [("xid-13", "alert"), ("xid-79", "reboot")]
    assert verdict(s).action.id == "reboot"  # type: ignore[union-attr]
    assert [x.rule for x in verdict(s).alerts] == ["xid-13"]


def test_the_most_severe_action_wins() -> None:
    s = snap(xids=[GpuSample("gpu-1", "2", "u2", 1, 48)], remap_failures=[GpuSample("gpu-1", "2", "u2", 1)])
    assert rules(s) == [("xid-48", "reset"), ("row-remap-failure", "rma")]
    assert verdict(s).action.id == "rma"  # type: ignore[union-attr]


def test_the_last_xid_gauge_is_a_fallback_where_counts_are_missing() -> None:
    gauge = [GpuSample("gpu-1", "5", "u5", 48.0), GpuSample("gpu-2", "0", "u0", 0.0)]
    with_counts = snap(xid_last=gauge)
    assert rules(with_counts) == [] and verdict(with_counts).source == SOURCE_COUNT  # the count said nothing: nothing
    without = snap(counts=False, xid_last=gauge)
    v = verdict(without)
    assert v.source == SOURCE_LAST and rules(without) == [("xid-last-48", "reset")]
    assert "no XID counts on this node" in v.signals[0].detail
    assert verdict(without, "gpu-2").source == SOURCE_LAST and not verdict(without, "gpu-2").signals


def test_after_a_release_the_gauges_old_code_no_longer_counts() -> None:
    gauge = [GpuSample("gpu-1", "5", "u5", 48.0)]
    s = snap(counts=False, xid_last=gauge)
    s.nodes["gpu-1"] = NodeState("gpu-1", 8, 8, released_at=1.0, released_last_xids={"u5": 48})
    assert rules(s) == []
    s.xid_last = [GpuSample("gpu-1", "5", "u5", 79.0)]  # a new code since the release counts
    assert rules(s) == [("xid-last-79", "reboot")]


def test_a_node_without_exporter_series_has_no_xid_source() -> None:
    s = snap(counts=False, xid_last=[GpuSample("gpu-2", "0", "u0", 0.0)])
    assert verdict(s).source == SOURCE_NONE and verdict(s, "gpu-2").source == SOURCE_LAST


def test_row_remapping_failure_pending_and_growth() -> None:
    s = snap(remap_failures=[GpuSample("gpu-1", "1", "u1", 1)], remap_pending=[GpuSample("gpu-2", "6", "u6", 1)],
             growth=[GpuSample("gpu-2", "6", "u6", 3.0)])  # fmt: skip
    assert rules(s) == [("row-remap-failure", "rma")]
    # a pending remap quarantines for a reset, as DCGM rates DCGM_FR_PENDING_ROW_REMAP (DCGM_ERROR_RESET)
    assert rules(s, "gpu-2") == [("row-remap-pending", "reset"), ("uncorrectable-remapped-rows-growth", "alert")]
    v2 = verdict(s, "gpu-2")
    assert v2.quarantine and v2.action is not None and v2.action.id == "reset"
    assert "3 more row(s)" in v2.signals[1].detail and "pending a GPU reset" in v2.signals[1].detail
    assert [x.rule for x in state_signals(v2)] == ["row-remap-pending"]  # release waits for the reset


def _withdrawn(**kw: object) -> Snapshot:
    nodes = {"gpu-1": NodeState("gpu-1", 8, 7)}
    kw.setdefault("allocatable_max", {"gpu-1": 7})
    return Snapshot(now=0, nodes=nodes, xid_count_nodes={"gpu-1"}, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("xids", "last", "action", "words"),
    [
        ([94], 0, "alert", "after XID 94 (alert only) and restores it only when the plugin restarts"),
        ([], 92, "alert", "after XID 92 (alert only)"),  # the gauge explains a withdrawal older than the lookback
        ([63, 48], 0, "reset", "after XID 48, 63"),
        ([], 79, "reboot", "after XID 79"),
        ([], 0, "reset", "no XID explains it"),
        ([13], 0, "reset", "no XID explains it"),  # the device plugin ignores 13: it cannot explain a withdrawal
    ],
)
def test_allocatable_below_capacity_follows_the_xid_that_explains_it(
    xids: list[int], last: int, action: str, words: str
) -> None:
    s = _withdrawn(
        xids=[GpuSample("gpu-1", "1", "u1", 1, c) for c in xids], xid_last=[GpuSample("gpu-1", "1", "u1", last)]
    )
    [v] = evaluate(s)
    [sig] = [x for x in v.signals if x.rule == "gpu-allocatable-below-capacity"]
    assert sig.action == action and words in sig.detail
    assert sig in state_signals(v)  # release waits until the device plugin offers every GPU again


def test_allocatable_below_capacity_must_hold() -> None:
    [v] = evaluate(_withdrawn(allocatable_max={"gpu-1": 8}))  # 8 were allocatable within the window
    assert not v.signals and "not confirmed yet (8 were allocatable" in v.notes[0]
    [v] = evaluate(_withdrawn(allocatable_max={}))
    assert not v.signals and "no kube-state-metrics data" in v.notes[0]


def test_breaker_limit() -> None:
    assert Settings(max_nodes=2, max_percent=10).limit(100) == 2
    assert Settings(max_nodes=20, max_percent=10).limit(100) == 10
    assert Settings(max_nodes=2, max_percent=10).limit(3) == 1  # rounded up: a small cluster can quarantine one
    assert Settings(max_nodes=0, max_percent=10).limit(100) == 0


@pytest.mark.parametrize(
    ("value", "action", "name"),
    [(0, None, ""), (1, "reset", "GPU_RESET"), (2, "reboot", "NODE_REBOOT"), (3, "alert", "DRAIN_P2P"),
     (4, "reset", "DRAIN_AND_RESET"), (9, "alert", "unknown value 9")],
)  # fmt: skip
def test_the_drivers_recovery_action_is_acted_on_as_dcgm_rates_it(value: int, action: str | None, name: str) -> None:
    # DCGM 4.6 MonitorGpuRecoveryAction: GPU_RESET, NODE_REBOOT, DRAIN_AND_RESET fail the GPU, DRAIN_P2P warns
    s = snap(recovery=[GpuSample("gpu-1", "2", "u2", float(value)), GpuSample("gpu-2", "0", "u0", 0.0)])
    got = rules(s)
    assert got == ([] if action is None else [("gpu-recovery-action", action)])
    if action is not None:
        sig = verdict(s).signals[0]
        assert name in sig.detail and sig.gpu == "2"
        assert [x.rule for x in state_signals(verdict(s))] == ["gpu-recovery-action"]  # release waits for NONE
    assert not verdict(s, "gpu-2").signals


@pytest.mark.parametrize(
    ("code", "without", "with_recovery"),
    [(144, "reset", "alert"), (145, "reset", "alert"), (146, "reset", "alert"), (149, "reset", "alert"),
     (147, "alert", "alert"), (148, "alert", "alert"), (150, "reset", "reset")],
)  # fmt: skip
def test_nvlink5_xids_by_the_decode_sheet_and_the_drivers_verdict(code: int, without: str, with_recovery: str) -> None:
    # the catalogue's "Xid 144-150 Decode": 147/148 IGNORE on every row, 150 RESET_GPU on every row, 144-146/149
    # by subcode, which the metric does not carry: the driver's recovery action decides where the GPU reports it
    xid = [GpuSample("gpu-1", "1", "u1", 1.0, code)]
    assert rules(snap(xids=xid)) == [(f"xid-{code}", without)]
    reported = snap(xids=xid, recovery=[GpuSample("gpu-1", "1", "u1", 0.0)])
    assert rules(reported) == [(f"xid-{code}", with_recovery)]
    # a fatal subcode: the driver asks for a reset, and the node is quarantined for it
    fatal = snap(xids=xid, recovery=[GpuSample("gpu-1", "1", "u1", 1.0)])
    v = verdict(fatal)
    assert v.quarantine and v.action is not None and v.action.id == "reset"
    # another GPU's recovery series does not decide for this one
    other = snap(xids=xid, recovery=[GpuSample("gpu-1", "5", "u5", 0.0)])
    assert rules(other) == [(f"xid-{code}", without)]
