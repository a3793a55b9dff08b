"""The GPU fault-quarantine policy evaluated on a snapshot. Pure.

Each signal carries gpustack's action for it, from the policy data (``templates/health/xid-policy.yaml``, see
:mod:`gpustack.health.xids`): ``alert`` (reported, never quarantined), ``reset`` (quarantine until a GPU
reset and a passing diag), ``reboot`` (until the node rebooted), ``rma`` (drain and RMA / contact support).
A node takes the most severe action of its signals and is quarantined when that action quarantines.

Where each signal comes from (instant queries through the API server's service proxy to Prometheus, plus
the Node objects):

- XIDs: ``DCGM_EXP_XID_ERRORS_COUNT`` (dcgm-exporter counts every XID per code over a sliding window,
  label ``xid``), maximum over the lookback. On a node without that series (an older exporter, or a
  counters list without it) the last-XID gauge ``DCGM_FI_DEV_XID_ERRORS`` stands in: the code it shows now
  (it holds the *last* XID only, so a later XID hides an earlier one), and after a release only a code that
  differs from the one it showed at the release. A node with neither has no XID source: a finding, never a
  pass (:attr:`Verdict.source`).
- ``DCGM_FI_DEV_ROW_REMAP_FAILURE`` (now), ``DCGM_FI_DEV_ROW_REMAP_PENDING`` (now) and the increase of
  ``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS`` over the growth window. The count includes pending remaps
  (InfoROM entries), so growth is a recorded remap, not a fault. A failed remap quarantines (``rma``), and so
  does a pending one (``reset``: DCGM rates DCGM_FR_PENDING_ROW_REMAP "drain and reset the GPU").
- the driver's recovery verdict per GPU, ``DCGM_FI_DEV_GPU_RECOVERY_ACTION`` (now; exported under the name
  dcgm-exporter 4.5.x resolves, ``DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION``): each value's action is policy data
  (GPU_RESET and DRAIN_AND_RESET reset, NODE_REBOOT reboot, DRAIN_P2P alert, as DCGM 4.6's health watch
  fails or warns). Where a GPU reports it, an XID graded by a subcode gpustack cannot read (144-146, 149)
  takes its decision's ``recovery_action`` (alert): the driver's verdict on that subcode decides.
- allocatable below capacity: the Node's ``status.allocatable`` vs ``status.capacity`` of ``nvidia.com/gpu``
  now, and kube-state-metrics' ``kube_node_status_allocatable`` below that capacity during the whole hold
  window. The device plugin withdraws a GPU on most XIDs (alert-only 63, 92, 94 too) and never restores it
  until it restarts, so the XIDs seen on the node decide the action: the most severe one's, ``alert`` when all
  are alert-only (restart the device plugin after checking the GPU), ``reset`` when none explains it.

After a release, XID counts and row growth only count from the release on (XID counts from the release plus
the exporter's window, which may still include the old events). State signals (row-remap failure or pending,
allocatable below capacity) count whenever they hold: if they still hold, the GPU was not fixed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpustack.health.xids import Action, XidPolicy, xid_policy

POLICY_VERSION = xid_policy().version
#: signals that describe the GPU now: release is refused while one holds
STATE_RULES = frozenset({"row-remap-failure", "row-remap-pending", "gpu-allocatable-below-capacity",
                         "gpu-recovery-action"})  # fmt: skip
#: Verdict.source values
SOURCE_COUNT, SOURCE_LAST, SOURCE_NONE, SOURCE_UNKNOWN = "count", "last-xid", "none", "unknown"


@dataclass(frozen=True)
class Settings:
    """The policy's windows and the circuit breaker's limits (config ``remediation:``, or flags)."""

    max_nodes: int = 2  # at most this many new quarantines per window ...
    max_percent: float = 10.0  # ... and at most this share of the GPU nodes (rounded up)
    window: int = 3600  # the breaker's window, seconds
    lookback: int = 900  # XIDs: how far back an XID still counts, seconds
    growth_window: int = 3600  # remapped-rows growth, seconds
    hold: int = 600  # allocatable below capacity must hold this long, seconds

    def limit(self, gpu_nodes: int) -> int:
        """New quarantines allowed per window: the stricter of N nodes and P% of the GPU nodes (rounded up,
        so a small cluster can still quarantine one node)."""
        return max(0, min(self.max_nodes, math.ceil(self.max_percent / 100 * gpu_nodes)))


@dataclass(frozen=True)
class GpuSample:
    """One Prometheus series value for a GPU (``xid`` set for XID counts)."""

    node: str
    gpu: str
    uuid: str
    value: float
    xid: int | None = None


@dataclass(frozen=True)
class NodeState:
    """What the policy reads of a Node object."""

    name: str
    capacity: int
    allocatable: int
    unschedulable: bool = False
    quarantined: bool = False  # carries gpustack's quarantine label
    quarantined_at: str = ""
    released_at: float | None = None  # epoch seconds of the last release, if any
    #: GPU UUID -> the last-XID gauge's code when the node was released (such a code no longer counts)
    released_last_xids: dict[str, int] = field(default_factory=dict)
    boot_id: str = ""


@dataclass
class Snapshot:
    """Everything one evaluation reads. ``xids``/``growth`` are already limited to each node's window."""

    now: float
    nodes: dict[str, NodeState]
    xids: list[GpuSample] = field(default_factory=list)
    #: DCGM_FI_DEV_XID_ERRORS per GPU (value: the last XID, 0 none)
    xid_last: list[GpuSample] = field(default_factory=list)
    #: nodes with DCGM_EXP_XID_ERRORS_COUNT series (None: unknown, Prometheus unread)
    xid_count_nodes: set[str] | None = None
    remap_failures: list[GpuSample] = field(default_factory=list)
    remap_pending: list[GpuSample] = field(default_factory=list)
    #: the driver's recovery action per GPU, 0 (NONE) included: a GPU listed here reports it
    recovery: list[GpuSample] = field(default_factory=list)
    growth: list[GpuSample] = field(default_factory=list)
    #: node -> the most GPUs kube-state-metrics saw allocatable during the hold window (absent: no data)
    allocatable_max: dict[str, float] = field(default_factory=dict)
    #: node -> why XIDs were not evaluated for it (just released: within the exporter's XID window)
    xid_paused: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # source -> why it could not be read


