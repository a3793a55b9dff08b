"""The golden path on an all-MIG cluster (issue 32 item 2): one node whose 8 H100s are all carved ``all-1g.10gb`` by the
MIG manager (mixed strategy: ``nvidia.com/mig-1g.10gb: 56`` allocatable, no whole GPU: tests/fakes/sharing_scenarios.py
``make_mig``), its exporter printing one series per GPU instance and no ``DCGM_FI_DEV_GPU_UTIL`` (not reported under
MIG, dcgm-exporter#430: the replay's ``NOT_UNDER_MIG``). Idle, then three pods on three instances (one idle).
``verify`` and ``doctor``: no ``fail``, only the warnings docs/checks.md lists (G10's CUDA pod and G18's shared-GPU pod
get a MIG device and see it in ``nvidia-smi -L``: tests/fakes/gpu_kubelet.py); ``report``: the carved GPUs are 8 GPUs of capacity, three 1g
instances 3/7 of a GPU allocated.

One Prometheus release (the newest): the MIG rules and panels are proven on both by tests/prometheus/rules_tests/
mig.yaml and test_mig_capacity.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpustack.config import mig
from tests.fakes import scenarios as sc
from tests.fakes.gpu_kubelet import GpuKubelet
from tests.fakes.sharing_scenarios import make_mig

from .cli_cluster import VIA
from .golden_report import now_figures, report_json
from .harness import wait_for
from .releases import Release
from .replay_exporter import NodeSpec, PodRef, mig_instances
from .test_golden_paths import Golden, golden_cluster, run_clean

PROFILE = "1g.10gb"
RESOURCE = mig.resource_name(PROFILE)
NODE = sc.node_name(0, 1)
PODS = (PodRef("inference", "vllm-mig-0", "vllm"), PodRef("ml-team", "train-mig-0", "trainer"),
        PodRef("research", "notebook-mig-0", "notebook", idle=True))  # fmt: skip


def _pod_object(ref: PodRef) -> dict[str, Any]:
    p = sc.pod(ref.name, ref.namespace, NODE, labels={"app": ref.name}, owner=("StatefulSet", ref.name[:-2]),
               containers=(ref.container,), image="nvcr.io/nvidia/pytorch:25.10-py3")  # fmt: skip
    p["spec"]["runtimeClassName"] = "nvidia"
    p["spec"]["containers"][0]["resources"] = {"limits": {RESOURCE: "1"}, "requests": {RESOURCE: "1"}}
    return p


def start_mig_pods(g: Golden, spec: NodeSpec) -> None:
    """:data:`PODS` on the first instance of GPUs 0, 1 and 2: in the API server, the exporter and kube-state-metrics."""
    g.api.seed([_pod_object(p) for p in PODS])
    first = mig_instances(spec)[0]
    spec.mig_pods = {(gpu, first): pod for gpu, pod in enumerate(PODS)}
    held = f'count(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{exported_pod!="", GPU_I_PROFILE="{PROFILE}"}})'
    wait_for(f"{len(PODS)} instances attributed", lambda: _value(g, held) == len(PODS), timeout=30)
    wait_for("the usage rules' activity", lambda: _value(g, "count(gpustack:gpu_activity:ratio)") == len(PODS),
             timeout=30)  # fmt: skip


def _value(g: Golden, expr: str) -> float | None:
    rows = g.stack.prometheus.query(expr)
    return float(rows[0]["value"][1]) if rows else None


def test_an_all_mig_cluster_passes_verify_and_doctor_and_reports_whole_gpus(
    tmp_path: Path, prometheus_release: Release
) -> None:
    verify_via, doctor_via = VIA
    scenario = sc.healthy(1)
    make_mig(scenario, profile=f"all-{PROFILE}")
    spec = NodeSpec(node=NODE, pods={}, mig=PROFILE)
    with golden_cluster(1, prometheus_release, tmp_path, scenario=scenario, specs=[spec]) as g:
        gpu_kubelet = GpuKubelet(
            g.api
        )  # after the golden kubelet: G10's and G18's pods get a MIG device, nvidia-smi -L
        g.api.on_create.append(gpu_kubelet)  # lists it (the double of tests/fakes/gpu_kubelet.py)
        assert g.stack.prometheus.query("DCGM_FI_DEV_GPU_UTIL") == [], "GPU_UTIL is not reported under MIG"
        run_clean(g, "verify", verify_via, "all-MIG, idle")
        start_mig_pods(g, spec)
        verify = run_clean(g, "verify", doctor_via, "all-MIG, three pods")
        ran = sorted(resource for _, resource, _ in gpu_kubelet.ran.values())
        assert ran == [RESOURCE] * 4, gpu_kubelet.ran  # each verify: G10's and G18's pod, each given one instance
        assert {c["id"] for c in verify["checks"] if c["status"] == "pass"} >= {"G10-cuda-test-pod",
                                                                                "G18-shared-gpu-test-pod"}  # fmt: skip
        run_clean(g, "doctor", verify_via, "all-MIG, three pods")
        figures = now_figures(report_json(g))
        assert figures["allocatable_gpus"] == pytest.approx(sc.GPUS), figures  # 8 GPUs x 7 instances x 1/7
        assert figures["allocated_gpus"] == pytest.approx(len(PODS) / 7, abs=0.01), figures
        assert figures["free_gpus"] == pytest.approx(sc.GPUS - len(PODS) / 7, abs=0.01), figures
        assert (figures["pending_gpus"], figures["pending_pods"]) == (0, {}), figures
