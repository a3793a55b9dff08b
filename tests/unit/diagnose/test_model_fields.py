"""Issue 32 item 1: R04 and M08 on clusters of other GPU models (an H100 node, a T4 node, a GeForce RTX 4090 node):
a panel whose fields no model of the cluster reports is excused with the reason; profiling is excused per node."""

from __future__ import annotations

from gpustack.checks.model import Finding
from gpustack.diagnose import checks_grafana, checks_monitoring, registry
from gpustack.diagnose.snapshot import Snapshot

from .test_grafana_checks import healthy

H100, T4, L4, RTX4090 = "NVIDIA H100 80GB HBM3", "Tesla T4", "NVIDIA L4", "NVIDIA GeForce RTX 4090"


def check(snap: Snapshot, prefix: str) -> list[Finding]:
    assert checks_grafana.BOTH and checks_monitoring.BOTH
    return registry.run([s for s in registry.REGISTRY.values() if s.id.startswith(prefix + "-")], snap)


def rows(values: dict[str, str]) -> list[dict]:
    return [{"metric": {"node": n}, "value": [0, v]} for n, v in values.items()]


def cluster(models: dict[str, str], profiled: set[str]) -> Snapshot:
    """Each node with 8 GPUs of its model; ``profiled``: the nodes with DCGM_FI_PROF_* series."""
    s = healthy()
    s.prometheus.reachable = True
    s.prometheus.queries.update({
        "gpu_util_by_node": rows(dict.fromkeys(models, "8")),
        "gr_engine_by_node": rows(dict.fromkeys(profiled, "8")),
        "tensor_by_node": rows(dict.fromkeys(profiled, "8")),
        "gpu_models": [{"metric": {"node": n, "modelName": m}, "value": [0, "8"]} for n, m in models.items()],
    })  # fmt: skip
    return s


def test_m08_excuses_the_geforce_node_of_a_mixed_cluster_and_fails_a_datacenter_node_without_profiling() -> None:
    models = {"gpu-h100": H100, "gpu-t4": T4, "gpu-4090": RTX4090}
    [f] = check(cluster(models, {"gpu-h100", "gpu-t4"}), "M08")
    assert (f.status, f.summary) == ("warn", "profiling metrics unavailable (not supported on these GPUs)"), f
    assert "gpu-4090" in f.evidence and RTX4090 in f.evidence and "gpu-h100" not in f.evidence
    [f] = check(cluster(models, {"gpu-h100"}), "M08")  # the T4 can be profiled: its missing series are a fault
    assert (f.status, f.summary) == ("fail", "profiling metrics unavailable"), f
    assert f.evidence.startswith("DCGM_FI_DEV_GPU_UTIL present but") and "on gpu-t4;" in f.evidence
    assert "not supported on gpu-4090 (excused)" in f.evidence
    assert [f.status for f in check(cluster(models, set(models)), "M08")] == ["pass"]


def test_m08_reads_models_without_a_node_label_as_the_whole_cluster_s() -> None:
    s = cluster({"n1": RTX4090}, set())
    s.prometheus.queries["gpu_models"] = [{"metric": {"modelName": RTX4090}, "value": [0, "8"]}]
    assert [f.status for f in check(s, "M08")] == ["warn"]
    s.prometheus.queries["gpu_models"] = []  # no model known: GPU feature discovery's node label
    s.kube["Node"] = [{"metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4090"}}}]
    assert [f.status for f in check(s, "M08")] == ["warn"]
    s.kube["Node"] = []
    assert [f.status for f in check(s, "M08")] == ["fail"]


def test_r04_excuses_the_panels_no_model_of_the_cluster_reports_with_the_reason() -> None:
    s = cluster({"gpu-l4": L4, "gpu-t4": T4, "gpu-4090": RTX4090}, {"gpu-l4", "gpu-t4"})
    s.grafana.panel_results.update({"GPU Memory Temperature": 0, "NVLink Throughput": 0, "Row Remaps": 8})
    [f] = check(s, "R04")
    assert f.status == "pass" and f.summary == (
        "3 of 5 panels checked; 2 empty because no GPU model of the cluster reports their fields"), f  # fmt: skip
    assert f.evidence.startswith(f"GPU Memory Temperature: DCGM_FI_DEV_MEMORY_TEMP not reported by {RTX4090}, {L4}")
    assert "#460" in f.evidence and "NVLink Throughput: DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" in f.evidence


def test_r04_fails_an_empty_panel_one_model_of_the_cluster_reports() -> None:
    s = cluster({"gpu-h100": H100, "gpu-t4": T4, "gpu-4090": RTX4090}, {"gpu-h100", "gpu-t4"})
    s.grafana.panel_results.update({"GPU Memory Temperature": 0, "NVLink Throughput": 0, "Row Remaps": 0})
    [f] = check(s, "R04")
    assert f.status == "fail" and f.evidence == "GPU Memory Temperature; NVLink Throughput; Row Remaps", f
    s = cluster({"gpu-t4": T4}, {"gpu-t4"})  # a T4 profiles: its empty Tensor Core panel is a fault
    s.grafana.panel_results.update({"Row Remaps": 0, "Tensor Core Utilization": 0})
    [f] = check(s, "R04")
    assert f.status == "fail" and f.evidence == "Tensor Core Utilization", f
