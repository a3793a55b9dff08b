#!/usr/bin/env python3
"""Benchmark `gpustack doctor` / `verify --no-workload` (layers kubernetes,gpu-operator) against FakeKubeAPI.

For 1, 10, 100 and 1000 nodes (8 GPUs each, ~10 pods per node) the fake API server is seeded with a
healthy gpustack cluster (tests/fakes/scenarios.py); then the real engine runs: collect (the
``kubernetes`` source, real ``kubernetes`` client, page size 500; hosts/prometheus/grafana sources
off by the layer selection) and every kubernetes/gpu-operator check. Prints API requests made and wall
time per size, and the 1000/1 ratios. Target: requests flat (pagination pages aside), time <= 5x.

    python3 scripts/bench_doctor.py [--sizes 1,10,100,1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.diagnose import engine
from gpustack.runners.kube import Kube
from tests.fakes import scenarios
from tests.fakes.kube_api import FakeKubeAPI

LAYERS = ("kubernetes", "gpu-operator")
PAGE_SIZE = 500


def run_once(api: FakeKubeAPI, kube: Kube, command: str) -> tuple[int, int, float, int]:
    """(requests seen by the server, requests counted by the collector, seconds, findings)."""
    opts = engine.DiagnoseOptions(command=command, layers=LAYERS, output="json", workload=False,
                                  extra={"kube": kube, "kube_page_size": PAGE_SIZE})  # fmt: skip
    api.reset_requests()
    started = time.perf_counter()
    code, findings, snap = engine.diagnose(Config.model_validate({}), opts, Console(stream=io.StringIO()))
    elapsed = time.perf_counter() - started
    if code not in (0, 1):
        raise SystemExit(f"{command}: exit {code}: {snap.errors}")
    fails = [f.id for f in findings if f.status == "fail"]
    if fails:
        print(f"  warning: healthy cluster reported failures: {fails}", file=sys.stderr)
    return api.request_count, snap.requests, elapsed, len(findings)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,10,100,1000")
    ap.add_argument("--repeat", type=int, default=3, help="runs per size and command (the median is reported)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[tuple[str, int], tuple[int, int, float]] = {}
    print(f"{'command':<8} {'nodes':>6} {'pods':>7} {'objects':>8} {'requests':>9} {'wall s':>8} {'findings':>9}")
    for n in sizes:
        scenario = scenarios.healthy(n)
        pods = sum(1 for o in scenario.objects if o["kind"] == "Pod")
        with FakeKubeAPI.running() as api:
            api.seed(scenario.objects)
            with tempfile.TemporaryDirectory() as tmp:
                kube = Kube.from_kubeconfig(api.write_kubeconfig(Path(tmp) / "kubeconfig"))
                for command in ("doctor", "verify"):
                    run_once(api, kube, command)  # warm-up (imports, discovery caches, connection)
                    runs = [run_once(api, kube, command) for _ in range(args.repeat)]
                    server, counted, _, nfind = runs[-1]
                    wall = statistics.median(r[2] for r in runs)
                    results[(command, n)] = (server, counted, wall)
                    print(
                        f"{command:<8} {n:>6} {pods:>7} {len(scenario.objects):>8} {server:>9} {wall:>8.3f} {nfind:>9}"
                    )
    lo, hi = min(sizes), max(sizes)
    ok = True
    for command in ("doctor", "verify"):
        (r1, _, t1), (rn, _, tn) = results[(command, lo)], results[(command, hi)]
        ratio = tn / t1 if t1 else float("inf")
        print(f"{command}: {hi}/{lo} nodes: requests {rn}/{r1}, wall time ratio {ratio:.2f}x (target <= 5x)")
        ok &= ratio <= 5.0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
