"""The GPU fault-quarantine policy: a versioned table of fatal signals, evaluated on a snapshot. Pure.

A fatal signal on any GPU of a node quarantines the node (cordon + taint, see :mod:`gpustack.health.actions`).
The table is data: docs/operations.md prints it and a test keeps the two in step. Changing what counts as
fatal is a new :data:`POLICY_VERSION`; each quarantine records the version it was made under.

Where each signal comes from (all instant queries, through the API server's service proxy to Prometheus,
plus the Node objects):

- XIDs: ``DCGM_EXP_XID_ERRORS_COUNT`` (dcgm-exporter counts every XID per code over a sliding window,
  5 minutes by default, label ``xid``), maximum over the policy's lookback. Not ``DCGM_FI_DEV_XID_ERRORS``:
  that gauge holds only the *last* XID of a GPU, so an application XID 13 right after an XID 79 hides the
  79, and it keeps showing a fatal code after the GPU was reset, until the exporter restarts.
- ``DCGM_FI_DEV_ROW_REMAP_FAILURE``: the current value (a state: the GPU has no spare rows left).
- ``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS``: its increase over the growth window.
- allocatable below capacity: the Node's ``status.allocatable`` vs ``status.capacity`` of ``nvidia.com/gpu``
  now (the device plugin withdraws a GPU it marked unhealthy, e.g. after XID 48/79/94/95/119/120), and
  kube-state-metrics' ``kube_node_status_allocatable`` below that capacity during the whole hold window, so
  a device-plugin restart (allocatable drops briefly) does not quarantine a node.

After a release, event signals (XIDs, row growth) only count from the release on (and XIDs from the
release plus the exporter's XID window, whose counts may still include the old events): a released node is
not quarantined again for the fault it was released from. State signals (row-remap failure, allocatable
below capacity) count whenever they hold: if they still hold, the GPU was not fixed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

POLICY_VERSION = "1"

#: XID codes fatal on their own (NVIDIA's XID catalogue: the GPU needs a reset or replacement)
FATAL_XIDS: dict[int, str] = {
    48: "double-bit ECC error",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    119: "GSP RPC timeout",
    120: "GSP error",
}
#: fatal only together with a row-remap failure on the same GPU (contained / uncontained ECC error
#: whose row could not be remapped away)
REMAP_XIDS: dict[int, str] = {94: "contained ECC error", 95: "uncontained ECC error"}


@dataclass(frozen=True)
class Rule:
    """One row of the policy table."""

    id: str
    signal: str
    source: str
    condition: str
    why: str


RULES: tuple[Rule, ...] = (
    *(
        Rule(f"xid-{code}", f"XID {code} ({text})", "Prometheus: DCGM_EXP_XID_ERRORS_COUNT{xid}",
             f"any XID {code} on a GPU within the lookback", "the GPU must be reset or replaced before it runs work again")
        for code, text in FATAL_XIDS.items()
    ),
    Rule("xid-94-95-row-remap-failure", "XID 94 or 95 (contained / uncontained ECC error) with a row-remap failure",
         "Prometheus: DCGM_EXP_XID_ERRORS_COUNT{xid}, DCGM_FI_DEV_ROW_REMAP_FAILURE",
         "XID 94 or 95 within the lookback on a GPU whose ROW_REMAP_FAILURE is 1",
         "the faulty row could not be remapped: the error will come back"),
    Rule("row-remap-failure", "row remapping failed", "Prometheus: DCGM_FI_DEV_ROW_REMAP_FAILURE",
         "DCGM_FI_DEV_ROW_REMAP_FAILURE = 1 now", "no spare rows left: the GPU needs replacing"),
    Rule("uncorrectable-remapped-rows-growth", "new rows remapped after uncorrectable errors",
         "Prometheus: DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "increase over the growth window > 0",
         "uncorrectable memory errors hit running work; the remap needs a GPU reset to apply"),
    Rule("gpu-allocatable-below-capacity", "fewer GPUs allocatable than installed",
         "Kubernetes API: Node status; Prometheus: kube_node_status_allocatable",
         "allocatable nvidia.com/gpu < capacity now and during the whole hold window",
         "the device plugin withdrew a GPU it found unhealthy"),
)  # fmt: skip
RULE_IDS = tuple(r.id for r in RULES)
STATE_RULES = frozenset({"row-remap-failure", "gpu-allocatable-below-capacity"})


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


@dataclass
class Snapshot:
    """Everything one evaluation reads. ``xids``/``growth`` are already limited to each node's window."""

    now: float
    nodes: dict[str, NodeState]
    xids: list[GpuSample] = field(default_factory=list)
    remap_failures: list[GpuSample] = field(default_factory=list)
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

    def describe(self) -> str:
        where = f"GPU {self.gpu}" + (f" ({self.uuid})" if self.uuid else "") if self.gpu else "node"
        return f"{self.rule} on {where}: {self.detail}"

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "gpu": self.gpu, "uuid": self.uuid, "detail": self.detail}


