"""A 10-day usage history with dcgm-exporter gaps and its known answer for unmeasured GPU-hours (issue 32, item 10).

Two 4-GPU nodes (an H100 with profiling metrics, an A100 read through GPU_UTIL), every GPU running a sequence of
1-GPU pods (2-48 h, gaps between them); each node's exporter is down a dozen times (20 minutes to 3 hours, no DCGM
sample and, as after a backfill or a Prometheus restart, no staleness marker). Allocated minutes: the pod's Running
samples; measured: those at which its node's exporter reported; unmeasured = allocated - measured.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .history import DAY, HOUR, MINUTE, History, Node, Pod, TeamLabel, _grid
from .history_scenarios import A100, H100


@dataclass(frozen=True)
class GapAnswer:
    allocated_h: float
    measured_h: float

    @property
    def unmeasured_h(self) -> float:
        return self.allocated_h - self.measured_h


def gap_history(end: int, days: int = 10, seed: int = 32) -> History:
    rng = random.Random(seed)
    start = end - days * DAY + MINUTE
    nodes = []
    for i, model in enumerate((H100, A100)):
        gaps: list[tuple[int, int]] = []
        t = start + rng.randrange(2, 12) * HOUR
        while t < end - 4 * HOUR and len(gaps) < 12:
            length = rng.randrange(20, 181) * MINUTE
            gaps.append((t, t + length))
            t += length + rng.randrange(6, 24) * HOUR
        nodes.append(Node(f"gpu-{i}", model, 4, profiling=i == 0, gaps=tuple(gaps)))
    pods: list[Pod] = []
    for node in nodes:
        for gpu in range(node.gpus):
            t = start + rng.randrange(0, 6) * HOUR
            while t < end:
                pod_end = min(t + rng.randrange(2, 49) * HOUR, end + MINUTE)
                activity = rng.choice([0.0, 0.3, 0.6, 0.9])
                pods.append(Pod("team-a" if gpu % 2 else "team-b", f"job-{len(pods)}", node.name, (gpu,), t, pod_end,
                                (activity,)))  # fmt: skip
                t = pod_end + rng.randrange(0, 7) * HOUR
    return History(start, end, nodes, pods, [TeamLabel("team-a", "a", start), TeamLabel("team-b", "b", start)])


def gap_answer(history: History, window_start: int, closed_ranges: bool = False) -> GapAnswer:
    """GPU-hours allocated and measured in (window_start, history.end] (the report's left-open window).

    A minute is measured when the activity rule's ``avg_over_time(...[1m])`` finds a DCGM sample of the pod: the one
    at that minute; on Prometheus 2 (``closed_ranges``: both ends of a range included) also the minute before, so a
    pod counts one measured minute after its exporter went down or it ended."""
    nodes = {n.name: n for n in history.nodes}
    allocated = measured = 0
    last = history.end + MINUTE
    for pod in history.pods:
        node = nodes[pod.node]

        def sampled(t: int, pod: Pod = pod, node: Node = node) -> bool:
            return pod.start <= t < min(pod.end, last) and node.up(t)

        allocated += pod.count * len(_grid(max(pod.start, window_start + 1), min(pod.end, last)))
        for t in _grid(max(pod.start, window_start + 1), min(pod.end + MINUTE, last)):
            if sampled(t) or (closed_ranges and sampled(t - MINUTE)):
                measured += pod.count
    return GapAnswer(allocated * MINUTE / HOUR, measured * MINUTE / HOUR)
