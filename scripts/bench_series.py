#!/usr/bin/env python3
"""Series budget of gpustack's dcgm-exporter counters (values/dcgm-counters.csv).

Prints, for each exported metric, its type, the series it costs per GPU and which rules/panels read
it; then the metrics nothing reads, the label-only fields, and the verdict against the target of
at most 40 series per GPU. Exit status 1 if the budget is exceeded, a rule or panel reads a metric
the CSV does not export, or an exported metric is neither used nor kept deliberately.

    python scripts/bench_series.py [--gpus-per-node 8] [--pods-per-gpu 1] [--nodes 2] [--smoke]

``--smoke`` (CI, tests/unit/test_bench_smoke.py): one node with one GPU; the same tables and verdict.
"""

from __future__ import annotations

import argparse
import sys

from gpustack.health.collect import expressions as policy_expressions
from gpustack.monitoring.counters import CounterFile, counters_path, load_counters
from gpustack.monitoring.dashboard import load_dashboard, panel_queries
from gpustack.monitoring.rules import alert_expressions
from gpustack.monitoring.usage import (
    SERIES_BUDGET_PER_GPU,
    SeriesEstimate,
    Usage,
    collect_usage,
    estimate_series,
    unjustified_counters,
    unknown_metrics,
    unused_counters,
    unused_labels,
)


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--pods-per-gpu", type=int, default=1, help="time-slicing replicas sharing one GPU")
    parser.add_argument("--smoke", action="store_true", help="one node with one GPU (CI)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.nodes, args.gpus_per_node = 1, 1
    return args


def _where(places: list[str]) -> str:
    rules = sum(p.startswith("rule ") for p in places)
    policy = sum(p.startswith("policy ") for p in places)
    panels = len(places) - rules - policy
    extra = f", {policy} health policy quer(ies)" if policy else ""
    return f"{rules} rule(s), {panels} panel(s){extra}" if places else "-"


def print_table(counters: CounterFile, estimate: SeriesEstimate, usage: Usage) -> None:
    """One line per exported metric."""
    width = max(len(m) for m in counters.metrics)
    print(f"{'metric':<{width}}  {'type':<7}  series/GPU  read by")
    types = {c.name: c.prom_type for c in counters.counters}
    for metric in counters.metrics:
        places = usage.places.get(metric, [])
        note = (
            f"kept deliberately: {counters.kept_deliberately[metric]}"
            if metric in counters.kept_deliberately
            else _where(places)
        )
        print(f"{metric:<{width}}  {types[metric]:<7}  {estimate.per_metric[metric]:>10}  {note}")
    print(f"label fields (no series of their own): {', '.join(counters.labels) or '-'}")


def print_findings(counters: CounterFile, usage: Usage, exprs: list[str]) -> list[str]:
    """Unused/unknown metrics; returns the problems that fail the run."""
    problems = []
    unused = unused_counters(usage, counters)
    print(f"exported but read by no panel, rule or policy query: {', '.join(unused) or 'none'}")
    unjustified = unjustified_counters(usage, counters)
    if unjustified:
        problems.append(f"unused and not kept deliberately: {', '.join(unjustified)}")
    unknown = unknown_metrics(usage, counters)
    if unknown:
        problems.append("read but not exported: " + "; ".join(f"{m} ({', '.join(p)})" for m, p in unknown.items()))
    idle_labels = unused_labels(counters.labels, exprs)
    if idle_labels:
        print(f"label fields nothing reads: {', '.join(idle_labels)}")
    if counters.dropped:
        print("dropped upstream defaults: " + ", ".join(counters.dropped))
    return problems


def main(argv: list[str] | None = None) -> int:
    """Print the report; 0 when within budget and consistent, 1 otherwise."""
    args = _args(argv)
    counters = load_counters()
    rule_exprs, panel_exprs, policy = alert_expressions(), panel_queries(load_dashboard()), policy_expressions()
    usage = collect_usage(rule_exprs, panel_exprs, policy)
    estimate = estimate_series(counters, pods_per_gpu=args.pods_per_gpu)
    print(f"counters: {counters_path()}")
    print_table(counters, estimate, usage)
    problems = print_findings(counters, usage, [e for _, e in rule_exprs + panel_exprs + policy])
    per_node = estimate.per_gpu * args.gpus_per_node
    print(
        f"series per GPU: {estimate.per_gpu} (pods per GPU: {args.pods_per_gpu}); "
        f"per {args.gpus_per_node}-GPU node: {per_node}; {args.nodes} node(s): {per_node * args.nodes}"
    )
    if not estimate.within_budget():
        problems.append(f"{estimate.per_gpu} series per GPU exceeds the target of {SERIES_BUDGET_PER_GPU}")
    verdict = "OK" if not problems else "FAIL"
    print(f"verdict: {verdict} (target <= {SERIES_BUDGET_PER_GPU} series per GPU)")
    for problem in problems:
        print(f"  - {problem}")
    print(f"bench_series: series/GPU={estimate.per_gpu} verdict={verdict}")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
