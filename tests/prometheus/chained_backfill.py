"""Recording rules backfilled the way Prometheus' own tools leave them: each rule evaluated over the history from
the raw series **and the recorded series of the rules before it**, which carry no staleness markers.

``promtool tsdb create-blocks-from rules`` (prometheus/prometheus v0.314.0 ``cmd/promtool/rules.go`` ``importRule``:
one range query per rule; ``docs/storage.md`` "Backfilling for Recording Rules", Limitations: "Rules in the same
group cannot see the results of previous rules ... A workaround is to backfill multiple times and create the
dependent data first"; its blocks are written from samples, no staleness marker) records each rule with range
queries; a rule that reads another recorded series then sees its
last sample for up to 5 minutes after it ended (the lookback delta), where a live rule engine would have written a
staleness marker. A live engine meets the same after a restart or a skipped evaluation. gpustack's own test backfill
(:func:`tests.prometheus.history.backfill_rules`) inlines every rule instead, and so cannot see the difference.

Here the group is recorded level by level (a rule's level: one more than the highest level of the rules it reads),
each level imported before the next is evaluated.
"""

from __future__ import annotations

from pathlib import Path

from gpustack.report.queries import RecordRule, _reference, rules

from .harness import PrometheusServer
from .history import MINUTE, Series, _Writer, import_openmetrics, rule_series


def levels(rule_set: tuple[RecordRule, ...] | None = None) -> list[list[RecordRule]]:
    """The group's rules by dependency level (level 0 reads raw series only)."""
    found = list(rule_set or rules())
    level: dict[str, int] = {}
    for rule in found:  # the group lists a rule after the rules it reads
        reads = [level[name] for name in level if _reference(name).search(rule.expr)]
        level[rule.record] = max([level.get(rule.record, 0), *(r + 1 for r in reads)])
    out: list[list[RecordRule]] = [[] for _ in range(max(level.values()) + 1)]
    for rule in found:
        out[level[rule.record]].append(rule)
    return out


def chained_backfill(server: PrometheusServer, start: int, end: int, workdir: Path, step: int = MINUTE) -> int:
    """Record the group over [start, end] into ``server``, one dependency level at a time; returns the samples."""
    total = 0
    for n, group in enumerate(levels()):
        text_file = workdir / f"rules-level-{n}.om"
        with text_file.open("w", encoding="utf-8") as out:
            w = _Writer(out)
            names = list(dict.fromkeys(r.record for r in group))
            for name in names:
                w.family(name)
                series: Series = {}
                for rule in (r for r in group if r.record == name):
                    rule_series(server, rule.expr, dict(rule.labels), start, end, step, series)
                for key, points in series.items():
                    w.series(dict(key), points)
            w.close()
        server.stop()
        import_openmetrics(text_file, server.data_dir, release=server.release)
        text_file.unlink()
        server.start(timeout=120)
        total += w.samples
    return total