@dataclass(frozen=True)
class Signal:
    rule: str
    gpu: str  # "" for a node-level signal
    uuid: str
    detail: str
    action: str = "reset"  # gpustack's action (xids.ACTION_IDS)

    def describe(self) -> str:
        where = f"GPU {self.gpu}" + (f" ({self.uuid})" if self.uuid else "") if self.gpu else "node"
        return f"{self.rule} on {where}: {self.detail}"

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "gpu": self.gpu, "uuid": self.uuid, "detail": self.detail, "action": self.action}


@dataclass(frozen=True)
class Verdict:
    node: str
    signals: tuple[Signal, ...]
    state: NodeState
    notes: tuple[str, ...] = ()  # e.g. a signal seen but not confirmed
    source: str = SOURCE_COUNT  # where its XIDs came from (SOURCE_*)

    @property
    def action(self) -> Action | None:
        """The most severe action of its signals (None: no signal)."""
        actions = xid_policy().actions
        return max((actions[s.action] for s in self.signals), key=lambda a: a.rank, default=None)

    @property
    def quarantine(self) -> bool:
        return self.action is not None and self.action.quarantine

    @property
    def quarantine_signals(self) -> tuple[Signal, ...]:
        actions = xid_policy().actions
        return tuple(s for s in self.signals if actions[s.action].quarantine)

    @property
    def alerts(self) -> tuple[Signal, ...]:
        actions = xid_policy().actions
        return tuple(s for s in self.signals if not actions[s.action].quarantine)


def _on(samples: Iterable[GpuSample], node: str) -> list[GpuSample]:
    return sorted((s for s in samples if s.node == node), key=lambda s: (s.gpu, s.xid or 0))


def _xid_text(pol: XidPolicy, code: int) -> str:
    row = pol.row(code)
    return f"XID {code} ({row.description or row.mnemonic})"


def _xid_action(snap: Snapshot, node: str, gpu: str, code: int, pol: XidPolicy) -> tuple[str, str]:
    """(action, a note) of XID ``code`` on a GPU: its row's, or its ``recovery_action`` where the GPU reports the
    driver's recovery action (that verdict then decides, through the gpu-recovery-action rule)."""
    row = pol.row(code)
    if row.recovery and any(s.gpu == gpu for s in _on(snap.recovery, node)):
        return row.recovery, "; its subcode is not in the metric: the driver's recovery action for this GPU decides"
    return row.action, ""


def _xid_signals(snap: Snapshot, node: NodeState, pol: XidPolicy) -> tuple[list[Signal], str, list[int]]:
    """(XID signals, the XID source, every code seen on the node, for the allocatable rule)."""
    signals, seen = [], []
    for s in _on(snap.xids, node.name):
        if s.value > 0 and s.xid is not None:
            seen.append(s.xid)
            action, note = _xid_action(snap, node.name, s.gpu, s.xid, pol)
            signals.append(Signal(f"xid-{s.xid}", s.gpu, s.uuid, f"{_xid_text(pol, s.xid)} x{s.value:.0f}{note}",
                                  action))  # fmt: skip
    last = [s for s in _on(snap.xid_last, node.name) if s.value > 0]
    seen += [int(s.value) for s in last]
    if snap.xid_count_nodes is None:
        return signals, SOURCE_UNKNOWN, seen
    if node.name in snap.xid_count_nodes:
        return signals, SOURCE_COUNT, seen
    if not _on(snap.xid_last, node.name):
        return signals, SOURCE_NONE, seen
    for s in last:
        code = int(s.value)
        if node.released_last_xids.get(s.uuid) == code:
            continue  # shown since before the release it was released from
        action, note = _xid_action(snap, node.name, s.gpu, code, pol)
        signals.append(Signal(f"xid-last-{code}", s.gpu, s.uuid,
                              f"last {_xid_text(pol, code)} (DCGM_FI_DEV_XID_ERRORS; no XID counts on this node){note}",
                              action))  # fmt: skip
    return signals, SOURCE_LAST, seen


