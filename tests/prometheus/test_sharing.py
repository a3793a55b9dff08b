"""Shared GPUs against a real Prometheus: a replayed MIG node (2 H100s at all-1g.10gb: 14 GPU instances, two pods)
and a time-sliced node (2 GPUs x 4 replicas) scraped as gpustack's ServiceMonitor does. Every DCGM dashboard panel
has data (the MIG instance panels included), GPU-level panels show each GPU once although MIG repeats its fields
on every instance, and neither node looks like GPUs missing from DCGM."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpustack.monitoring.dashboard import concretize, load_dashboard, panel_queries
from gpustack.monitoring.panels import titles
from gpustack.monitoring.rules import alert_expressions

from .harness import Stack, running_stack
from .releases import Release
from .replay_exporter import NodeSpec, PodRef

MIG_NODE, TS_NODE = "gpu-h100-01", "gpu-l40s-01"


def nodes() -> list[NodeSpec]:
    infer, notebook = PodRef("team-a", "infer-0", "server"), PodRef("team-b", "notebook-0", "nb", idle=True)
    return [
        NodeSpec(MIG_NODE, {}, gpus=2, mig="1g.10gb", mig_pods={(0, 7): infer, (1, 9): notebook}),
        NodeSpec(TS_NODE, {0: PodRef("team-c", "train-0", "trainer"), 1: PodRef("team-c", "train-1", "trainer")},
                 gpus=2, replicas=4),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, prometheus_release: Release) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("prometheus-sharing"), nodes(), release=prometheus_release) as stack:
        stack.wait_until_scraped()
        yield stack


def test_every_panel_has_data_and_gpu_level_panels_show_each_gpu_once(shared: Stack) -> None:
    problems = titles("12239.json", {"problems"})
    empty, per_gpu = [], {}
    for title, expr in panel_queries(load_dashboard()):
        result = shared.prometheus.query(concretize(expr))
        if not result and title not in problems:
            empty.append(title)
        per_gpu[title] = result
    assert empty == []
    for title in ("GPU Temperature", "GPU Power Usage", "GPU SM Clocks", "GPU Framebuffer Mem Used"):
        assert len(per_gpu[title]) == 4, title  # 2 MIG GPUs + 2 whole GPUs, not 14 + 2
    assert len(per_gpu["MIG Instances"]) == 14
    assert {r["metric"].get("exported_pod") for r in per_gpu["MIG Instances"]} == {"infer-0", "notebook-0", None}
    assert len(per_gpu["GPU Utilization"]) == 2  # not reported under MIG: the whole GPUs only
    per_gpu_power = sum(float(r["value"][1]) for r in per_gpu["GPU Power Usage"])
    [total] = per_gpu["GPU Power Total"]
    assert float(total["value"][1]) == pytest.approx(per_gpu_power, rel=0.02)  # a sum over instances is 7x


def test_mig_instance_panels_carry_profile_instance_and_pod(shared: Stack) -> None:
    [active] = [e for t, e in panel_queries(load_dashboard()) if t == "MIG Instance Engine Activity"]
    result = shared.prometheus.query(concretize(active))
    busy = [r["metric"] for r in result if float(r["value"][1]) > 0.5]
    assert [(m["GPU_I_PROFILE"], m["GPU_I_ID"], m["exported_pod"]) for m in busy] == [("1g.10gb", "7", "infer-0")]
    assert {m["node"] for m in (r["metric"] for r in result)} == {MIG_NODE}


def test_neither_node_looks_like_gpus_missing(shared: Stack) -> None:
    [expr] = [e for name, e in alert_expressions() if name == "GPUsMissingFromMetrics"]
    assert shared.prometheus.query(expr) == []
    # without the sharing-strategy label the time-sliced node would count 6 GPUs missing
    bare = expr.split("unless on (node)\nkube_node_labels")[0]
    assert bare != expr
    assert [r["metric"]["node"] for r in shared.prometheus.query(bare)] == [TS_NODE]
