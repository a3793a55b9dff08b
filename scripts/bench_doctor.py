#!/usr/bin/env python3
"""Benchmark `gpustack doctor` and `gpustack verify --no-workload` against the fake Kubernetes API server.

For 1, 10, 100 and 1000 nodes (8 GPUs each, ~10 pods per node) a TEST DOUBLE API server
(tests/fakes/serve_kube_api.py) runs in its own process, seeded with a healthy gpustack cluster
(tests/fakes/scenarios.py). Two figures per size and command, measured side by side in one run:

- ``cli s``: the command as a user runs it, end to end, in a fresh process:
  ``python -m gpustack doctor --kubeconfig KC --layer kubernetes,gpu-operator --output json``
  (interpreter start, imports, collection over HTTP, every check, the JSON report);
- ``engine s``: the same collection and checks in this process (``engine.diagnose``), i.e. without
  the interpreter start and imports, which are constant.

The layers are kubernetes and gpu-operator: the ones whose data grows with the node count and that the
fake API server serves (hosts are reached over SSH). ``requests`` are counted by the server. Targets
(issue 32, after issue 4's 5x): requests flat with the node count -- the largest size may add no more requests
than the LIST pages its extra objects fill (pages of 500) --, and the command's wall time at the largest size
<= 2x the smallest's, for doctor and verify alike. Both commands' ratios are printed side by side at the end,
with the engine's (how analysis + JSON decoding scale), then one result line:

    bench_doctor: 1000/1 nodes: doctor 1.31x, verify 1.29x (target <= 2x); requests doctor 17->38, verify ...

(which goes on ``17->38 (LIST pages only: +21 <= 23); OK``; exit 0 when both targets are met, 1 otherwise).

``--monitoring`` adds the monitoring and grafana layers (issue 11): per size, a REAL Prometheus scraping a
replayed fleet of that many nodes (tests/prometheus/fleet.py; needs Debian's prometheus) and the fake
Grafana on it, both behind the fake API server's service proxy, the Grafana password only in the cluster's
Secret. Then ``requests`` also counts the proxied Prometheus/Grafana calls; the verdict (every check's
status) must be the same at every size.

    python3 scripts/bench_doctor.py [--sizes 1,10,100,1000] [--repeat 3] [--monitoring] [--smoke]

``--smoke`` (CI, tests/unit/test_bench_smoke.py): sizes 1 and 20 (with ``--monitoring``: 1 only, a real Prometheus per size is slow), one run each.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpustack.config.model import Config  # noqa: E402
from gpustack.console import Console  # noqa: E402
from gpustack.diagnose import engine  # noqa: E402
from gpustack.runners.kube import Kube  # noqa: E402
from gpustack.runners.kubeconfig import kube_from_file  # noqa: E402

LAYERS = ("kubernetes", "gpu-operator")
COMMANDS = {"doctor": ["doctor"], "verify": ["verify", "--no-workload"]}
PAGE_SIZE = 500
TARGET = 2.0  # the command's wall time at the largest size over the smallest's (issue 32)


class Server:
    """The fake API server in a child process (``upstreams``: its service proxy's ``NS/SERVICE/PORT=URL``)."""

    def __init__(self, nodes: int, kubeconfig: Path, upstreams: tuple[str, ...] = ()) -> None:
        extra = [a for u in upstreams for a in ("--upstream", u)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.serve_kube_api", "--nodes", str(nodes), "--kubeconfig", str(kubeconfig),
             *extra],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "ready":
            self.close()
            raise SystemExit(f"fake API server did not start: {line}")
        self.url, self.objects = line[1], int(line[2])

    def _control(self, path: str, method: str = "GET") -> int:
        req = urllib.request.Request(self.url + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(json.load(resp)["requests"])

    def reset(self) -> None:
        self._control("/_fake/reset", "POST")

    def requests(self) -> int:
        return self._control("/_fake/requests")

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


Verdict = tuple[tuple[str, str], ...]  # sorted (check id, status) pairs


def run_cli(
    server: Server, command: str, kubeconfig: Path, home: Path, layers: tuple[str, ...] = LAYERS
) -> tuple[int, float, int, Verdict, float]:
    """(requests, seconds, findings, verdict, CPU seconds of the CLI process) for one CLI run in a fresh process."""
    env = {**os.environ, "GPUSTACK_STATE_DIR": str(home / "state"), "HOME": str(home), "NO_COLOR": "1"}
    argv = [sys.executable, "-m", "gpustack", *COMMANDS[command], "--kubeconfig", str(kubeconfig),
            "--layer", ",".join(layers), "--output", "json"]  # fmt: skip
    server.reset()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # the server is a child too, but it has not ended
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=home, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}\n{proc.stderr}")
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(
            f"{' '.join(argv)}: no JSON report on stdout\n{proc.stdout[:2000]}{proc.stderr[-2000:]}"
        ) from None
    fails = [c["id"] for c in report["checks"] if c["status"] == "fail"]
    if fails:
        print(f"  warning: healthy cluster reported failures: {fails}", file=sys.stderr)
    verdict = tuple(sorted({(c["id"], c["status"]) for c in report["checks"]}))
    return server.requests(), elapsed, len(report["checks"]), verdict, cpu


def bench_monitoring(sizes: list[int], repeat: int) -> int:
    """doctor with all four cluster layers against a real Prometheus per size (see the module docstring)."""
    sys.path.insert(0, str(ROOT))
    from gpustack.constants import (
        GRAFANA_PORT,
        GRAFANA_SERVICE,
        MONITORING_NAMESPACE,
        PROMETHEUS_PORT,
        PROMETHEUS_SERVICE,
    )
    from gpustack.monitoring.dashboard import load_capacity_dashboard, load_dashboard
    from gpustack.render.manifests import EXPORTER_TARGETS
    from tests.fakes.grafana_api import FakeGrafana
    from tests.fakes.scenarios import GRAFANA_PASSWORD
    from tests.prometheus.fleet import running_fleet

    layers = (*LAYERS, "monitoring", "grafana")
    results: dict[int, tuple[int, float, Verdict]] = {}
    print(f"{'nodes':>6} {'requests':>9} {'doctor s':>9} {'checks':>7}  (layers {','.join(layers)})")
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            with running_fleet(home / "fleet", n, timeout=300) as fleet, \
                    FakeGrafana.running(fleet.prometheus.url, password=GRAFANA_PASSWORD) as grafana:  # fmt: skip
                grafana.add_dashboard(load_dashboard())
                grafana.add_dashboard(load_capacity_dashboard())
                exporter = EXPORTER_TARGETS["standalone"]
                upstreams = (f"{MONITORING_NAMESPACE}/{PROMETHEUS_SERVICE}/{PROMETHEUS_PORT}={fleet.prometheus.url}",
                             f"{MONITORING_NAMESPACE}/{GRAFANA_SERVICE}/{GRAFANA_PORT}={grafana.url}",
                             f"{exporter.namespace}/{exporter.service}/{exporter.port}=http://{fleet.address}")  # fmt: skip
                kc = home / "kubeconfig"
                server = Server(n, kc, upstreams)
                try:
                    run_cli(server, "doctor", kc, home, layers)  # warm-up
                    runs = [run_cli(server, "doctor", kc, home, layers) for _ in range(repeat)]
                finally:
                    server.close()
            results[n] = (runs[-1][0], statistics.median(r[1] for r in runs), runs[-1][3])
            print(f"{n:>6} {runs[-1][0]:>9} {results[n][1]:>9.2f} {runs[-1][2]:>7}")
    lo, hi = min(sizes), max(sizes)
    same = results[lo][2] == results[hi][2]
    print(f"doctor (4 cluster layers): {hi}/{lo} nodes: requests {results[hi][0]}/{results[lo][0]}; wall time "
          f"{results[hi][1]:.2f}/{results[lo][1]:.2f} s = {results[hi][1] / results[lo][1]:.2f}x; "
          f"verdict {'the same' if same else 'DIFFERENT'}")  # fmt: skip
    return 0 if same else 1


def run_engine(server: Server, command: str, kube: Kube) -> tuple[int, float, int]:
    """(requests, seconds, findings) for the engine in this process."""
    opts = engine.DiagnoseOptions(command=command, layers=LAYERS, output="json", workload=False,
                                  extra={"kube": kube, "kube_page_size": PAGE_SIZE})  # fmt: skip
    server.reset()
    started = time.perf_counter()
    code, findings, snap = engine.diagnose(Config.model_validate({}), opts, Console(stream=io.StringIO()))
    elapsed = time.perf_counter() - started
    if code not in (0, 1):
        raise SystemExit(f"{command}: exit {code}: {snap.errors}")
    return server.requests(), elapsed, len(findings)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,10,100,1000")
    ap.add_argument("--repeat", type=int, default=3, help="runs per size and command (the median is reported)")
    ap.add_argument(
        "--monitoring", action="store_true", help="also the monitoring and grafana layers (real Prometheus)"
    )
    ap.add_argument("--smoke", action="store_true", help="sizes 1,20 (1 with --monitoring), one run each (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.sizes, args.repeat = ("1" if args.monitoring else "1,20"), 1
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.monitoring:
        return bench_monitoring(sizes, args.repeat)
    cli: dict[tuple[str, int], tuple[int, float]] = {}
    eng: dict[tuple[str, int], tuple[int, float]] = {}
    objects: dict[int, int] = {}
    cpu: dict[tuple[str, int], float] = {}
    print(f"{'command':<8} {'nodes':>6} {'objects':>8} {'requests':>9} {'cli s':>8} {'cli cpu s':>9} {'engine s':>9} "
          f"{'checks':>7}")  # fmt: skip
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            kc = home / "kubeconfig"
            server = Server(n, kc)
            objects[n] = server.objects
            try:
                kube = kube_from_file(kc)
                for command in COMMANDS:
                    run_cli(server, command, kc, home)  # warm-up: page cache, .pyc files
                    run_engine(server, command, kube)  # warm-up: imports, discovery cache, connection
                    c_runs = [run_cli(server, command, kc, home) for _ in range(args.repeat)]
                    e_runs = [run_engine(server, command, kube) for _ in range(args.repeat)]
                    cli[(command, n)] = (c_runs[-1][0], statistics.median(r[1] for r in c_runs))
                    cpu[(command, n)] = statistics.median(r[4] for r in c_runs)
                    eng[(command, n)] = (e_runs[-1][0], statistics.median(r[1] for r in e_runs))
                    print(f"{command:<8} {n:>6} {server.objects:>8} {c_runs[-1][0]:>9} "
                          f"{cli[(command, n)][1]:>8.3f} {cpu[(command, n)]:>9.3f} {eng[(command, n)][1]:>9.3f} "
                          f"{c_runs[-1][2]:>7}")  # fmt: skip
            finally:
                server.close()
    lo, hi = min(sizes), max(sizes)
    print("CPU time of the command's process (what a loaded machine does not inflate): " + ", ".join(
        f"{c} {cpu[(c, lo)]:.2f} -> {cpu[(c, hi)]:.2f} s = {cpu[(c, hi)] / cpu[(c, lo)] if cpu[(c, lo)] else 0:.2f}x"
        for c in COMMANDS))  # fmt: skip
    return summary(cli, eng, objects, lo, hi)


def pages(objects: int) -> int:
    """LIST pages ``objects`` more objects can fill: the requests a larger cluster may add (pagination)."""
    return -(-objects // PAGE_SIZE)


def summary(
    cli: dict[tuple[str, int], tuple[int, float]], eng: dict[tuple[str, int], tuple[int, float]],
    objects: dict[int, int], lo: int, hi: int,
) -> int:  # fmt: skip
    """doctor's and verify's ratios side by side, then the result line; 0 when both meet the targets."""
    allowed = pages(objects[hi] - objects[lo])
    print(f"\n{f'{hi}/{lo} nodes':<14} {'requests':>16} {'command wall time (<= 2x)':>30} {'engine only':>26}")
    ratios: dict[str, float] = {}
    flat = True
    for command in COMMANDS:
        (r1, t1), (rn, tn) = cli[(command, lo)], cli[(command, hi)]
        (_, e1), (_, en) = eng[(command, lo)], eng[(command, hi)]
        ratios[command] = tn / t1 if t1 else float("inf")
        flat &= rn - r1 <= allowed
        print(f"{command:<14} {f'{r1} -> {rn} (+{rn - r1})':>16} "
              f"{f'{t1:.2f} -> {tn:.2f} s = {ratios[command]:.2f}x':>30} "
              f"{f'{e1:.3f} -> {en:.3f} s = {en / e1 if e1 else 0:.1f}x':>26}")  # fmt: skip
    ok = flat and all(r <= TARGET for r in ratios.values())
    reqs = ", ".join(f"{c} {cli[(c, lo)][0]}->{cli[(c, hi)][0]}" for c in COMMANDS)
    grown = max(cli[(c, hi)][0] - cli[(c, lo)][0] for c in COMMANDS)
    print(f"bench_doctor: {hi}/{lo} nodes: " + ", ".join(f"{c} {r:.2f}x" for c, r in ratios.items())
          + f" (target <= {TARGET:g}x); requests {reqs} (LIST pages only: +{grown} <= {allowed}); "
          + ("OK" if ok else "MISSED"))  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
