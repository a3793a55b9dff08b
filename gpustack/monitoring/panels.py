"""What "No data" means for each panel of gpustack's dashboards (``dashboards/empty-panels.yaml``). Pure.

The table sits beside the dashboards it describes and is keyed by dashboard file and panel title. R04
(:mod:`gpustack.diagnose.checks_grafana`) accepts an empty panel only for what the panel means: a list of
problems, idle GPUs' activity, the per-pod and allocation panels while no pod holds a GPU, and the profiling
panels on GPUs DCGM cannot profile.
"""

from __future__ import annotations

from functools import cache
from typing import Literal, cast

import yaml

from gpustack.monitoring.dashboard import (
    CAPACITY_DASHBOARD_FILE,
    DASHBOARD_FILE,
    data_panels,
    load_capacity_dashboard,
    load_dashboard,
    panel_queries,
)
from gpustack.monitoring.promql import metric_names
from gpustack.paths import resource_file

PANELS_FILE = "empty-panels.yaml"
Meaning = Literal["data", "gpu-pods", "profiling", "activity", "problems", "mig", "whole-gpu"]
MEANINGS: tuple[Meaning, ...] = ("data", "gpu-pods", "profiling", "activity", "problems", "mig", "whole-gpu")
#: meanings whose "No data" is healthy whatever the cluster runs
ALWAYS_MAY_BE_EMPTY: frozenset[Meaning] = frozenset({"activity", "problems"})
DASHBOARD_FILES = (DASHBOARD_FILE, CAPACITY_DASHBOARD_FILE)


@cache
def empty_meanings() -> dict[str, dict[str, Meaning]]:
    """Dashboard file -> panel title -> what its "No data" means (:data:`MEANINGS`)."""
    path = resource_file("dashboards", PANELS_FILE)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a mapping of dashboard file -> panel title -> meaning")
    out: dict[str, dict[str, Meaning]] = {}
    for dashboard, panels in data.items():
        if not isinstance(panels, dict):
            raise ValueError(f"{path}: {dashboard}: not a mapping of panel title -> meaning")
        bad = {str(t): v for t, v in panels.items() if v not in MEANINGS}
        if bad:
            raise ValueError(f"{path}: {dashboard}: unknown meaning {bad} (use one of {', '.join(MEANINGS)})")
        out[str(dashboard)] = {str(t): cast(Meaning, v) for t, v in panels.items()}
    return out


def titles(dashboard: str, meanings: frozenset[Meaning] | set[Meaning]) -> set[str]:
    """Titles of ``dashboard``'s panels whose "No data" means one of ``meanings``."""
    return {title for title, meaning in empty_meanings().get(dashboard, {}).items() if meaning in meanings}


@cache
def panel_fields() -> dict[str, frozenset[str]]:
    """The DCGM dashboard's panel title -> the DCGM fields (``DCGM_*`` metric names) its queries read: whether a panel
    can have data on a GPU model is whether the model reports one of them (:mod:`gpustack.monitoring.gpu_models`)."""
    out: dict[str, set[str]] = {}
    for title, expr in panel_queries(load_dashboard()):
        out.setdefault(title, set()).update(n for n in metric_names(expr) if n.startswith("DCGM_"))
    return {title: frozenset(fields) for title, fields in out.items()}


def may_be_empty(
    dashboard: str, *, gpu_pods: bool, profiling: bool = True, mig: bool = False, whole_gpus: bool = True
) -> set[str]:
    """Titles of ``dashboard``'s panels whose "No data" is healthy on a cluster where a pod holds a GPU
    (``gpu_pods``) or none does, whose GPUs DCGM can profile (``profiling``) or not, where some node has MIG on
    (``mig``) and some GPU node has not (``whole_gpus``)."""
    meanings = set(ALWAYS_MAY_BE_EMPTY)
    if not gpu_pods:
        meanings.add("gpu-pods")
    if not profiling:
        meanings.add("profiling")
    if not mig:
        meanings.add("mig")
    if not whole_gpus:
        meanings.add("whole-gpu")
    return titles(dashboard, meanings)


def unclassified() -> list[str]:
    """Panels of the shipped dashboards without an entry, and entries without a panel ([] when they agree)."""
    table = empty_meanings()
    out: list[str] = []
    for name, load in ((DASHBOARD_FILE, load_dashboard), (CAPACITY_DASHBOARD_FILE, load_capacity_dashboard)):
        titles = [str(p.get("title", "")) for p in data_panels(load())]
        listed = table.get(name, {})
        out += [f"{name}: panel {t!r} has no entry in {PANELS_FILE}" for t in titles if t not in listed]
        out += [f"{name}: {PANELS_FILE} lists {t!r}, which is not a panel" for t in listed if t not in titles]
        out += [f"{name}: two panels are titled {t!r}" for t in sorted(set(titles)) if titles.count(t) > 1]
    out += [
        f"{PANELS_FILE} lists {name}, which gpustack does not ship" for name in table if name not in DASHBOARD_FILES
    ]
    return out
