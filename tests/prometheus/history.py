"""Synthetic GPU history with known answers, backfilled into a real Prometheus, for ``gpustack report``.

A :class:`History` lists nodes, namespaces (with their team label over time) and pods (node, GPUs, when
they were Pending, Running, what their GPUs did). :func:`write_openmetrics` turns it into the series
kube-state-metrics 2.20 and dcgm-exporter (through gpustack's ServiceMonitor: ``exported_*`` workload
labels, ``node``) would have produced, one sample a minute on a grid aligned to the minute, and
``promtool tsdb create-blocks-from openmetrics`` imports them (:func:`import_openmetrics`; large blocks:
30 days import in about a second instead of ~50 s of 2-hour blocks).

Recording rules: :func:`backfill_rules` evaluates the usage rules over the history with range queries
against a Prometheus holding it and imports the results the same way. ``promtool tsdb create-blocks-from
rules`` does the same per 2-hour block and takes ~12 s per rule for 30 days (~4 min for the group), and
cannot backfill a rule that reads another rule in one pass.

The scenarios (tests/prometheus/history_scenarios.py: ``ci_history`` with its known answers, an
:class:`Expected`; ``bench_history`` for scripts/bench_report.py) choose pod durations, activities and the daily
allocation; they are not measured.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from gpustack.config import mig as mig_table
from gpustack.report.inputs import ksm_label_name
from gpustack.report.queries import RecordRule, inline, rules

from .harness import PrometheusServer
from .releases import Release, newest
from .replay_exporter import gpu_uuid

MINUTE = 60
HOUR = 3600
DAY = 86400


@dataclass(frozen=True)
class Node:
    name: str
    model: str
    gpus: int
    profiling: bool = True  # DCGM_FI_PROF_GR_ENGINE_ACTIVE collected (datacenter GPU)
    exporter: bool = True  # dcgm-exporter runs (else: allocation without DCGM data)
    mig: str = ""  # a GI profile (1g.10gb): every GPU at all-<profile>, mig.strategy mixed (docs/gpu-sharing.md)
    replicas: int = 1  # time-slicing: each GPU advertised ``replicas`` times
    device: str = "0x2330"  # PCI device id: whose MIG layouts (gpustack/config/mig.py; H100 80GB, H200 0x2335)
    gaps: tuple[tuple[int, int], ...] = ()  # [start, end): dcgm-exporter down, no DCGM sample (no staleness marker)

    def up(self, t: int) -> bool:
        return not any(lo <= t < hi for lo, hi in self.gaps)

    def instances(self) -> int:
        """MIG instances per GPU (1 for a whole GPU): what all-<profile> makes on this GPU."""
        return (mig_table.layout(self.device, f"all-{self.mig}") or {}).get(self.mig, 0) if self.mig else 1

    @property
    def resource(self) -> str:
        """kube-state-metrics' name of the resource a pod requests here."""
        return "nvidia_com_mig_" + self.mig.replace(".", "_") if self.mig else "nvidia_com_gpu"


@dataclass(frozen=True)
class Pod:
    """A pod holding ``gpus`` on ``node`` while Running in [start, end); Pending for ``pending_s`` before.
    On a MIG node ``gpus`` are instance numbers (GPU ``i // instances``, GI id ``7 + i % instances``); on a
    time-sliced node several pods may name one GPU.
    ``node=""``: never scheduled (Pending from ``start`` to ``end``). ``activity[i]`` for ``gpus[i]``
    (0-1; ``None``: no DCGM series). A pod still running at the end of the history has ``end`` = end + 60
    (its last sample is at the end)."""

    namespace: str
    name: str
    node: str
    gpus: tuple[int, ...]
    start: int
    end: int
    activity: tuple[float | None, ...] = ()
    pending_s: int = 0
    linger_s: int = 10 * MINUTE  # kept (Succeeded) after it ends, as Job pods are

    @property
    def count(self) -> int:
        return len(self.gpus)


@dataclass(frozen=True)
class TeamLabel:
    """``namespace`` carried ``team`` (None: no label) from ``since`` on."""

    namespace: str
    team: str | None
    since: int


