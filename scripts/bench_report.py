#!/usr/bin/env python3
"""Benchmark ``gpustack report`` over 30 days of 100 GPUs (one sample a minute), with and without gpustack's
usage recording rules, against Debian's real Prometheus on loopback. Prints figures; asserts nothing.

What it does, in one run:

1. writes the history of ``--gpus`` GPUs (8 per node, half with profiling metrics) running a sequence of
   1-GPU pods each (2-48 h, with gaps, 10 namespaces) as kube-state-metrics and dcgm-exporter series, one
   sample a minute over ``--days`` days (tests/prometheus/history_scenarios.py ``bench_history``), and imports it with
   ``promtool tsdb create-blocks-from openmetrics``;
2. starts two Prometheus servers on copies of it: one without the usage rules, one with them loaded and
   recorded over the whole history (range queries, imported the same way);
3. runs the report (``--by namespace``, a price per model) ``--repeat`` times against each and prints the
   Prometheus requests it sent and the wall time it waited for them (median), side by side.

Usage: ``python scripts/bench_report.py [--gpus 100] [--days 30] [--repeat 3] [--keep DIR] [--smoke]``
(``--smoke``, for CI: 4 GPUs, 2 days, one report each, as tests/prometheus/test_bench_report.py runs it). Needs
the newest Prometheus the tests run (tests/prometheus/releases.py: Debian sid's, fetched on first use). A full
run takes a few minutes and ~2 GB of temporary disk.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpustack.monitoring.rules import usage_rules_path  # noqa: E402
from gpustack.report.compute import Request  # noqa: E402
from gpustack.report.inputs import parse_prices  # noqa: E402
from gpustack.report.source import RAW_PARALLEL, Prometheus, make_report  # noqa: E402
from gpustack.runners.http import DirectEndpoint  # noqa: E402
from tests.prometheus.harness import PrometheusServer, binaries_missing  # noqa: E402
from tests.prometheus.history import DAY, backfill_rules, load_history, prometheus_yml  # noqa: E402
from tests.prometheus.history_scenarios import bench_history  # noqa: E402


def run_report(server: PrometheusServer, end: int, days: int, mode: str) -> tuple[int, float, float]:
    """(requests, seconds waiting for Prometheus, total allocated GPU-hours) of one report."""
    prom = Prometheus(DirectEndpoint(server.url), timeout=600)
    request = Request(end=end, seconds=days * DAY, prices=parse_prices(["H100=4,A100=2"]))
    report, seconds = make_report(prom, request, mode)
    return prom.requests, seconds, report.total.allocated_h


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=100)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="work in DIR and keep it (default: a temporary directory)")
    parser.add_argument(
        "--query-timeout", default="10m",
        help="Prometheus' --query.timeout (its default, 2m, can stop a raw part on a loaded 2-core machine)",
    )  # fmt: skip
    parser.add_argument("--smoke", action="store_true", help="4 GPUs, 2 days, one report each (CI)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.gpus, args.days, args.repeat = 4, 2, 1
    missing = binaries_missing()
    if missing:
        print(f"bench_report: no Prometheus: {'; '.join(missing)}", file=sys.stderr)
        return 2
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-report-"))
    work.mkdir(parents=True, exist_ok=True)
    end = int(time.time()) // 60 * 60 - 60
    servers: list[PrometheusServer] = []
    try:
        started = time.monotonic()
        history = bench_history(end, gpus=args.gpus, days=args.days)
        samples = load_history(history, work / "raw", work)
        loaded = time.monotonic() - started
        raw = PrometheusServer(prometheus_yml(work / "raw.yml"), work / "raw", work / "raw.log", retention="400d",
                               query_timeout=args.query_timeout)  # fmt: skip
        shutil.copytree(work / "raw", work / "rules")
        rules = PrometheusServer(
            prometheus_yml(work / "rules.yml", [usage_rules_path()]), work / "rules", work / "rules.log",
            retention="400d", query_timeout=args.query_timeout,
        )  # fmt: skip
        servers += [raw.start(timeout=300), rules.start(timeout=300)]
        started = time.monotonic()
        recorded = backfill_rules(rules, history.start, history.end, work)
        backfill = time.monotonic() - started
        print(
            f"bench_report: {args.gpus} GPUs, {args.days} days, one sample a minute: {samples:,} samples, "
            f"{len(history.pods):,} pods (written and imported in {loaded:.1f} s); "
            f"{recorded:,} recorded samples of the usage rules (recorded in {backfill:.1f} s)"
        )
        rows = []
        for label, server, mode in (("raw expressions", raw, "raw"), ("recording rules", rules, "auto")):
            runs = [run_report(server, end, args.days, mode) for _ in range(args.repeat)]
            rows.append((label, runs[0][0], statistics.median(r[1] for r in runs), runs[0][2]))
        print(f"Prometheus --query.timeout={args.query_timeout}; raw window parts {RAW_PARALLEL} at a time")
        print(f"{'source':<18} {'queries':>8} {'wall s':>8} {'allocated GPU-h':>16}")
        for label, queries, seconds, hours in rows:
            print(f"{label:<18} {queries:>8} {seconds:>8.2f} {hours:>16,.1f}")
        (_, raw_q, raw_s, raw_h), (_, rules_q, rules_s, rules_h) = rows
        same = "same numbers" if abs(raw_h - rules_h) <= 1e-6 * max(raw_h, 1) else "NUMBERS DIFFER"
        print(
            f"bench_report: raw/rules wall time = {raw_s / rules_s:.1f}x ({raw_s:.2f} s vs {rules_s:.2f} s, "
            f"median of {args.repeat}); queries {raw_q} vs {rules_q}; {same}"
        )
        return 0
    finally:
        for server in servers:
            server.stop()
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
