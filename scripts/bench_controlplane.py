#!/usr/bin/env python3
"""doctor, verify and health against the REAL API server beside the fake one, at 1 to 1,000 kwok nodes.

For each size, the same healthy gpustack cluster (tests/fakes/scenarios.py ``healthy(N)``: 8 GPUs per node, ~10
pods per node) is held by

- the fake API server (tests/fakes/serve_kube_api.py) in its own process, as scripts/bench_doctor.py runs it;
- a real control plane (tests/controlplane: kube-apiserver 1.36.5 with etcd, the controller-manager and scheduler
  that make the pods, kwok for the nodes; load time printed), built from the scenario's inputs
  (tests/controlplane/load.py).

Per size, command and server: the command's wall time as a user runs it (``python -m gpustack doctor|verify
--no-workload --layer kubernetes,gpu-operator --output json``, a fresh process, the median of ``--repeat`` runs),
and the requests it makes (counted in this process: the engine, or ``health``'s runner, through gpustack's one
client path, ``Kube._send``). ``health`` (evaluate only, no ``--apply``) reads the nodes and the breaker's ledger;
its GPU series come from the Prometheus API double (tests/fakes/prometheus_api.py) on both servers. Printed side by
side: real/fake wall time per size, and each server's wall time at the largest size over the smallest.

    python3 scripts/bench_controlplane.py [--sizes 1,10,100,1000] [--repeat 3] [--smoke]

Needs the real binaries (``python3 -m tests.realbin.gobuild``). ``--smoke`` (CI:
tests/controlplane/test_bench_smoke.py): size 1, one run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench_doctor import COMMANDS, LAYERS, PAGE_SIZE  # noqa: E402
from bench_doctor import Server as FakeServer  # noqa: E402

from gpustack.config.model import Config  # noqa: E402
from gpustack.console import Console  # noqa: E402
from gpustack.diagnose import engine  # noqa: E402
from gpustack.health.policy import Settings  # noqa: E402
from gpustack.health.runner import HealthOptions, run_health  # noqa: E402
from gpustack.runners.kube import Kube  # noqa: E402
from gpustack.runners.kubeconfig import kube_from_file  # noqa: E402
from tests.controlplane.cluster import gpustack_config, running  # noqa: E402
from tests.controlplane.load import load  # noqa: E402
from tests.controlplane.written import CONTROLLER_ARGS  # noqa: E402
from tests.fakes import scenarios as sc  # noqa: E402
from tests.fakes.pod_cidrs import cluster_pod_cidr  # noqa: E402
from tests.fakes.prometheus_api import FakePrometheus  # noqa: E402

SERVERS = ("fake", "real")


class Counter:
    """Counts every request gpustack's client sends in this process (``Kube._send``: the one way out)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        self._orig = Kube._send

    @contextmanager
    def counting(self) -> Iterator[None]:
        counter = self

        def send(kube: Kube, method: str, path: str, **kw: Any) -> Any:
            with counter._lock:
                counter.count += 1
            return counter._orig(kube, method, path, **kw)

        self.count = 0
        Kube._send = send  # type: ignore[method-assign,assignment]
        try:
            yield
        finally:
            Kube._send = self._orig  # type: ignore[method-assign]


def cli_seconds(
    command: str, kubeconfig: Path, home: Path
) -> tuple[float, tuple[tuple[str, str], ...], dict[str, str]]:
    env = {**os.environ, "GPUSTACK_STATE_DIR": str(home / "state"), "HOME": str(home), "NO_COLOR": "1"}
    argv = [sys.executable, "-m", "gpustack", *COMMANDS[command], "--kubeconfig", str(kubeconfig),
            "--layer", ",".join(LAYERS), "--output", "json"]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=home, env=env, capture_output=True, text=True, timeout=900, check=False)
    elapsed = time.perf_counter() - started
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}, no report\n{proc.stderr[-2000:]}") from None
    # K11 reads the kubeconfig, not the server: a client certificate on the real one, a token on the fake's
    checks = [c for c in report["checks"] if not c["id"].startswith("K11-")]
    said = {c["id"]: str(c.get("message") or c.get("summary") or c.get("detail") or "") for c in checks}
    return elapsed, tuple(sorted({(c["id"], c["status"]) for c in checks})), said


