"""The golden path on a busy cluster (issue 32 item 3): three nodes, every worker GPU allocated (the workloads and a
job filling each worker: tests/fakes/busy_scenarios.py), two jobs queued on ``Insufficient nvidia.com/gpu`` (one whose
reason only its FailedScheduling event gives), two finished jobs that failed (one evicted). The replayed exporters
attribute every held GPU, the replayed kube-state-metrics reports the queued and failed pods too
(tests/prometheus/ksm_pods.py). ``verify`` and ``doctor``: no ``fail``, only the warnings docs/checks.md lists; G10
skips naming the holders, K07 passes the queue and the failed jobs; ``report``: 24 GPUs allocatable, the 16 of the
workers allocated, the control plane's 8 free, 10 wanted by the two queued pods.

The same cluster at a 60 s scrape and production's 1 m rule evaluation: its live series replayed one sample a minute
through the real promtool, every panel R04 requires evaluated as doctor sends it for a 60 s datasource
(tests/prometheus/cadence.py; why not live: docs/decisions.md "A 60 s scrape: production's cadence through promtool").

One Prometheus release (the newest), one cluster for both tests: nothing here depends on the release that the other
golden paths and tests/prometheus/test_rate_interval.py do not prove on both."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from gpustack.diagnose.collect_grafana import CAPACITY_PREFIX
from tests.fakes import scenarios as sc
from tests.fakes.busy_scenarios import busy_objects, fillers

from .cadence import promtool_at_production_cadence, replayed_series, required_panels
from .cli_cluster import VIA
from .golden_report import now_figures, report_json
from .harness import wait_for
from .ksm_pods import pod_series
from .releases import Release
from .replay_exporter import PodRef
from .test_golden_paths import EXPECTED_SKIPS, Golden, golden_cluster, held_gpus, run_clean

NODES = 3
HELD = 2 * sc.GPUS  # both workers full; the control plane's GPUs are free, but its taint keeps GPU pods away


def make_busy(g: Golden) -> None:
    """The busy objects in the API server, every held GPU attributed by its node's exporter, the queued and the
    failed pods in kube-state-metrics."""
    objects = busy_objects(NODES)
    g.api.seed(objects)
    holders = [*sc.gpu_workload_pods(NODES), *(("ml-team", pod, "main", node, n) for pod, node, n in fillers(NODES))]
    for ns, pod, container, node, gpus in holders:
        replay = g.stack.exporters[node]
        free = [gpu for gpu in range(replay.spec.gpus) if gpu not in replay.spec.pods]
        for gpu in free[:gpus]:
            replay.assign(gpu, PodRef(ns, pod, container))
    waiting = [o for o in objects if o["kind"] == "Pod" and o["status"]["phase"] != "Running"]
    g.stack.ksm.extra[:] = pod_series(waiting)
    wait_for(f"{HELD} GPUs attributed to pods", lambda: held_gpus(g.stack) == HELD, timeout=30)
    wait_for("the usage rules' queue", lambda: _value(g, "gpustack:cluster_gpu_pending:sum") == 10, timeout=30)
    wait_for("the usage rules' allocation", lambda: _value(g, "gpustack:cluster_gpu_allocated:sum") == HELD, timeout=30)


def _value(g: Golden, expr: str) -> float | None:
    rows = g.stack.prometheus.query(expr)
    return float(rows[0]["value"][1]) if rows else None


def finding(report: dict[str, Any], check: str) -> dict[str, Any]:
    [found] = [c for c in report["checks"] if c["id"] == check]
    return dict(found)


class Busy(NamedTuple):
    g: Golden
    since: float  # time.time() when the cluster was busy in Prometheus (every GPU attributed, the queue recorded)


@pytest.fixture(scope="module")
def busy_cluster(tmp_path_factory: pytest.TempPathFactory, prometheus_release: Release) -> Iterator[Busy]:
    with golden_cluster(NODES, prometheus_release, tmp_path_factory.mktemp("golden-busy")) as g:
        make_busy(g)
        yield Busy(g, time.time())


def test_a_busy_cluster_passes_verify_and_doctor_and_report_counts_its_queue(busy_cluster: Busy) -> None:
    g = busy_cluster.g
    verify_via, doctor_via = VIA
    verify = run_clean(g, "verify", verify_via, "busy", skips=EXPECTED_SKIPS["verify"] | {"G10-cuda-test-pod"})
    g10 = finding(verify, "G10-cuda-test-pod")
    assert g10["summary"] == "CUDA test pod not run (every GPU it may use is allocated)", g10
    assert "every nvidia.com/gpu is allocated (16 of 16 on 2 node(s) the test pod may go to)" in g10["evidence"]
    assert "ml-team/train-1 (4)" in g10["evidence"] and "ml-team/fill-gpu-node-2 (3)" in g10["evidence"], g10
    assert "gpustack-cuda" not in g.kubelet.ran.values(), "no test pod queued behind the workloads"

    doctor = run_clean(g, "doctor", doctor_via, "busy")
    k07 = finding(doctor, "K07-pod-failures")
    assert k07["summary"] == "no failing pod; 2 pod(s) queued for GPUs, 2 workload pod(s) ended Failed", k07

    figures = now_figures(report_json(g))
    assert figures == {"allocatable_gpus": 3 * sc.GPUS, "allocated_gpus": HELD, "starting_gpus": 0,
                       "free_gpus": sc.GPUS, "pending_gpus": 10,
                       "pending_pods": {"ml-team/finetune-3": 8, "research/sweep-7": 2}}, figures  # fmt: skip


def test_the_busy_cluster_at_a_60s_scrape_and_1m_rules_fills_every_panel(
    busy_cluster: Busy, promtool: str, tmp_path: Path
) -> None:
    """Issue 32, a 60 s scrape: the busy cluster's live series replayed one sample a minute through the real promtool,
    with the rule files as shipped (usage rules every 1m) and every panel R04 requires as doctor runs it for a 60 s
    datasource (tests/prometheus/cadence.py)."""
    series = replayed_series(busy_cluster.g.stack.prometheus, busy_cluster.since)
    assert len(series) > 3 * sc.GPUS * 20, len(series)  # every GPU's fields, kube-state-metrics, up
    panels = required_panels()
    assert "PCIe Replays" in panels and f"{CAPACITY_PREFIX}Activity of allocated GPUs (percentiles)" in panels, panels
    assert any("[4m]" in q for q in panels["PCIe Replays"]), panels["PCIe Replays"]
    assert promtool_at_production_cadence(promtool, tmp_path, series, panels) == ""
