"""Issue 32 item 1 against a REAL Prometheus: three nodes of three GPU models (H100, T4, GeForce RTX 4090), each
replayed exporter printing only its model's fields (gpustack/monitoring/gpu_models.py). M08 judges each node by its
own model (the RTX 4090 warns, the H100 and T4 profile); the fields a model lacks are absent from Prometheus, not 0."""

from __future__ import annotations

from pathlib import Path

from gpustack.diagnose.checks_monitoring import gpu_models_by_node

from .harness import running_stack
from .releases import Release
from .replay_exporter import NodeSpec, PodRef
from .test_diagnose_monitoring import collect, ctx, run

MODELS = {"gpu-h100": "NVIDIA H100 80GB HBM3", "gpu-t4": "Tesla T4", "gpu-4090": "NVIDIA GeForce RTX 4090"}


def test_m08_excuses_the_geforce_node_by_its_model(tmp_path: Path, prometheus_release: Release) -> None:
    specs = [NodeSpec(node, {0: PodRef("ml", f"train-{node}", "trainer")}, gpus=2, model=model)
             for node, model in MODELS.items()]  # fmt: skip
    with running_stack(tmp_path, specs, release=prometheus_release) as stack:
        stack.wait_until_scraped(samples=2)
        snap = collect(ctx(stack), ["prometheus"])
        assert gpu_models_by_node(snap) == {node: {model} for node, model in MODELS.items()}
        [m08] = run(snap, ("M08",))["M08"]
        assert m08.status == "warn" and "absent on gpu-4090;" in m08.evidence, m08
        per_node = {r["metric"]["node"]: r["value"][1] for r in stack.prometheus.query(
            "count by (node) (DCGM_FI_DEV_MEMORY_TEMP)")}  # fmt: skip
        assert per_node == {"gpu-h100": "2"}, "T4 and GeForce print no memory temperature: absent, not 0"
        nvlink = {r["metric"]["node"] for r in stack.prometheus.query("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")}
        assert nvlink == {"gpu-h100"}