@dataclass(frozen=True)
class KsmTarget:
    """One kube-state-metrics pod Prometheus scrapes in [start, end): kube-prometheus-stack's ServiceMonitor
    (honorLabels: true) adds ``instance`` to every series, and its own ``namespace``/``pod``/``container``
    where kube-state-metrics' output has none (node and namespace series; ``container`` on pod phases)."""

    pod: str
    instance: str
    start: int
    end: int

    def labels(self, exported: dict[str, str]) -> dict[str, str]:
        target = {"job": "kube-state-metrics", "instance": self.instance, "namespace": "monitoring", "pod": self.pod,
                  "container": "kube-state-metrics", "service": "kube-prometheus-stack-kube-state-metrics",
                  "endpoint": "http"}  # fmt: skip
        return target | exported  # honorLabels: the exported labels win


@dataclass
class History:
    start: int  # first sample
    end: int  # last sample (a multiple of 60)
    nodes: list[Node]
    pods: list[Pod]
    teams: list[TeamLabel] = field(default_factory=list)
    team_key: str = "team"
    #: the kube-state-metrics pods scraped (overlapping during a rollout); none: one, without target labels
    ksm: list[KsmTarget] = field(default_factory=list)

    @property
    def seconds(self) -> int:
        return self.end - self.start


def _grid(start: int, end: int, step: int = MINUTE) -> range:
    """Sample times in [start, end) on the minute grid."""
    first = -(-start // step) * step
    return range(first, end, step)


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items() if v != "")