@dataclass(frozen=True)
class Verdict:
    node: str
    signals: tuple[Signal, ...]
    state: NodeState
    notes: tuple[str, ...] = ()  # e.g. a signal seen but not confirmed

    @property
    def fatal(self) -> bool:
        return bool(self.signals)


def _by_node(samples: Iterable[GpuSample]) -> dict[str, list[GpuSample]]:
    out: dict[str, list[GpuSample]] = {}
    for s in samples:
        out.setdefault(s.node, []).append(s)
    return out


def evaluate_node(snap: Snapshot, node: NodeState) -> Verdict:
    """The fatal signals on one node (see the module docstring)."""
    signals: list[Signal] = []
    notes: list[str] = []
    failed_uuids = {s.uuid for s in snap.remap_failures if s.node == node.name and s.value > 0}
    for s in sorted(_by_node(snap.xids).get(node.name, []), key=lambda s: (s.gpu, s.xid or 0)):
        if s.value <= 0 or s.xid is None:
            continue
        if s.xid in FATAL_XIDS:
            signals.append(Signal(f"xid-{s.xid}", s.gpu, s.uuid, f"XID {s.xid} ({FATAL_XIDS[s.xid]}) x{s.value:.0f}"))
        elif s.xid in REMAP_XIDS and s.uuid in failed_uuids:
            signals.append(Signal("xid-94-95-row-remap-failure", s.gpu, s.uuid,
                                  f"XID {s.xid} ({REMAP_XIDS[s.xid]}) and row remapping failed"))  # fmt: skip
        elif s.xid in REMAP_XIDS:
            notes.append(f"XID {s.xid} on GPU {s.gpu} without a row-remap failure: not fatal (reset the GPU when idle)")
    for s in sorted(_by_node(snap.remap_failures).get(node.name, []), key=lambda s: s.gpu):
        if s.value > 0:
            signals.append(Signal("row-remap-failure", s.gpu, s.uuid, "DCGM_FI_DEV_ROW_REMAP_FAILURE = 1"))
    for s in sorted(_by_node(snap.growth).get(node.name, []), key=lambda s: s.gpu):
        if s.value > 0:
            signals.append(Signal("uncorrectable-remapped-rows-growth", s.gpu, s.uuid,
                                  f"{s.value:.0f} more row(s) remapped after uncorrectable errors"))  # fmt: skip
    if node.capacity > 0 and node.allocatable < node.capacity:
        held = snap.allocatable_max.get(node.name)
        if held is not None and held < node.capacity:
            signals.append(Signal("gpu-allocatable-below-capacity", "", "",
                                  f"allocatable {node.allocatable} < capacity {node.capacity} (at most {held:.0f} during the hold window)"))  # fmt: skip
        else:
            why = ("no kube-state-metrics data for it" if held is None
                   else f"{held:.0f} were allocatable within the hold window")  # fmt: skip
            notes.append(f"allocatable {node.allocatable} < capacity {node.capacity} not confirmed yet ({why})")
    if node.name in snap.xid_paused:
        notes.append(snap.xid_paused[node.name])
    return Verdict(node.name, tuple(signals), node, tuple(notes))


def evaluate(snap: Snapshot) -> list[Verdict]:
    """A verdict for every GPU node, by name."""
    return [evaluate_node(snap, snap.nodes[n]) for n in sorted(snap.nodes)]


def state_signals(verdict: Verdict) -> list[Signal]:
    """The signals that describe the GPU's state now (release is refused while one holds)."""
    return [s for s in verdict.signals if s.rule in STATE_RULES]
