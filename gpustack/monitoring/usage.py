"""Cross-checks between the counters CSV, the alert rules and the dashboard. Pure.

- every metric the rules, panels and the health policy's queries read is exported by the CSV, or is
  one of the few non-DCGM metrics gpustack relies on (``up``, three kube-state-metrics series);
- every exported metric is read by a panel, a rule or a policy query, or is marked "kept deliberately";
- the series budget: how many series each GPU costs with this CSV.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpustack.monitoring.counters import CounterFile
from gpustack.monitoring.promql import metric_names

# Metrics the rules/dashboard may read that dcgm-exporter does not produce.
ALLOWED_NON_DCGM = frozenset(
    {"up", "kube_node_status_allocatable", "kube_node_status_capacity", "kube_pod_container_resource_requests",
     # GFD's nvidia.com/gpu.sharing-strategy node label (exported when a node time-slices: values.py)
     "kube_node_labels"}
)  # fmt: skip
SERIES_BUDGET_PER_GPU = 40


@dataclass(frozen=True)
class Usage:
    """Where each metric is read: metric -> sorted list of "rule X" / "panel Y" places."""

    places: dict[str, list[str]]

    @property
    def metrics(self) -> set[str]:
        return set(self.places)


def collect_usage(
    rule_exprs: Iterable[tuple[str, str]],
    panel_exprs: Iterable[tuple[str, str]],
    policy_exprs: Iterable[tuple[str, str]] = (),
) -> Usage:
    """Build :class:`Usage` from ``(alert, expr)``, ``(panel title, expr)`` and ``(policy query, expr)`` pairs."""
    places: dict[str, set[str]] = {}
    for kind, pairs in (("rule", rule_exprs), ("panel", panel_exprs), ("policy", policy_exprs)):
        for name, expr in pairs:
            for metric in metric_names(expr):
                places.setdefault(metric, set()).add(f"{kind} {name.removeprefix(kind + ' ')}")
    return Usage({m: sorted(p) for m, p in sorted(places.items())})


def unknown_metrics(usage: Usage, counters: CounterFile) -> dict[str, list[str]]:
    """Metrics read by rules/panels that neither the CSV exports nor ``ALLOWED_NON_DCGM`` allows."""
    exported = set(counters.metrics)
    return {m: p for m, p in usage.places.items() if m not in exported and m not in ALLOWED_NON_DCGM}


def unused_counters(usage: Usage, counters: CounterFile) -> list[str]:
    """Exported metrics no rule or panel reads (whether or not they are kept deliberately)."""
    return [m for m in counters.metrics if m not in usage.places]


def unjustified_counters(usage: Usage, counters: CounterFile) -> list[str]:
    """Unused exported metrics that are not listed as "kept deliberately"."""
    return [m for m in unused_counters(usage, counters) if m not in counters.kept_deliberately]


def unused_labels(label_fields: Iterable[str], usage_exprs: Iterable[str]) -> list[str]:
    """``label`` CSV records (e.g. DCGM_FI_DRIVER_VERSION) that no expression mentions."""
    text = "\n".join(usage_exprs)
    return [name for name in label_fields if name not in text]


@dataclass(frozen=True)
class SeriesEstimate:
    """Series one GPU costs: one per exported metric (XID included: one series carrying the last code)."""

    per_metric: dict[str, int]

    @property
    def per_gpu(self) -> int:
        return sum(self.per_metric.values())

    def within_budget(self, budget: int = SERIES_BUDGET_PER_GPU) -> bool:
        return self.per_gpu <= budget


def estimate_series(counters: CounterFile, pods_per_gpu: int = 1) -> SeriesEstimate:
    """Series per GPU for an unshared (``pods_per_gpu=1``) or time-sliced GPU.

    ``label`` records add a label, not a series. Each other record is one series per GPU; the XID
    series changes its ``err_code``/``err_msg`` labels with the code, but only one exists at a time.
    A GPU shared by N pods (time-slicing) gets one series per pod for every metric.
    """
    return SeriesEstimate({m: pods_per_gpu for m in counters.metrics})
