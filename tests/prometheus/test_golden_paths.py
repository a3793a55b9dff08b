"""The golden paths: the cluster ``gpustack up`` leaves -- freshly built, no workload -- and the same cluster
running GPU workloads, at 1 and 3 nodes. ``verify`` and ``doctor`` (the CLI in its own process, the cluster's
layers: the host and runtime layers read real hosts, the test bed's part, tests/testbed) exit 0 with no ``fail``, reached through ``--kubeconfig`` (with the state ``up`` keeps)
and through ``$KUBECONFIG`` alone, and every ``warn`` they print is one docs/checks.md lists as expected on a
new cluster (the test reads that list, so the doc and the behaviour cannot drift).

Behind the kubeconfig: the fake API server holding ``scenarios.healthy(N)`` (the objects of the pinned charts
as gpustack installs them), later with ``scenarios.gpu_workloads(N)``; a REAL Prometheus (the release under
test) scraping one replayed dcgm-exporter per node and a replayed kube-state-metrics, with gpustack's alert and
usage rules; the fake Grafana with both dashboards, its panels run on that Prometheus. Idle, no pod holds a
GPU: the per-pod and allocation panels are empty, as on every freshly built cluster (issue 16's R04 failure).
Busy: the exporters attribute GPUs to the workload pods and kube-state-metrics reports their requests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpustack.cluster.layer import grafana_password
from gpustack.config.model import Config
from gpustack.constants import GRAFANA_PORT, GRAFANA_SERVICE, MONITORING_NAMESPACE, PROMETHEUS_PORT, PROMETHEUS_SERVICE
from gpustack.monitoring.dashboard import load_capacity_dashboard, load_dashboard
from gpustack.render.manifests import EXPORTER_TARGETS, render_secrets
from tests.fakes import scenarios as sc
from tests.fakes.grafana_api import FakeGrafana
from tests.fakes.kube_api import FakeKubeAPI
from tests.fakes.model_scenarios import with_models

from .cli_cluster import VIA, Kubelet, Via, not_passing, report_of, run_cli
from .expected import expected_warns
from .harness import SCRAPE_INTERVAL, Stack, running_stack, wait_for
from .releases import Release
from .replay_exporter import MODEL, NodeSpec, PodRef

DOCS = Path(__file__).resolve().parents[2] / "docs" / "checks.md"
EXPORTER = EXPORTER_TARGETS["standalone"]
LAYERS = "kubernetes,gpu-operator,monitoring,grafana"
#: the checks that skip on these clusters, and why: no --load; no SSH to the nodes (no gpustack.yaml here); the fake
#: API server's kubeconfig logs in with a token, so there is no client certificate to judge; M12: the replayed
#: cluster has no etcd target (a real default cluster scrapes etcd: docs/decisions.md "etcd metrics scraped")
EXPECTED_SKIPS = {"verify": {"M11-load-metrics-move"},
                  "doctor": {"G05-driver-preinstalled", "K11-admin-kubeconfig-certificate",
                             "M12-etcd-leader-changes"}}  # fmt: skip


@dataclass
class Golden:
    nodes: int
    stack: Stack
    api: FakeKubeAPI
    kubelet: Kubelet
    kubeconfig: Path
    state: Path  # what `gpustack up` keeps: the Grafana admin password
    workdir: Path


@contextlib.contextmanager
def golden_cluster(
    nodes: int, release: Release, workdir: Path, models: Mapping[str, str] | None = None, *,
    scenario: sc.Scenario | None = None, specs: list[NodeSpec] | None = None, rule_interval: str = SCRAPE_INTERVAL,
) -> Iterator[Golden]:  # fmt: skip
    """``healthy(nodes)`` freshly built -- no pod holds a GPU -- behind the fake API server, its real Prometheus.
    ``models``: node -> GPU model where it is not the H100 (its exporter reports that model's fields, its node
    carries that product label: tests/fakes/model_scenarios.py). ``scenario``/``specs``: other objects / replayed
    nodes than ``healthy(nodes)``'s (a MIG cluster); ``rule_interval``: the usage rules' evaluation interval
    (production's is 1m; the default evaluates them at every scrape)."""
    names = [sc.node_name(i, nodes) for i in range(nodes)]
    models = dict(models or {})
    specs = specs or [NodeSpec(node=name, pods={}, model=models.get(name, MODEL)) for name in names]
    state = workdir / "state"
    (workdir / "prometheus").mkdir(parents=True, exist_ok=True)
    password = grafana_password(Config(), state)  # generated and kept as `gpustack up` does
    with (
        running_stack(
            workdir / "prometheus",
            specs,
            exporter_namespace=EXPORTER.namespace,
            release=release,
            rule_interval=rule_interval,
        ) as stack,
        FakeKubeAPI.running() as api,
        FakeGrafana.running(stack.prometheus.url, password=password) as grafana,
    ):
        api.seed(with_models((scenario or sc.healthy(nodes)).objects, models))
        api.seed(render_secrets(Config(), password, {}))  # the admin Secret as `gpustack up` applies it
        grafana.add_dashboard(load_dashboard())
        grafana.add_dashboard(load_capacity_dashboard())
        api.proxy_upstreams[(MONITORING_NAMESPACE, PROMETHEUS_SERVICE, PROMETHEUS_PORT)] = stack.prometheus.url
        api.proxy_upstreams[(MONITORING_NAMESPACE, GRAFANA_SERVICE, GRAFANA_PORT)] = grafana.url
        api.proxy_upstreams[(EXPORTER.namespace, EXPORTER.service, EXPORTER.port)] = (
            f"http://{stack.exporters[names[-1]].address}"
        )
        kubelet = Kubelet(api, names[-1])
        api.on_create.append(kubelet)
        stack.wait_until_scraped(samples=2)
        yield Golden(nodes, stack, api, kubelet, api.write_kubeconfig(workdir / "kubeconfig"), state, workdir)


def held_gpus(stack: Stack) -> int:
    rows = stack.prometheus.query('count(DCGM_FI_DEV_GPU_UTIL{exported_pod!=""})')
    return int(float(rows[0]["value"][1])) if rows else 0


def start_workloads(g: Golden) -> int:
    """The GPU workloads start: their pods in the API server, their GPUs attributed by the exporters and their
    requests in kube-state-metrics; returns the GPUs they hold, once Prometheus and the usage rules show them."""
    g.api.seed(sc.gpu_workloads(g.nodes))
    held = 0
    for ns, pod, container, node, gpus in sc.gpu_workload_pods(g.nodes):
        replay = g.stack.exporters[node]
        free = [gpu for gpu in range(replay.spec.gpus) if gpu not in replay.spec.pods]
        for gpu in free[:gpus]:
            replay.assign(gpu, PodRef(ns, pod, container))
        held += gpus
    wait_for(f"{held} GPUs attributed to pods", lambda: held_gpus(g.stack) == held, timeout=30)
    wait_for("the usage rules' allocation", lambda: g.stack.prometheus.query("gpustack:gpu_allocated:sum"), timeout=30)
    return held


def run_clean(g: Golden, command: str, via: Via, phase: str, skips: set[str] | None = None) -> dict[str, Any]:
    """Run ``command`` on the cluster's layers; assert it passes as a healthy cluster must. The report. ``skips``: the
    checks that skip (default: :data:`EXPECTED_SKIPS`)."""
    state = g.state if via == "--kubeconfig" else None
    proc = run_cli(command, g.kubeconfig, g.workdir, via=via, state=state, args=("--layer", LAYERS, "--output", "json"))
    report = report_of(proc, command)
    where = f"{command} via {via}, {g.nodes} node(s), {phase}"
    assert proc.returncode == 0, f"{where}: exit {proc.returncode}\n{not_passing(report)}\n{proc.stderr[-2000:]}"
    assert report["summary"]["fail"] == 0, f"{where}:\n{not_passing(report)}"
    warns = {(c["id"], c["summary"]) for c in report["checks"] if c["status"] == "warn"}
    assert warns <= expected_warns(), f"{where}: warnings docs/checks.md does not list:\n{not_passing(report)}"
    skipped = {c["id"] for c in report["checks"] if c["status"] == "skip"}
    assert skipped == (EXPECTED_SKIPS[command] if skips is None else skips), f"{where}:\n{not_passing(report)}"
    assert report["cluster"]["source"] == ("--kubeconfig" if via == "--kubeconfig" else "$KUBECONFIG"), report[
        "cluster"
    ]
    r04 = [c for c in report["checks"] if c["id"] == "R04-panels-have-data"]
    assert [c["status"] for c in r04] == ["pass"], f"{where}: {r04}"
    return report


def walk_the_golden_paths(
    nodes: int, release: Release, workdir: Path, models: Mapping[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """verify and doctor, idle then busy: the last report of each ({command}-{phase})."""
    reports: dict[str, dict[str, Any]] = {}
    with golden_cluster(nodes, release, workdir, models) as g:
        assert held_gpus(g.stack) == 0, "freshly built: no pod holds a GPU, the per-pod panels are empty"
        verify_via, doctor_via = VIA
        reports["verify-idle"] = run_clean(g, "verify", verify_via, "idle")
        reports["doctor-idle"] = run_clean(g, "doctor", doctor_via, "idle")
        held = start_workloads(g)
        assert held == 5 * max(1, nodes - 1)
        reports["verify-busy"] = run_clean(g, "verify", doctor_via, "busy")  # each command each way to the cluster
        reports["doctor-busy"] = run_clean(g, "doctor", verify_via, "busy")
    return reports


def test_one_node_fresh_then_busy_verify_and_doctor_pass(tmp_path: Path, prometheus_release: Release) -> None:
    walk_the_golden_paths(1, prometheus_release, tmp_path)


@pytest.mark.both_prometheus
def test_three_nodes_fresh_then_busy_verify_and_doctor_pass(tmp_path: Path, prometheus_release: Release) -> None:
    walk_the_golden_paths(3, prometheus_release, tmp_path)