def engine_requests(command: str, kube: Kube, counter: Counter) -> int:
    opts = engine.DiagnoseOptions(command=command, layers=LAYERS, output="json", workload=False,
                                  extra={"kube": kube, "kube_page_size": PAGE_SIZE})  # fmt: skip
    with counter.counting():
        engine.diagnose(Config.model_validate({}), opts, Console(stream=io.StringIO()))
    return counter.count


def prometheus_for(nodes: list[str]) -> FakePrometheus:
    prom = FakePrometheus().start()
    for name in nodes:
        prom.add("kube_node_status_allocatable", {"node": name}, 8)
        for gpu in range(8):
            labels = {"node": name, "gpu": str(gpu), "UUID": f"GPU-{name}-{gpu}"}
            prom.add("DCGM_FI_DEV_XID_ERRORS", {**labels, "err_code": "0"}, 0)
            prom.add("DCGM_EXP_XID_ERRORS_COUNT", {**labels, "window_size_in_ms": "300000"}, 0)
    return prom


def health_run(kube: Kube, prom: FakePrometheus, counter: Counter) -> tuple[int, float]:
    opts = HealthOptions(settings=Settings(), prometheus_url=prom.url)
    started = time.perf_counter()
    with counter.counting():
        run_health(kube, opts, Console(stream=io.StringIO()), now=time.time())
    return counter.count, time.perf_counter() - started


def measure(kubeconfig: Path, home: Path, n: int, repeat: int, counter: Counter) -> dict[str, Any]:
    kube = kube_from_file(kubeconfig)
    out: dict[str, Any] = {}
    for command in COMMANDS:
        cli_seconds(command, kubeconfig, home)  # warm-up: page cache, .pyc files, the server's caches
        runs = [cli_seconds(command, kubeconfig, home) for _ in range(repeat)]
        out[command] = (engine_requests(command, kube, counter), statistics.median(r[0] for r in runs), runs[-1][1],
                        runs[-1][2])  # fmt: skip
    prom = prometheus_for([sc.node_name(i, n) for i in range(n)])
    try:
        health_run(kube, prom, counter)
        runs_h = [health_run(kube, prom, counter) for _ in range(repeat)]
    finally:
        prom.stop()
    out["health"] = (runs_h[-1][0], statistics.median(r[1] for r in runs_h), (), {})
    return out


