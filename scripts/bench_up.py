#!/usr/bin/env python3
"""Benchmark the host layer of `gpustack up` on real test-bed hosts (needs root; see tests/testbed).

One run, three measurements, printed side by side:
  fresh      `up --skip cluster` on one freshly booted host
  converged  the same command again on the same host (nothing left to change)
  three      `up --skip cluster` on three freshly booted hosts (one control plane, two workers)

and the ratios the project tracks: converged/fresh (target <= 0.10, issue #20; 0.35 in issue #8) and
three/one (target <= 1.25, issue #20; 1.5 in issue #8). kubeadm, kubelet, kubectl and helm on the hosts are the test bed's doubles, so
the figures measure gpustack, Ansible, apt, SSH and systemd, not Kubernetes itself.

The line before the ratios gives each run's CPU seconds here (gpustack, Ansible, ssh) and on the hosts
(scripts/hostcpu.py): the test bed's hosts share this machine's cores, so three hosts' work adds up here.

    python3 scripts/bench_up.py            # prints per-stage seconds and the ratio line
    python3 scripts/bench_up.py --smoke    # one host, fresh + converged (three/one is "-")

tests/testbed/test_up_single.py runs the smoke path (:func:`one_host`, then :func:`report`, as ``bench(...,
smoke=True)`` does) on the test session's own services and on the host its other tests then inspect (a
subprocess cannot run it there: the session holds the machine-wide test-bed lock and the bed's ports).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.hostcpu import HostCpu, split  # noqa: E402
from tests.testbed.cluster import UpRun, up, write_config  # noqa: E402
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


class BenchError(RuntimeError):
    """A measured run failed (the script exits 1 with its output)."""


@dataclass
class Row:
    label: str
    wall: float
    #: the run's summary, read at once: the next run in the same state directory writes a newer one
    summary: dict[str, dict[str, Any]]
    run: UpRun
    #: CPU seconds (this machine's: gpustack, Ansible, ssh; the hosts') during the run; None: not measured
    cpu: tuple[float, float] | None = None


def timed_up(bed: Testbed, state: Path, sources: Sources, label: str, cpu: HostCpu | None = None) -> Row:
    """Wall seconds of one `up --skip cluster`, with its summary and the run itself (and, with ``cpu``, the CPU
    seconds here and on the hosts)."""
    cfg = write_config(bed, state.parent / f"{label}.yaml", sources)
    before = cpu.sample() if cpu else None
    start = time.monotonic()
    run = up(cfg, state)
    seconds = time.monotonic() - start
    used = split(before, cpu.sample() if cpu else None)
    if run.rc != 0:
        raise BenchError(f"bench_up: {label} run failed (rc={run.rc}):\n{run.output[-4000:]}")
    print(f"bench_up: {label} done in {seconds:.1f}s (run directory {run.last_run_dir()})", flush=True)
    return Row(label, seconds, run.summary(), run, used)


def one_host(bed: Testbed, state: Path, sources: Sources, cpu: HostCpu | None = None) -> list[Row]:
    """``fresh`` and ``converged`` on ``bed``'s one freshly booted host (state in ``state``)."""
    return [timed_up(bed, state, sources, "fresh", cpu), timed_up(bed, state, sources, "converged", cpu)]


def report(rows: list[Row]) -> str:
    """The table (wall seconds, changed count and seconds per stage) and, last, the result line."""
    stages = list(rows[0].summary)
    lines = [f"{'run':<10} {'wall s':>7} {'changed':>8}  " + " ".join(f"{s:>13}" for s in stages)]
    for row in rows:
        changed = sum(int(r["changed"]) for r in row.summary.values())
        cells = " ".join(
            f"{float(row.summary[s]['elapsed']):>13.1f}" if s in row.summary else f"{'-':>13}" for s in stages
        )
        lines.append(f"{row.label:<10} {row.wall:>7.1f} {changed:>8}  {cells}")
    cpus = [row.cpu for row in rows if row.cpu]
    if len(cpus) == len(rows):
        # three "machines" share this machine's cores with the controller: the hosts' CPU adds up here, where
        # real hosts would each use their own
        cpu = " ".join(f"{row.label} {here:.1f}/{hosts:.1f}" for row, (here, hosts) in zip(rows, cpus, strict=True))
        ratio = (
            f"; three/one here={cpus[2][0] / cpus[0][0]:.2f} hosts={cpus[2][1] / cpus[0][1]:.2f}"
            if len(cpus) > 2
            else ""
        )
        lines.append(f"bench_up: CPU seconds here/hosts: {cpu}{ratio}")
    fresh, converged = rows[0].wall, rows[1].wall
    three_one = f"{rows[2].wall / fresh:.2f}" if len(rows) > 2 else "- (smoke: one host only)"
    lines.append(f"bench_up: converged/fresh={converged / fresh:.2f} three/one={three_one}")
    return "\n".join(lines)


def host_cpu(bed: Testbed) -> HostCpu:
    """The CPU accounting of ``bed``'s booted hosts (their systemd-nspawn processes and everything below)."""
    return HostCpu(h.nspawn.pid for h in bed.hosts if h.nspawn)


def bench(sources: Sources, work: Path, *, smoke: bool = False) -> str:
    """Run the measurements on freshly booted hosts under ``work``; print the table and return the
    result line (also printed). ``smoke``: the one-host runs only (fresh and converged), no three."""
    with Testbed(["bench1"], work / "one") as bed, host_cpu(bed) as cpu:
        rows = one_host(bed, work / "state-one", sources, cpu)
    if not smoke:
        with (
            Testbed(["bench1", "bench2", "bench3"], work / "three") as bed,
            host_cpu(bed) as cpu,
        ):
            rows.append(timed_up(bed, work / "state-three", sources, "three", cpu))
    text = report(rows)
    print(text, flush=True)
    return text.splitlines()[-1]


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
    except BenchError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        proxy.close()
        http.close()
        TestbedNetwork.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
