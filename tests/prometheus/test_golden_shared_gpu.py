"""The golden path on a shared GPU (issue 32, item 6): one node time-sliced 4 ways, two and then three pods on one of
its GPUs, the replayed exporter printing what dcgm-exporter 4.8.2 prints with ``--kubernetes-virtual-gpus=true``
(the device series plus per-pod, per-process GPU_UTIL and FB_USED: tests/prometheus/replay_shared.py). ``verify`` and
``doctor`` pass as on every healthy cluster (tests/prometheus/test_golden_paths.py's rules), the dashboard's
framebuffer panels count the GPU once, and the usage rules give each pod the device's activity."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpustack.cluster.layer import grafana_password
from gpustack.config.model import Config
from gpustack.constants import GRAFANA_PORT, GRAFANA_SERVICE, MONITORING_NAMESPACE, PROMETHEUS_PORT, PROMETHEUS_SERVICE
from gpustack.monitoring.dashboard import concretize, load_capacity_dashboard, load_dashboard, panel_queries
from gpustack.render.manifests import render_secrets
from tests.fakes import scenarios as sc
from tests.fakes.grafana_api import FakeGrafana
from tests.fakes.kube_api import FakeKubeAPI
from tests.fakes.sharing_scenarios import make_time_sliced

from .cli_cluster import VIA, Kubelet
from .harness import running_stack, wait_for
from .releases import Release
from .replay_exporter import NodeSpec, PodRef
from .test_golden_paths import EXPORTER, Golden, run_clean

REPLICAS = 4
PODS = (PodRef("team-a", "infer-0", "server"), PodRef("team-a", "notebook-0", "nb", idle=True),
        PodRef("team-b", "train-0", "trainer"))  # fmt: skip


@contextlib.contextmanager
def shared_cluster(release: Release, workdir: Path) -> Iterator[tuple[Golden, NodeSpec]]:
    """``healthy(1)`` with its node time-sliced ``REPLICAS`` ways, behind the fake API server and a real Prometheus."""
    node = sc.node_name(0, 1)
    spec = NodeSpec(node=node, pods={}, replicas=REPLICAS)
    scenario = sc.healthy(1)
    make_time_sliced(scenario, REPLICAS)
    state = workdir / "state"
    (workdir / "prometheus").mkdir(parents=True, exist_ok=True)
    password = grafana_password(Config(), state)
    with (
        running_stack(workdir / "prometheus", [spec], exporter_namespace=EXPORTER.namespace, release=release) as stack,
        FakeKubeAPI.running() as api,
        FakeGrafana.running(stack.prometheus.url, password=password) as grafana,
    ):
        api.seed(scenario.objects)
        api.seed(render_secrets(Config(), password, {}))
        grafana.add_dashboard(load_dashboard())
        grafana.add_dashboard(load_capacity_dashboard())
        api.proxy_upstreams[(MONITORING_NAMESPACE, PROMETHEUS_SERVICE, PROMETHEUS_PORT)] = stack.prometheus.url
        api.proxy_upstreams[(MONITORING_NAMESPACE, GRAFANA_SERVICE, GRAFANA_PORT)] = grafana.url
        api.proxy_upstreams[(EXPORTER.namespace, EXPORTER.service, EXPORTER.port)] = (
            f"http://{stack.exporters[node].address}"
        )
        kubelet = Kubelet(api, node)
        api.on_create.append(kubelet)
        stack.wait_until_scraped(samples=2)
        yield Golden(1, stack, api, kubelet, api.write_kubeconfig(workdir / "kubeconfig"), state, workdir), spec


def _pod_object(ref: PodRef, node: str) -> dict[str, object]:
    p = sc.pod(ref.name, ref.namespace, node, labels={"app": ref.name}, owner=("StatefulSet", ref.name[:-2]),
               containers=(ref.container,), image="nvcr.io/nvidia/pytorch:25.10-py3")  # fmt: skip
    p["spec"]["runtimeClassName"] = "nvidia"
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
    return p


def share(g: Golden, spec: NodeSpec, pods: tuple[PodRef, ...]) -> None:
    """``pods`` run on GPU 0 of the node: in the API server, the exporter (per-process series) and kube-state-metrics."""
    running = spec.shared.get(0, ())
    g.api.seed([_pod_object(p, spec.node) for p in pods if p not in running])
    spec.shared = {0: pods}
    query = 'count(DCGM_FI_DEV_FB_USED{gpu="0", pod_uid!=""})'
    wait_for(f"{len(pods)} per-process series", lambda: _value(g, query) == len(pods), timeout=30)
    wait_for("the usage rules' activity per pod",
             lambda: _value(g, 'count(gpustack:gpu_activity:ratio{gpu="0"})') == len(pods), timeout=30)  # fmt: skip


def _value(g: Golden, expr: str) -> float | None:
    rows = g.stack.prometheus.query(expr)
    return float(rows[0]["value"][1]) if rows else None


def check_the_gpu_is_read_once(g: Golden, pods: int) -> None:
    [panel] = [e for t, e in panel_queries(load_dashboard()) if t == "GPU Framebuffer Mem Used"]
    per_gpu = {r["metric"]["gpu"]: float(r["value"][1]) for r in g.stack.prometheus.query(concretize(panel))}
    device = _value(g, 'DCGM_FI_DEV_FB_USED{gpu="0", exported_pod=""}')
    assert device and per_gpu["0"] == pytest.approx(device, rel=0.01), (pods, per_gpu["0"], device)
    # each pod's activity is its GPU's, not its own processes' (the idle notebook's per-process utilisation is 0); a
    # pod that just joined averages fewer samples, so the values are compared with the busy GPU's, not each other
    activity = {r["metric"]["pod"]: float(r["value"][1]) for r in g.stack.prometheus.query(
        'gpustack:gpu_activity:ratio{gpu="0"}')}  # fmt: skip
    assert len(activity) == pods and min(activity.values()) > 0.3, activity


@pytest.mark.both_prometheus
def test_two_then_three_pods_on_one_time_sliced_gpu(tmp_path: Path, prometheus_release: Release) -> None:
    verify_via, doctor_via = VIA
    with shared_cluster(prometheus_release, tmp_path) as (g, spec):
        for count in (2, 3):
            share(g, spec, PODS[:count])
            check_the_gpu_is_read_once(g, count)
            run_clean(g, "verify", verify_via, f"{count} pods on one time-sliced GPU")
            run_clean(g, "doctor", doctor_via, f"{count} pods on one time-sliced GPU")
