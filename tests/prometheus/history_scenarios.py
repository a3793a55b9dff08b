"""The histories tests/prometheus/history.py backfills: ``ci_history`` (30 days of three nodes whose known answers
the report tests check, :class:`~tests.prometheus.history.Expected`) and ``bench_history`` (a fleet of a hundred
GPUs for scripts/bench_report.py). The history's model and how it reaches Prometheus stay in history.py."""

from __future__ import annotations

import random

from .history import DAY, HOUR, MINUTE, Expected, History, KsmTarget, Node, Pod, TeamLabel

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def ci_history(end: int, days: int = 30) -> tuple[History, Expected]:
    """Three 4-GPU nodes over ``days`` days ending at ``end`` (a multiple of 60):

    - node-a (H100, profiling metrics) and node-b (A100, GPU_UTIL only) run dcgm-exporter; node-c
      (L40S) does not: its allocation has no activity data;
    - ml/train-a holds 2 H100s for exactly 3 h at 50 % graphics-engine activity (GPU_UTIL says 90 %: the
      profiling metric wins) after 10 minutes Pending on its node: 6.0 GPU-hours allocated, 3.0 used;
    - vision/notebook-x holds an A100 for 10 h doing nothing: 10 GPU-hours idle;
    - infra/serve-0 holds A100s 1 and 2 for the last 48 h, still running: GPU 1 at 30 %, GPU 2 idle;
    - ml/wait-0 waits unscheduled for 4 GPUs for the last 6 h; ml/starting-0 is bound, Pending, 1 GPU;
    - infra/base-0 holds one node-c GPU for the whole window; batch/grow-N pods on node-c top every day
      up so the day's average allocation is exactly 1 + 0.1 x day (day 0 the oldest): a linear trend that
      reaches the 12 allocatable GPUs 81 days after the end;
    - teams: ml and vision are "research" (vision was "perception" until day 20), infra "platform",
      batch has no team label;
    - kube-state-metrics rolls out on day 20 while train-a runs: Prometheus scrapes the old and the new pod
      for one hour, and every kube-state-metrics series is there twice (with their own ``instance`` and
      target labels). Nothing may count twice: every figure above stays as it is.
    """
    start = end - days * DAY + MINUTE  # the first sample; (end - days, end] holds days x 1440 samples
    day0 = end - days * DAY  # day i is (day0 + i d, day0 + (i + 1) d]
    nodes = [Node("node-a", H100, 4), Node("node-b", A100, 4, profiling=False), Node("node-c", "NVIDIA L40S", 4,
             profiling=False, exporter=False)]  # fmt: skip
    train_start = day0 + 20 * DAY + 15 * HOUR
    pods = [
        Pod("ml", "train-a", "node-a", (0, 1), train_start, train_start + 3 * HOUR, (0.5, 0.5), pending_s=10 * MINUTE),
        Pod("vision", "notebook-x", "node-b", (0,), day0 + 25 * DAY + 2 * HOUR, day0 + 25 * DAY + 12 * HOUR, (0.0,)),
        Pod("infra", "serve-0", "node-b", (1, 2), end - 2 * DAY + MINUTE, end + MINUTE, (0.3, 0.0)),
        Pod("ml", "wait-0", "", (0, 1, 2, 3), end - 6 * HOUR + MINUTE, end + MINUTE),
        Pod("ml", "starting-0", "node-a", (3,), end + 2 * MINUTE, end + HOUR, (None,), pending_s=10 * MINUTE),
        Pod("infra", "base-0", "node-c", (0,), start, end + MINUTE, (None,)),
    ]

    def running_hours_in_day(pod: Pod, i: int) -> float:
        lo, hi = day0 + i * DAY + MINUTE, day0 + (i + 1) * DAY + MINUTE  # samples of day i
        return pod.count * max(0, min(hi, pod.end) - max(lo, pod.start)) / HOUR if pod.node else 0.0

    daily = [1 + 0.1 * i for i in range(days)]
    for i in range(days):
        others = sum(running_hours_in_day(p, i) for p in pods if p.name != "base-0")
        grow_h = (daily[i] - 1) * 24 - others  # GPU-hours the grow pod must add to hit the line
        if grow_h < 0:
            raise ValueError(f"day {i}: the scenario's other pods exceed the trend")
        seconds = round(grow_h / 3 * HOUR / MINUTE) * MINUTE
        if seconds:
            begin = day0 + i * DAY + MINUTE
            pods.append(Pod("batch", f"grow-{i}", "node-c", (1, 2, 3), begin, begin + seconds, (None, None, None)))
    teams = [
        TeamLabel("ml", "research", start),
        TeamLabel("vision", "perception", start),
        TeamLabel("vision", "research", day0 + 20 * DAY),
        TeamLabel("infra", "platform", start),
        TeamLabel("batch", None, start),
    ]
    rollout = train_start + 30 * MINUTE  # no pod starts or ends within 5 minutes of the overlap (lookback)
    ksm = [
        KsmTarget("kube-prometheus-stack-kube-state-metrics-7c9d6b5f4-x2x7q", "10.244.1.7:8080", start, rollout + HOUR),
        KsmTarget("kube-prometheus-stack-kube-state-metrics-5f8b9c7d6-k2m4p", "10.244.2.9:8080", rollout, end + MINUTE),
    ]
    history = History(start, end, nodes, pods, teams, ksm=ksm)

    alloc: dict[str, float] = {}
    for pod in pods:
        running = max(0, min(pod.end, end + MINUTE) - max(pod.start, start)) if pod.node else 0
        alloc[pod.namespace] = alloc.get(pod.namespace, 0.0) + pod.count * running / HOUR
    expected = Expected(
        allocated_by_namespace={k: v for k, v in alloc.items() if v},
        used={("ml", "train-a"): 3.0, ("vision", "notebook-x"): 0.0, ("infra", "serve-0"): 0.3 * 48},
        idle={("vision", "notebook-x", "0"): 10.0, ("infra", "serve-0", "2"): 48.0},
        daily=daily,
        capacity=12,
        pending_now=4,
        pending_h=4 * 6.0,
        allocatable_now=12,
        allocated_now=3,  # serve-0 (2) and base-0 (1): every grow pod ends within its day
        starting_now=1,
        teams={"ml": "research", "vision": "research", "infra": "platform", "batch": "(none)"},
        rollout=(rollout, rollout + HOUR),
    )
    return history, expected


