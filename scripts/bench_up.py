#!/usr/bin/env python3
"""Benchmark the host layer of `gpustack up` on real test-bed hosts (needs root; see tests/testbed).

One run, three measurements, printed side by side:
  fresh      `up --skip cluster` on one freshly booted host
  converged  the same command again on the same host (nothing left to change)
  three      `up --skip cluster` on three freshly booted hosts (one control plane, two workers)

and the ratios the project tracks (issue #8): converged/fresh (target <= 0.35) and three/one
(target <= 1.5). kubeadm, kubelet, kubectl and helm on the hosts are the test bed's doubles, so
the figures measure gpustack, Ansible, apt, SSH and systemd, not Kubernetes itself.

    python3 scripts/bench_up.py            # prints per-stage seconds and the ratio line
    python3 scripts/bench_up.py --smoke    # one host, fresh + converged (three/one is "-")

tests/testbed/test_bench_up.py runs :func:`bench` with ``smoke`` on the test session's own services (a
subprocess cannot run it there: the session holds the machine-wide test-bed lock and the bed's ports).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.testbed.cluster import up, write_config  # noqa: E402
from tests.testbed.hosts import Testbed  # noqa: E402
from tests.testbed.network import BRIDGE_ADDRESS, TestbedNetwork  # noqa: E402
from tests.testbed.pytest_plugin import (  # noqa: E402
    DOUBLES_DIR,
    HELM_VERSION,
    HTTP_PORT,
    K8S_EXTRA_VERSIONS,
    K8S_MINOR,
    K8S_VERSION,
    PROXY_PORT,
)
from tests.testbed.rootfs import ensure_rootfs  # noqa: E402
from tests.testbed.runtime import publish_runtime  # noqa: E402
from tests.testbed.services import (  # noqa: E402
    ForwardProxy,
    HttpServer,
    Sources,
    build_helm_tarball,
    build_k8s_repo,
    doubles_with_fallback,
)


def timed_up(bed: Testbed, state: Path, sources: Sources, label: str) -> tuple[float, dict[str, dict[str, Any]]]:
    """Wall seconds of one `up --skip cluster` and its summary (read at once: the next run in
    the same state directory writes a newer one)."""
    cfg = write_config(bed, state.parent / f"{label}.yaml", sources)
    start = time.monotonic()
    run = up(cfg, state)
    seconds = time.monotonic() - start
    if run.rc != 0:
        raise SystemExit(f"bench_up: {label} run failed (rc={run.rc}):\n{run.output[-4000:]}")
    print(f"bench_up: {label} done in {seconds:.1f}s (run directory {run.last_run_dir()})", flush=True)
    return seconds, run.summary()


def bench(sources: Sources, work: Path, *, smoke: bool = False) -> str:
    """Run the measurements on freshly booted hosts under ``work``; print the table and return the
    result line (also printed). ``smoke``: the one-host runs only (fresh and converged), no three."""
    rows: list[tuple[str, float, dict[str, dict[str, Any]]]] = []
    with Testbed(["bench1"], work / "one") as bed:
        fresh, summary = timed_up(bed, work / "state-one", sources, "fresh")
        rows.append(("fresh", fresh, summary))
        converged, summary = timed_up(bed, work / "state-one", sources, "converged")
        rows.append(("converged", converged, summary))
    if not smoke:
        with Testbed(["bench1", "bench2", "bench3"], work / "three") as bed:
            three, summary = timed_up(bed, work / "state-three", sources, "three")
            rows.append(("three", three, summary))

    stages = list(rows[0][2])
    print(f"{'run':<10} {'wall s':>7} {'changed':>8}  " + " ".join(f"{s:>13}" for s in stages))
    for label, wall, summary in rows:
        changed = sum(int(r["changed"]) for r in summary.values())
        cells = " ".join(f"{float(summary[s]['elapsed']):>13.1f}" if s in summary else f"{'-':>13}" for s in stages)
        print(f"{label:<10} {wall:>7.1f} {changed:>8}  {cells}")
    three_one = f"{rows[2][1] / fresh:.2f}" if len(rows) > 2 else "- (smoke: one host only)"
    line = f"bench_up: converged/fresh={converged / fresh:.2f} three/one={three_one}"
    print(line, flush=True)
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="one host, fresh and converged runs only (CI)")
    args = parser.parse_args(argv)
    ensure_rootfs()
    TestbedNetwork.acquire()
    work = Path(tempfile.mkdtemp(prefix="gpustack-bench-up-"))
    http = HttpServer(work / "www", host=BRIDGE_ADDRESS, port=HTTP_PORT, log_path=work / "http.log")
    proxy = ForwardProxy(host=BRIDGE_ADDRESS, port=PROXY_PORT, log_path=work / "proxy.log")
    try:
        doubles = doubles_with_fallback(DOUBLES_DIR, work / "doubles")
        repo = build_k8s_repo(doubles, K8S_VERSION, http.root, K8S_MINOR, extra_versions=K8S_EXTRA_VERSIONS)
        helm = build_helm_tarball(doubles / "helm", http.root, HELM_VERSION)
        # containerd 2 and runc as release downloads (preflight P24 probes them), as the test-bed tests publish them
        sources = Sources(http, repo, helm, proxy, publish_runtime(http))
        bench(sources, work, smoke=args.smoke)
    finally:
        proxy.close()
        http.close()
        TestbedNetwork.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
