"""``gpustack report`` counts shared GPUs by their share (docs/gpu-sharing.md#report), against a real Prometheus
holding one day of history with known answers, from raw series and from gpustack's recording rules:

- gpu-h100-01, one H100 80GB at all-1g.10gb (mig.strategy mixed: ``nvidia.com/mig-1g.10gb`` x 7): team-a/infer-0
  holds one instance for 10 h at 0.978 engine activity -> 10/7 GPU-h allocated, 10 x 0.978 / 7 used;
  team-b/nb-0 another for 7 h, idle -> 1 GPU-h allocated and idle;
- gpu-l40s-01, two L40S time-sliced 4 ways (allocatable 8): team-c/train-0 and train-1 share GPU 0 for 4 h at
  0.5 -> 1 GPU-h allocated, 0.5 used each;
- capacity: 3 physical GPUs x 24 h = 72 GPU-h (not 7 + 8 devices).

And four H200 nodes, one GPU each, in the layouts issue 32 found short of one GPU when an instance counted its
slices of 7 (all-1g.35gb 4/7, all-4g.71gb 4/7, all-3g.71gb and all-2g.35gb 6/7): each is one GPU, an instance its
compute slices / the slices carved on its GPU (docs/gpu-sharing.md#report): team-d/a-0 on a 1g.35gb instance for 8 h
at 0.6 -> 8/4 allocated, 1.2 used; team-d/b-0 on the 4g.71gb instance for 6 h at 1.0 -> 6 and 6; team-e/c-0 on a
3g.71gb instance for 4 h at 0.5 -> 2 and 1; team-e/d-0 on a 2g.35gb instance for 3 h, idle -> 1 allocated and
idle; capacity 4 GPUs x 24 h = 96 GPU-h, from the rules and from raw expressions alike.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpustack.report.compute import Request
from gpustack.report.model import Report
from gpustack.report.source import Prometheus, make_report
from gpustack.runners.http import DirectEndpoint

from .history import DAY, HOUR, Backfilled, History, Node, Pod, backfilled
from .releases import Release

H100, L40S, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA L40S", "NVIDIA H200"
H200_ID = "0x2335"  # H200 141GB (gpustack/config/mig.py)
REL = 0.01


def sharing_history(end: int) -> History:
    start = end - DAY + 60
    nodes = [Node("gpu-h100-01", H100, gpus=1, mig="1g.10gb"), Node("gpu-l40s-01", L40S, gpus=2, replicas=4)]
    pods = [
        Pod("team-a", "infer-0", "gpu-h100-01", (0,), end - 12 * HOUR, end - 2 * HOUR, (0.978,)),
        Pod("team-b", "nb-0", "gpu-h100-01", (1,), end - 9 * HOUR, end - 2 * HOUR, (0.0,)),
        Pod("team-c", "train-0", "gpu-l40s-01", (0,), end - 6 * HOUR, end - 2 * HOUR, (0.5,)),
        Pod("team-c", "train-1", "gpu-l40s-01", (0,), end - 6 * HOUR, end - 2 * HOUR, (0.5,)),
    ]
    return History(start, end, nodes, pods)


@pytest.fixture(scope="module")
def sharing(tmp_path_factory: pytest.TempPathFactory, prometheus_release: Release) -> Iterator[Backfilled]:
    import time

    end = int(time.time()) // 60 * 60 - 60
    pair = backfilled(
        tmp_path_factory.mktemp("sharing-history"), sharing_history(end), None, release=prometheus_release
    )
    try:
        yield pair
    finally:
        pair.stop()


def report(pair: Backfilled, server: str) -> Report:
    prom = Prometheus(DirectEndpoint((pair.rules if server == "rules" else pair.raw).url))
    return make_report(prom, Request(end=pair.history.end, seconds=DAY), "auto")[0]


@pytest.mark.parametrize("server", ["rules", "raw"])
def test_mig_instances_count_their_slices_and_time_sliced_requests_one_over_replicas(
    sharing: Backfilled, server: str
) -> None:
    r = report(sharing, server)
    assert r.source == ("recording rules" if server == "rules" else "raw expressions")
    got = {g.key: (g.allocated_h, g.used_h, g.idle_h) for g in r.groups}
    assert got["team-a"] == pytest.approx((10 / 7, 10 * 0.978 / 7, 0), rel=REL)
    assert got["team-b"] == pytest.approx((1.0, 0, 1.0), rel=REL)
    assert got["team-c"] == pytest.approx((2.0, 1.0, 0), rel=REL)  # two pods, a quarter GPU each for 4 h
    assert r.capacity_h == pytest.approx(72.0, rel=REL)
    assert r.total.allocated_h == pytest.approx(10 / 7 + 1 + 2, rel=REL)
    [idle] = r.idle
    assert (idle.namespace, idle.pod, idle.idle_h) == ("team-b", "nb-0", pytest.approx(1.0, rel=REL))
    assert {n.node: (n.model, n.allocatable) for n in r.nodes} == {"gpu-h100-01": (H100, 1), "gpu-l40s-01": (L40S, 2)}


def h200_history(end: int) -> History:
    start = end - DAY + 60
    layouts = {"gpu-h200-1g": "1g.35gb", "gpu-h200-4g": "4g.71gb", "gpu-h200-3g": "3g.71gb", "gpu-h200-2g": "2g.35gb"}
    nodes = [Node(name, H200, gpus=1, mig=profile, device=H200_ID) for name, profile in layouts.items()]
    pods = [
        Pod("team-d", "a-0", "gpu-h200-1g", (1,), end - 10 * HOUR, end - 2 * HOUR, (0.6,)),
        Pod("team-d", "b-0", "gpu-h200-4g", (0,), end - 8 * HOUR, end - 2 * HOUR, (1.0,)),
        Pod("team-e", "c-0", "gpu-h200-3g", (1,), end - 6 * HOUR, end - 2 * HOUR, (0.5,)),
        Pod("team-e", "d-0", "gpu-h200-2g", (2,), end - 5 * HOUR, end - 2 * HOUR, (0.0,)),
    ]
    return History(start, end, nodes, pods)


@pytest.fixture(scope="module")
def h200(tmp_path_factory: pytest.TempPathFactory, prometheus_release: Release) -> Iterator[Backfilled]:
    import time

    end = int(time.time()) // 60 * 60 - 60
    pair = backfilled(tmp_path_factory.mktemp("h200-history"), h200_history(end), None, release=prometheus_release)
    try:
        yield pair
    finally:
        pair.stop()


def test_h200_layouts_are_one_gpu_each_from_rules_and_raw(h200: Backfilled) -> None:
    reports = {server: report(h200, server) for server in ("rules", "raw")}
    for r in reports.values():
        assert [n.instances() for n in h200.history.nodes] == [4, 1, 2, 3]
        pods = {(g.key, g.allocated_h, g.used_h, g.idle_h) for g in r.groups}
        assert {g.key for g in r.groups} == {"team-d", "team-e"}
        got = {g.key: (g.allocated_h, g.used_h, g.idle_h) for g in r.groups}
        assert got["team-d"] == pytest.approx((2 + 6, 1.2 + 6, 0), rel=REL), pods
        assert got["team-e"] == pytest.approx((2 + 1, 1, 1), rel=REL), pods
        assert r.capacity_h == pytest.approx(96.0, rel=REL)
        assert {n.node: (n.model, n.allocatable) for n in r.nodes} == {
            name: (H200, pytest.approx(1.0, rel=1e-9)) for name in ("gpu-h200-1g", "gpu-h200-4g", "gpu-h200-3g",
                                                                     "gpu-h200-2g")
        }  # fmt: skip
    rules, raw = reports["rules"], reports["raw"]
    assert rules.total.allocated_h == pytest.approx(raw.total.allocated_h, rel=1e-6)
    assert rules.total.used_h == pytest.approx(raw.total.used_h, rel=1e-6)
    assert rules.capacity_h == pytest.approx(raw.capacity_h, rel=1e-6)
