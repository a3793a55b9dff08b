#!/usr/bin/env python3
"""Benchmark the cluster layer with the fake helm executable and the fake API server (one run).

Prints, for a fresh run and a converged re-run: wall time, Helm calls (mutating vs read) and API
writes. The fakes make no real changes; the numbers show gpustack's own overhead and idempotence.
The last line is the result: the converged run's mutating Helm calls (0: gpustack is idempotent), its
API writes (server-side applies of the namespaces, the Grafana Secret and the manifests, which the API
server answers unchanged: 8 today) and the two wall times.

    python3 scripts/bench_cluster.py [--smoke]

``--smoke`` (CI, tests/unit/test_bench_smoke.py) is the same run: against the fakes it is already small.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpustack.cluster.layer import run_cluster_layer  # noqa: E402
from gpustack.config.model import Config  # noqa: E402
from gpustack.console import Console  # noqa: E402
from gpustack.render.values import FactsSummary  # noqa: E402
from gpustack.runners.helm import Helm  # noqa: E402
from gpustack.runners.kubeconfig import kube_from_file  # noqa: E402
from tests.fakes.kube_api import FakeKubeAPI  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="CI's run (the same: the fakes make it small)")
    parser.parse_args(argv)
    cfg = Config.model_validate({"monitoring": {"prometheus_storage": {"storage_class": "local-path"}}})
    with tempfile.TemporaryDirectory() as tmp, FakeKubeAPI.running() as api:
        os.environ.update(
            FAKE_HELM_STATE=f"{tmp}/helm", FAKE_HELM_LOG=f"{tmp}/helm.jsonl", FAKE_HELM_API=api.url, FAKE_HELM_DELAY="0"
        )
        kc = api.write_kubeconfig(Path(tmp) / "kubeconfig")
        print(f"{'run':<10} {'wall s':>7} {'helm mutating':>14} {'helm read':>10} {'api writes':>11}  steps")
        result: dict[str, tuple[float, int, int]] = {}
        for label in ("fresh", "converged"):
            helm = Helm(kc, executable=str(ROOT / "tests" / "fakes" / "helm"))
            writes = len(api.mutating_requests())
            start = time.monotonic()
            steps = run_cluster_layer(
                cfg,
                kc,
                FactsSummary(),
                Console(stream=io.StringIO()),
                helm=helm,
                kube=kube_from_file(kc),
                state_root=Path(tmp) / "state",
            )
            wall = time.monotonic() - start
            counts = helm.call_counts()
            result[label] = (wall, counts["mutating"], len(api.mutating_requests()) - writes)
            detail = " ".join(f"{s.step}={s.status}:{s.seconds:.2f}s" for s in steps)
            print(
                f"{label:<10} {wall:>7.2f} {counts['mutating']:>14} {counts['read']:>10} "
                f"{len(api.mutating_requests()) - writes:>11}  {detail}"
            )
    (fresh, _, _), (converged, mutating, writes) = result["fresh"], result["converged"]
    print(f"bench_cluster: converged helm mutating={mutating} api writes (server-side applies)={writes}; "
          f"wall fresh={fresh:.2f}s converged={converged:.2f}s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