#: Flags added to kubeadm's for the benchmark's control plane (the same at every size): the controller-manager's
#: client rate limit (20 requests/s, burst 30 by default; 100/200 here: 500/1,000 starved the API server itself on
#: 2 cores) alone needs minutes for the ~9,000 DaemonSet pods of 1,000 nodes, and its leader lease (15 s, renewed
#: within 10 s by default) lapses on a starved 2-core machine, which makes it exit. The commands measured talk to
#: the API server, whose flags are kubeadm's, unchanged. The node lifecycle controller's grace period (50 s by
#: default) is 10 minutes here: kwok renews 1,000 nodes' Leases from one process, and on 2 cores, while ~10,000 pods
#: are written, a renewal falls more than 50 s behind; the controller then marks the node Unknown, and kwok's
#: heartbeat stage (which selects Ready=True nodes only) never makes it Ready again (2026-11-29 11:09-11:35 UTC:
#: 286 of 1,000 nodes NotReady, their Leases renewed seconds before).
HARNESS_ARGS = {
    "kube-controller-manager": ["--kube-api-qps=100", "--kube-api-burst=200", "--concurrent-daemonset-syncs=8",
                                "--leader-elect-lease-duration=120s", "--leader-elect-renew-deadline=100s",
                                "--node-monitor-grace-period=10m"],
}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,10,100,1000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="size 1, one run (CI)")
    ap.add_argument("--daemonset-pods", choices=("controller", "written"), default="controller",
                    help="who makes the DaemonSets' pods on the real control plane: the real DaemonSet controller, "
                    "scheduler and kwok, or written as they would write them (tests/controlplane/written.py: "
                    "1,000 nodes on 2 cores)")  # fmt: skip
    args = ap.parse_args()
    # a killed run stops its control plane too (the `with` blocks' cleanup runs on SystemExit, not on a bare SIGTERM)
    # (a second SIGTERM, as `timeout` and `pkill -f` together send, is ignored: it would cut that cleanup short)
    signal.signal(signal.SIGTERM, lambda *_: (signal.signal(signal.SIGTERM, signal.SIG_IGN), sys.exit(143)))
    if args.smoke:
        args.sizes, args.repeat = "1", 1
    sizes = [int(s) for s in args.sizes.split(",")]
    counter = Counter()
    results: dict[tuple[str, str, int], tuple[Any, ...]] = {}
    print(f"{'command':<8} {'nodes':>6} {'fake req':>9} {'real req':>9} {'fake s':>8} {'real s':>8} {'real/fake':>10}")
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            fake = FakeServer(n, home / "fake.conf")
            try:
                for command, row in measure(home / "fake.conf", home, n, args.repeat, counter).items():
                    results[("fake", command, n)] = row
            finally:
                fake.close()
            write = args.daemonset_pods == "written"
            harness = {k: [*v, *(CONTROLLER_ARGS if write and k == "kube-controller-manager" else [])]
                       for k, v in HARNESS_ARGS.items()}  # fmt: skip
            # the cluster CIDR a cluster of n nodes is built with (a /24 per node: the default /16 holds 256)
            cfg = gpustack_config(pod_cidr=cluster_pod_cidr(n))
            with running(home / "cp", cfg, extra_args=harness) as cp:
                took = load(kube_from_file(cp.admin_kubeconfig), sc.healthy(n), timeout=3600,
                            write_daemonset_pods=write)  # fmt: skip
                print(f"  real control plane: started in {cp.started_in['total']:.1f} s, {n} nodes loaded in "
                      f"{sum(took.values()):.1f} s ({', '.join(f'{k} {v:.1f} s' for k, v in took.items())}); "
                      f"restarts: {cp.restarts or 'none'}")  # fmt: skip
                for command, row in measure(cp.admin_kubeconfig, home, n, args.repeat, counter).items():
                    results[("real", command, n)] = row
        for command in (*COMMANDS, "health"):
            f, r = results[("fake", command, n)], results[("real", command, n)]
            print(f"{command:<8} {n:>6} {f[0]:>9} {r[0]:>9} {f[1]:>8.2f} {r[1]:>8.2f} {r[1] / f[1]:>9.2f}x")
    lo, hi = min(sizes), max(sizes)
    same = True
    for command in (*COMMANDS, "health"):
        scale = {s: results[(s, command, hi)][1] / results[(s, command, lo)][1] for s in SERVERS}
        print(f"{command}: {hi} nodes: real/fake wall time {results[('real', command, hi)][1]:.2f}/"
              f"{results[('fake', command, hi)][1]:.2f} s = "
              f"{results[('real', command, hi)][1] / results[('fake', command, hi)][1]:.2f}x; requests real "
              f"{results[('real', command, hi)][0]}, fake {results[('fake', command, hi)][0]}; {hi}/{lo} nodes: "
              f"real {scale['real']:.2f}x, fake {scale['fake']:.2f}x")  # fmt: skip
        if command in COMMANDS:
            for s in sizes:
                on_real, on_fake = set(results[("real", command, s)][2]), set(results[("fake", command, s)][2])
                for server, only in (("real", on_real - on_fake), ("fake", on_fake - on_real)):
                    for check, status in sorted(only):
                        said = results[(server, command, s)][3].get(check, "")
                        print(f"  {command} at {s} nodes, only on the {server} server: {check} {status}: {said[:300]}")
                same &= on_real == on_fake
    print(f"verdicts: {'the same on both servers at every size' if same else 'DIFFERENT between the servers'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
