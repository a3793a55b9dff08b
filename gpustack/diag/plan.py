"""``gpustack diag --dry-run``: which nodes a run would test, which GPUs each Job would take, and for how long.
Pure (the node and pod lists are read by the caller); the selection is the run's own
(:func:`gpustack.diag.runner.select_nodes`), so the plan cannot differ from what a run would do."""

from __future__ import annotations

from dataclasses import dataclass

from gpustack.diag.job import FINISH_MARGIN, START_ALLOWANCE, DiagSpec
from gpustack.diag.runner import Selection

#: how long each level usually takes on a healthy node (the --level help says the same)
TYPICAL = {1: "seconds", 2: "about 2 min", 3: "15-30 min", 4: "hours"}
HEALTH_TYPICAL = "about 70 s"


@dataclass(frozen=True)
class PlanRow:
    node: str
    gpus: str  # what the Job would take ("8 (all allocatable)") or "-" when skipped
    runs: str
    typical: str
    at_most: str
    note: str


def _duration(seconds: int) -> str:
    return f"{seconds // 3600} h {seconds % 3600 // 60} min" if seconds >= 3600 else f"{seconds // 60} min"


def plan_rows(selection: Selection, spec: DiagSpec) -> list[PlanRow]:
    """One row per node the run would consider, in name order."""
    typical = HEALTH_TYPICAL if spec.mode == "health" else TYPICAL[spec.level]
    limit = (f"{_duration(spec.active_deadline)} (Job deadline: {START_ALLOWANCE} s start-up + dcgmi "
             f"--timeout {spec.dcgmi_timeout} s + {FINISH_MARGIN} s)")  # fmt: skip
    rows = []
    for node in sorted(set(selection.run) | set(selection.skipped)):
        busy = selection.busy.get(node, [])
        if node in selection.skipped:
            rows.append(PlanRow(node, "-", "nothing (skipped)", "-", "-", selection.skipped[node]))
            continue
        note = (f"waits for the GPU pods on it ({', '.join(busy[:3])}{' ...' if len(busy) > 3 else ''}); "
                "nothing else is scheduled on its GPUs meanwhile" if busy
                else "nothing else is scheduled on its GPUs while the Job runs")  # fmt: skip
        rows.append(PlanRow(node, f"{selection.run[node]} (all allocatable)", spec.describe(), typical, limit, note))
    return rows


def summary(rows: list[PlanRow], spec: DiagSpec) -> str:
    ran = [r for r in rows if r.gpus != "-"]
    gpus = sum(int(r.gpus.split()[0]) for r in ran)
    return (f"{spec.describe()} would take {gpus} GPU(s) on {len(ran)} node(s) at once (one Job per node, in "
            f"parallel), usually for {ran[0].typical if ran else '-'}, at most {_duration(spec.active_deadline)}; "
            f"{len(rows) - len(ran)} node(s) skipped. Nothing was created.")  # fmt: skip