class _Writer:
    """OpenMetrics text, one family at a time (promtool wants a family's samples together)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.families: set[str] = set()
        self.current = ""
        self.samples = 0

    def family(self, name: str) -> None:
        if name in self.families:
            raise ValueError(f"family {name} written twice: its samples must be contiguous")
        self.families.add(name)
        self.current = name
        self.out.write(f"# TYPE {name} gauge\n")

    def series(self, labels: dict[str, str], points: Iterable[tuple[int, float]]) -> None:
        head = f"{self.current}{{{_labels(labels)}}} "
        lines = [f"{head}{v:g} {t}\n" for t, v in points]
        self.samples += len(lines)
        self.out.write("".join(lines))

    def close(self) -> None:
        self.out.write("# EOF\n")


def write_openmetrics(history: History, out: TextIO) -> int:
    """The history as kube-state-metrics and dcgm-exporter series; returns the number of samples."""
    w = _Writer(out)
    end = history.end + MINUTE  # sample times < end: the last one at history.end
    nodes = {n.name: n for n in history.nodes}

    targets = history.ksm or [None]

    def ksm(labels: dict[str, str], points: Iterable[tuple[int, float]]) -> None:
        """One kube-state-metrics series as each target scraped it (its samples within the target's life)."""
        pts = list(points)
        for target in targets:
            if target is None:
                w.series(labels, pts)
            else:
                mine = [(t, v) for t, v in pts if target.start <= t < target.end]
                if mine:
                    w.series(target.labels({k: v for k, v in labels.items() if k != "job"}), mine)

    w.family("kube_node_status_allocatable")
    for node in history.nodes:
        labels = {"job": "kube-state-metrics", "node": node.name, "resource": node.resource, "unit": "integer"}
        ksm(labels, ((t, node.gpus * node.instances() * node.replicas) for t in _grid(history.start, end)))
    shared = [n for n in history.nodes if n.replicas > 1]
    if shared:  # time-sliced: capacity (GPUs x replicas) and GFD's sharing-strategy label (allowlisted by gpustack)
        w.family("kube_node_status_capacity")
        for node in shared:
            labels = {"job": "kube-state-metrics", "node": node.name, "resource": node.resource, "unit": "integer"}
            ksm(labels, ((t, node.gpus * node.replicas) for t in _grid(history.start, end)))
        w.family("kube_node_labels")
        for node in shared:
            labels = {
                "job": "kube-state-metrics",
                "node": node.name,
                "label_nvidia_com_gpu_sharing_strategy": "time-slicing",
            }
            ksm(labels, ((t, 1) for t in _grid(history.start, end)))

    team_label = ksm_label_name(history.team_key)
    w.family("kube_namespace_labels")
    by_ns: dict[str, list[TeamLabel]] = {}
    for entry in history.teams:
        by_ns.setdefault(entry.namespace, []).append(entry)
    for ns, entries in by_ns.items():
        entries.sort(key=lambda e: e.since)
        for i, entry in enumerate(entries):
            until = entries[i + 1].since if i + 1 < len(entries) else end
            labels = {"job": "kube-state-metrics", "namespace": ns, team_label: entry.team or ""}
            ksm(labels, ((t, 1) for t in _grid(max(entry.since, history.start), until, 4 * MINUTE)))

    def pod_base(pod: Pod) -> dict[str, str]:
        return {"job": "kube-state-metrics", "namespace": pod.namespace, "pod": pod.name, "uid": f"uid-{pod.name}"}

    def exists(pod: Pod) -> tuple[int, int]:
        first = pod.start - pod.pending_s if pod.node else pod.start
        return max(first, history.start), min(pod.end + (pod.linger_s if pod.node else 0), end)

    w.family("kube_pod_container_resource_requests")
    for pod in history.pods:
        lo, hi = exists(pod)
        resource = nodes[pod.node].resource if pod.node in nodes else "nvidia_com_gpu"
        labels = {**pod_base(pod), "container": "main", "node": pod.node, "resource": resource,
                  "unit": "integer"}  # fmt: skip
        ksm(labels, ((t, pod.count) for t in _grid(lo, hi)))

    w.family("kube_pod_status_phase")
    for pod in history.pods:
        lo, hi = exists(pod)
        if pod.node:
            ksm({**pod_base(pod), "phase": "Running"}, ((t, int(pod.start <= t < pod.end)) for t in _grid(lo, hi)))
            if pod.end < hi:  # kube-state-metrics exports every phase; only Running and Pending are read
                ksm({**pod_base(pod), "phase": "Succeeded"}, ((t, 1) for t in _grid(pod.end, hi)))
        if pod.pending_s or not pod.node:
            ksm({**pod_base(pod), "phase": "Pending"}, ((t, int(t < pod.start or not pod.node)) for t in _grid(lo, hi)))

    def dcgm_labels(node: Node, gpu: int, pod: Pod | None) -> dict[str, str]:
        """A GPU's labels; on a MIG node ``gpu`` is an instance number (dcgm-exporter's MIG layout: the parent's
        gpu/UUID, GPU_I_PROFILE and GPU_I_ID); on a time-sliced node each pod has its copy (label vgpu)."""
        parent, gi = divmod(gpu, node.instances())
        labels = {"job": "dcgm-exporter", "node": node.name, "gpu": str(parent), "UUID": gpu_uuid(node.name, parent),
                  "modelName": node.model}  # fmt: skip
        if node.mig:
            labels |= {"GPU_I_PROFILE": node.mig, "GPU_I_ID": str(7 + gi)}
        if pod is not None:
            labels |= {"exported_namespace": pod.namespace, "exported_pod": pod.name, "exported_container": "main"}
            if node.replicas > 1:
                labels["vgpu"] = str(sum(1 for p in history.pods if p.node == node.name and p.name < pod.name))
        return labels

    def dcgm(node: Node, labels: dict[str, str], points: Iterable[tuple[int, float]]) -> None:
        w.series(labels, ((t, v) for t, v in points if node.up(t)))

    held: list[tuple[Node, int, Pod, float]] = []
    for pod in history.pods:
        node = nodes.get(pod.node)
        if node is None or not node.exporter:
            continue
        for gpu, activity in zip(pod.gpus, pod.activity, strict=True):
            if activity is not None:
                held.append((node, gpu, pod, activity))
    # every GPU of an exporter node reports (unallocated) for the last hour, so "now" sees the node's model
    free = [(n, g) for n in history.nodes if n.exporter and not n.mig for g in range(n.gpus)]

    def util(activity: float, profiling: bool) -> float:
        return 90.0 if profiling and activity > 0 else round(100 * activity, 6)

    w.family("DCGM_FI_DEV_GPU_UTIL")
    for node, gpu, pod, activity in held:
        lo, hi = max(pod.start, history.start), min(pod.end, end)
        dcgm(node, dcgm_labels(node, gpu, pod), ((t, util(activity, node.profiling)) for t in _grid(lo, hi)))
    for node, gpu in free:
        dcgm(node, dcgm_labels(node, gpu, None), ((t, 0) for t in _grid(end - HOUR, end)))

    sharing = [n for n in history.nodes if n.exporter and (n.mig or n.replicas > 1)]
    if sharing:  # the GPUs and MIG instances DCGM reports (the usage rules' shares read them)
        w.family("DCGM_FI_DEV_GPU_TEMP")
        for node, gpu, pod, _ in held:
            if node.mig:
                dcgm(
                    node,
                    dcgm_labels(node, gpu, pod),
                    ((t, 40) for t in _grid(max(pod.start, history.start), min(pod.end, end))),
                )
        for node in sharing:
            for gpu in range(node.gpus * node.instances()):
                # a held instance's series carries its pod while the pod runs; dcgm-exporter reports it without
                # one before and after (every instance, all the time)
                spans = [(p.start, p.end) for n, g, p, _ in held if node.mig and n is node and g == gpu]
                free_t = (t for t in _grid(history.start, end) if not any(lo <= t < hi for lo, hi in spans))
                dcgm(node, dcgm_labels(node, gpu, None), ((t, 40) for t in free_t))

    w.family("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    for node, gpu, pod, activity in held:
        if node.profiling:
            lo, hi = max(pod.start, history.start), min(pod.end, end)
            dcgm(node, dcgm_labels(node, gpu, pod), ((t, activity) for t in _grid(lo, hi)))
    w.close()
    return w.samples


def import_openmetrics(text_file: Path, data_dir: Path, timeout: float = 600, release: Release | None = None) -> None:
    """``promtool tsdb create-blocks-from openmetrics`` into ``data_dir`` (blocks up to 31 days long), with
    ``release``'s promtool (default: the newest)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=data_dir.parent) as tmp:
        proc = subprocess.run(
            [(release or newest()).promtool, "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=744h", str(text_file), tmp],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"promtool create-blocks-from openmetrics failed:\n{proc.stderr[-3000:]}")
        for block in Path(tmp).iterdir():
            shutil.move(str(block), data_dir / block.name)


# --- recording rules -------------------------------------------------------------------------------------


#: labels (sorted pairs) -> samples: a recording rule's output series as a backfill writes them
Series = dict[tuple[tuple[str, str], ...], list[tuple[int, float]]]


def rule_series(server: Any, expr: str, extra: dict[str, str], start: int, end: int, step: int, into: Series) -> None:
    """Evaluate ``expr`` over [start, end] every ``step`` seconds (in range-query chunks) into ``into``, each
    series labelled as the rule records it (``__name__`` dropped, the rule's own labels added)."""
    for lo, hi in _chunks(start, end, step):
        params = {"query": expr, "start": str(lo), "end": str(hi), "step": f"{step}s"}
        for row in server.api("query_range", params, timeout=600)["result"]:
            labels = {k: v for k, v in row["metric"].items() if k != "__name__"} | extra
            into.setdefault(tuple(sorted(labels.items())), []).extend((int(t), float(v)) for t, v in row["values"])


def _chunks(start: int, end: int, step: int, max_points: int = 10_000) -> Iterator[tuple[int, int]]:
    span = step * (max_points - 1)
    lo = start
    while lo <= end:
        hi = min(end, lo + span)
        yield lo, hi
        lo = hi + step


def backfill_rules(server: PrometheusServer, start: int, end: int, workdir: Path, step: int = MINUTE) -> int:
    """Record every usage rule at each minute of [start, end] into ``server``'s TSDB (then restart it).

    Each rule is evaluated with the rules it reads inlined (:func:`gpustack.report.queries.inline`), so
    one pass does: reading a recorded series instead would see it 5 minutes past its end (lookback), where
    a live rule engine writes a staleness marker -- a marker OpenMetrics text cannot carry. Returns the
    number of samples written."""
    text_file = workdir / "rules.om"
    with text_file.open("w", encoding="utf-8") as out:
        w = _Writer(out)
        by_name: dict[str, list[RecordRule]] = {}
        for rule in rules():
            by_name.setdefault(rule.record, []).append(rule)
        for name, defs in by_name.items():
            w.family(name)
            for rule in defs:
                expr = inline(rule.expr)
                series: Series = {}
                rule_series(server, expr, dict(rule.labels), start, end, step, series)
                for key, points in series.items():
                    w.series(dict(key), points)
        w.close()
    server.stop()
    import_openmetrics(text_file, server.data_dir, release=server.release)
    text_file.unlink()
    server.start(timeout=120)
    return w.samples


# --- the CI scenario --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """What the report must say about a scenario (history_scenarios.ci_history; hours are GPU-hours)."""

    allocated_by_namespace: dict[str, float]
    used: dict[tuple[str, str], float]  # (namespace, pod) -> used GPU-hours
    idle: dict[tuple[str, str, str], float]  # (namespace, pod, gpu) -> idle GPU-hours
    daily: list[float]  # average GPUs allocated per day, oldest first
    capacity: int
    pending_now: float
    pending_h: float
    allocatable_now: float
    allocated_now: float
    starting_now: float
    teams: dict[str, str]
    rollout: tuple[int, int] = (0, 0)  # [start, end): both kube-state-metrics pods scraped


def load_history(history: History, data_dir: Path, workdir: Path, release: Release | None = None) -> int:
    """Write the history as OpenMetrics and import it into ``data_dir`` (with ``release``'s promtool); returns
    the sample count."""
    text_file = workdir / "history.om"
    with text_file.open("w", encoding="utf-8") as out:
        samples = write_openmetrics(history, out)
    import_openmetrics(text_file, data_dir, release=release)
    text_file.unlink()
    return samples


def prometheus_yml(path: Path, rule_files: Sequence[Path] = ()) -> Path:
    """A Prometheus config that scrapes nothing (the data is backfilled) and loads ``rule_files``."""
    import yaml

    config: dict[str, Any] = {"global": {"scrape_interval": "1m", "evaluation_interval": "1m"}}
    if rule_files:
        config["rule_files"] = [str(p) for p in rule_files]
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@dataclass
class Backfilled:
    """Two Prometheus servers over the same history: ``raw`` without gpustack's usage rules, ``rules`` with
    them loaded and recorded over the whole history."""

    history: History
    expected: Expected | None
    raw: PrometheusServer
    rules: PrometheusServer

    def stop(self) -> None:
        self.raw.stop()
        self.rules.stop()


def backfilled(
    workdir: Path, history: History, expected: Expected | None, retention: str = "400d", release: Release | None = None
) -> Backfilled:
    """Import ``history``, start the raw server, copy its blocks for the rules server, record the rules there
    (``release``: which Prometheus, default the newest)."""
    from gpustack.monitoring.rules import usage_rules_path

    release = release or newest()
    load_history(history, workdir / "raw", workdir, release)
    raw = PrometheusServer(
        prometheus_yml(workdir / "raw.yml"), workdir / "raw", workdir / "raw.log", retention=retention, release=release
    )
    shutil.copytree(workdir / "raw", workdir / "rules")
    rules_server = PrometheusServer(
        prometheus_yml(workdir / "rules.yml", [usage_rules_path()]), workdir / "rules", workdir / "rules.log",
        retention=retention, release=release,
    )  # fmt: skip
    raw.start(timeout=120)
    try:
        rules_server.start(timeout=120)
        backfill_rules(rules_server, history.start, history.end, workdir)
    except BaseException:
        raw.stop()
        rules_server.stop()
        raise
    return Backfilled(history, expected, raw, rules_server)
