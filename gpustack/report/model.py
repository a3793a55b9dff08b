"""What a report holds. Plain data with units in the names: hours are GPU-hours, ``*_gpus`` GPU counts,
``activity`` a 0-1 ratio, times Unix seconds (UTC), prices and costs USD."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpustack.report.forecast import Forecast
from gpustack.report.inputs import Prices


@dataclass
class GroupRow:
    """GPU-hours of one group (a namespace, team, node or GPU model) over the window."""

    key: str
    allocated_h: float = 0.0
    used_h: float = 0.0
    idle_h: float = 0.0
    measured_h: float = 0.0  # allocated GPU-hours DCGM reported activity for (used and idle cover these)
    cost: float | None = None  # USD; None when no --price applies to any of its GPU-hours
    unpriced_h: float = 0.0  # allocated GPU-hours no --price covers

    @property
    def activity_pct(self) -> float | None:
        """Average activity of the GPU-hours DCGM measured (None: none measured): unmeasured hours are not
        taken for idle ones."""
        return 100.0 * self.used_h / self.measured_h if self.measured_h > 0 else None


@dataclass(frozen=True)
class IdleGpu:
    """A GPU a pod held without using it (< 1 % activity) for ``idle_h`` of the ``held_h`` DCGM measured."""

    namespace: str
    pod: str
    node: str
    gpu: str
    model: str
    idle_h: float
    held_h: float
    running_now: bool


@dataclass(frozen=True)
class NodeCapacity:
    """GPUs of one node at the end of the window: allocatable = allocated + starting + free."""

    node: str
    model: str
    allocatable: float
    allocated: float
    starting: float

    @property
    def free(self) -> float:
        return max(0.0, self.allocatable - self.allocated - self.starting)


@dataclass(frozen=True)
class PendingPod:
    namespace: str
    pod: str
    gpus: float


@dataclass(frozen=True)
class TrendPoint:
    """Average GPUs allocated and allocatable over the day ending at ``end``."""

    end: float
    allocated: float
    allocatable: float | None


@dataclass
class Report:
    start: float
    end: float
    source: str  # "recording rules" | "raw expressions"
    by: str
    team_label: str
    prices: Prices
    groups: list[GroupRow] = field(default_factory=list)
    total: GroupRow = field(default_factory=lambda: GroupRow("total"))
    capacity_h: float = 0.0  # allocatable GPU-hours over the window
    pending_h: float = 0.0  # GPU-hours pods waited for a node
    percentiles: dict[str, float | None] = field(default_factory=dict)  # "p50" -> activity 0-1
    idle: list[IdleGpu] = field(default_factory=list)
    nodes: list[NodeCapacity] = field(default_factory=list)
    pending: list[PendingPod] = field(default_factory=list)
    trend: list[TrendPoint] = field(default_factory=list)
    forecast: Forecast | None = None
    data_start: float | None = None  # the first GPU data in the window (None: none at all)
    notes: list[str] = field(default_factory=list)
    queries: int = 0

    @property
    def allocatable_now(self) -> float:
        return sum(n.allocatable for n in self.nodes)

    @property
    def allocated_now(self) -> float:
        return sum(n.allocated for n in self.nodes)

    @property
    def starting_now(self) -> float:
        return sum(n.starting for n in self.nodes)

    @property
    def free_now(self) -> float:
        return sum(n.free for n in self.nodes)

    @property
    def pending_now(self) -> float:
        return sum(p.gpus for p in self.pending)
