"""An all-MIG cluster (issue 32 item 2): DCGM_FI_DEV_GPU_UTIL is not reported under MIG (NVIDIA/dcgm-exporter#430),
so M02 and M04 read what is -- the GPU instances' series and DCGM_FI_PROF_GR_ENGINE_ACTIVE -- and still fail a MIG
node that reports nothing. The exporter's /metrics is the replayed exporter's MIG layout (tests/prometheus/
replay_exporter.py, checked against tests/fixtures/mig/ by the contract tests) and the exporter sample itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpustack.checks.model import Finding
from gpustack.diagnose import registry
from gpustack.diagnose.collect_prometheus import METRICS_LIMIT, scrape_exporter
from gpustack.diagnose.snapshot import Snapshot
from gpustack.monitoring.counters import load_counters
from gpustack.runners.http import Response
from tests.prometheus.replay_exporter import NodeSpec, render_dcgm

SAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "mig" / "dcgm-exporter-h100-all-1g.10gb-one-pod.prom"
MIG = {"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "success"}


class Exporter:
    """An endpoint serving one exposition text, cut at the limit the collector asks for (as runners/http does)."""

    def __init__(self, text: str) -> None:
        self.body = text.encode()

    def describe(self) -> str:
        return "exporter"

    def request(self, method: str, path: str, *, limit: int, timeout: float) -> Response:
        return Response(200, self.body[:limit], truncated=len(self.body) > limit, limit=limit)


def check(s: Snapshot, prefix: str) -> list[Finding]:
    return registry.run([spec for spec in registry.load_all().values() if spec.id.startswith(prefix + "-")], s)


def _rows(values: dict[str, float], label: str = "node") -> list[dict[str, Any]]:
    return [{"metric": {label: k}, "value": [0, str(v)]} for k, v in values.items()]


def test_m02_passes_an_exporter_on_a_mig_node() -> None:
    text = render_dcgm(NodeSpec("gpu-node-1", {}, mig="1g.10gb"), load_counters(), t=10.0)
    assert len(text.encode()) > METRICS_LIMIT and "DCGM_FI_DEV_GPU_UTIL{" not in text  # 8 GPUs x 7 instances
    for body in (text, SAMPLE.read_text()):
        rec = scrape_exporter(Exporter(body))  # type: ignore[arg-type]
        assert rec["gpu_util_series"] == 0 and rec["mig_instance_series"] > 0, rec
        s = Snapshot()
        s.prometheus.exporter_scrape = rec
        assert [f.status for f in check(s, "M02")] == ["pass"]


def test_m02_still_fails_an_exporter_serving_no_gpu_series() -> None:
    rec = scrape_exporter(Exporter("# HELP go_goroutines x\ngo_goroutines 12\n"))  # type: ignore[arg-type]
    s = Snapshot()
    s.prometheus.exporter_scrape = rec
    [f] = check(s, "M02")
    assert f.status == "fail" and "dcgm-exporter#430" in f.fix


def all_mig(nodes: dict[str, dict[str, str]], gr_engine: dict[str, float], allocatable: dict[str, float]) -> Snapshot:
    s = Snapshot(kube={"Node": [{"metadata": {"name": n, "labels": labels}} for n, labels in nodes.items()]})
    s.prometheus.reachable = True
    s.prometheus.queries = {"gpu_util_by_node": [], "gr_engine_by_node": _rows(gr_engine),
                            "tensor_by_node": _rows(gr_engine), "gpu_models": [],
                            "gpu_allocatable": _rows(allocatable)}  # fmt: skip
    return s


def test_an_all_mig_cluster_passes_m04_and_m08() -> None:
    mixed = all_mig({"a": MIG, "b": MIG}, {"a": 56, "b": 56}, {})  # mixed: nvidia.com/mig-1g.10gb, no nvidia_com_gpu
    single = all_mig({"a": MIG, "b": MIG}, {"a": 56, "b": 56}, {"a": 56, "b": 56})  # single: 56 nvidia.com/gpu
    for s in (mixed, single):
        assert [f.status for f in check(s, "M04")] == ["pass"], check(s, "M04")
        assert [f.status for f in check(s, "M08")] == ["pass"], check(s, "M08")


def test_a_mig_node_whose_instances_report_nothing_fails() -> None:
    s = all_mig({"a": MIG, "b": MIG}, {"a": 56}, {})
    [f] = check(s, "M04")
    assert (f.status, f.host) == ("fail", "b") and "dcgm-exporter#430" in f.evidence
    nothing = all_mig({"a": MIG}, {}, {})
    [f] = check(nothing, "M04")
    assert f.status == "fail" and f.summary == "DCGM_FI_DEV_GPU_UTIL returns no series (nor GR_ENGINE_ACTIVE)"


def test_a_whole_gpu_node_still_needs_gpu_util() -> None:
    """GR_ENGINE_ACTIVE stands in for GPU_UTIL on MIG nodes only: a plain node without GPU_UTIL still fails."""
    s = all_mig({"a": MIG, "plain": {}}, {"a": 56, "plain": 8}, {"plain": 8})
    [f] = [f for f in check(s, "M04") if f.status == "fail"]
    assert (f.status, f.host, f.summary) == ("fail", "plain", "plain: 0 of 8 allocatable GPUs report metrics")