def bench_history(end: int, gpus: int = 100, days: int = 30, seed: int = 7) -> History:
    """``gpus`` GPUs (8 per node) over ``days`` days, one sample a minute: every GPU runs a sequence of
    1-GPU pods (2-48 h, 10 namespaces, 4 teams) with gaps, at a steady activity each; half the nodes
    collect profiling metrics."""
    rng = random.Random(seed)
    start = end - days * DAY + MINUTE
    nodes = []
    for i in range(0, gpus, 8):
        nodes.append(Node(f"gpu-{i // 8:03d}", H100 if (i // 8) % 2 == 0 else A100, min(8, gpus - i),
                          profiling=(i // 8) % 2 == 0))  # fmt: skip
    namespaces = [f"team{i % 4}-ns{i}" for i in range(10)]
    pods: list[Pod] = []
    for node in nodes:
        for gpu in range(node.gpus):
            t = start + rng.randrange(0, 12) * HOUR
            while t < end:
                length = rng.randrange(2, 49) * HOUR
                activity = rng.choice([0.0, 0.05, 0.3, 0.6, 0.9])
                pod_end = min(t + length, end + MINUTE)
                pods.append(Pod(rng.choice(namespaces), f"job-{len(pods)}", node.name, (gpu,), t, pod_end, (activity,)))
                t = pod_end + rng.randrange(0, 13) * HOUR
    teams = [TeamLabel(ns, ns.split("-")[0], start) for ns in namespaces]
    return History(start, end, nodes, pods, teams)