def _allocatable(snap: Snapshot, node: NodeState, pol: XidPolicy, seen: list[int]) -> Signal | str | None:
    """The allocatable rule: a signal, a note (not confirmed yet), or None."""
    if not (node.capacity > 0 and node.allocatable < node.capacity):
        return None
    held = snap.allocatable_max.get(node.name)
    if held is None or held >= node.capacity:
        why = (
            "no kube-state-metrics data for it"
            if held is None
            else f"{held:.0f} were allocatable within the hold window"
        )
        return f"allocatable {node.allocatable} < capacity {node.capacity} not confirmed yet ({why})"
    what = f"allocatable {node.allocatable} < capacity {node.capacity} (at most {held:.0f} during the hold window)"
    codes = sorted({c for c in seen if c not in pol.device_plugin_ignores})
    if not codes:
        return Signal("gpu-allocatable-below-capacity", "", "", f"{what}; no XID explains it: the device plugin "
                      "found a GPU unhealthy", "reset")  # fmt: skip
    worst = max((pol.action_of(c) for c in codes), key=lambda a: a.rank)
    listed = ", ".join(str(c) for c in codes)
    if worst.quarantine:
        return Signal("gpu-allocatable-below-capacity", "", "", f"{what}, after XID {listed}", worst.id)
    return Signal("gpu-allocatable-below-capacity", "", "", f"{what}: the device plugin withdrew it after XID "
                  f"{listed} (alert only) and restores it only when the plugin restarts", "alert")  # fmt: skip


def evaluate_node(snap: Snapshot, node: NodeState) -> Verdict:
    """The signals on one node (see the module docstring)."""
    pol = xid_policy()
    notes: list[str] = []
    signals, source, seen = _xid_signals(snap, node, pol)
    remap = pol.signal("row-remap-failure").action
    for s in _on(snap.remap_failures, node.name):
        if s.value > 0:
            signals.append(Signal("row-remap-failure", s.gpu, s.uuid, "DCGM_FI_DEV_ROW_REMAP_FAILURE = 1", remap))
    pending = {s.uuid for s in _on(snap.remap_pending, node.name) if s.value > 0}
    for s in _on(snap.remap_pending, node.name):
        if s.value > 0:
            signals.append(Signal("row-remap-pending", s.gpu, s.uuid, "a row remap waits for a GPU reset "
                                  "(DCGM_FI_DEV_ROW_REMAP_PENDING = 1)", pol.signal("row-remap-pending").action))  # fmt: skip
    for s in _on(snap.recovery, node.name):
        if s.value != 0:
            name, action, why = pol.recovery_action(int(s.value))
            signals.append(Signal("gpu-recovery-action", s.gpu, s.uuid, f"the driver's recovery action is {name} "
                                  f"(DCGM_FI_DEV_GPU_RECOVERY_ACTION = {s.value:.0f}): {why}", action))  # fmt: skip
    growth = pol.signal("uncorrectable-remapped-rows-growth").action
    for s in _on(snap.growth, node.name):
        if s.value > 0:
            state = "pending a GPU reset" if s.uuid in pending else "applied or not yet reported pending"
            signals.append(Signal("uncorrectable-remapped-rows-growth", s.gpu, s.uuid,
                                  f"{s.value:.0f} more row(s) remapped after uncorrectable errors ({state})", growth))  # fmt: skip
    found = _allocatable(snap, node, pol, seen)
    if isinstance(found, Signal):
        signals.append(found)
    elif found:
        notes.append(found)
    if node.name in snap.xid_paused:
        notes.append(snap.xid_paused[node.name])
    return Verdict(node.name, tuple(signals), node, tuple(notes), source)


def evaluate(snap: Snapshot) -> list[Verdict]:
    """A verdict for every GPU node, by name."""
    return [evaluate_node(snap, snap.nodes[n]) for n in sorted(snap.nodes)]


def state_signals(verdict: Verdict) -> list[Signal]:
    """The signals that describe the GPU's state now (release is refused while one holds)."""
    return [s for s in verdict.signals if s.rule in STATE_RULES]
