"""Issue 32, item 10: over 10 days with dcgm-exporter gaps, ``gpustack report`` from the recording rules and from the
raw expressions note the same unmeasured GPU-hours, the known answer (tests/prometheus/history_gaps.py).

The rules are recorded as Prometheus' own backfill leaves them (tests/prometheus/chained_backfill.py): each rule
reading the recorded series of the rules before it, without staleness markers. Before the fix a rule read another
rule's last sample for 5 minutes after it ended, and the rules path counted those minutes as measured (129.0
unmeasured GPU-hours here, where the answer is 138.4)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import pytest

from gpustack.monitoring.rules import usage_rules_path
from gpustack.report.compute import Request
from gpustack.report.model import Report
from gpustack.report.source import Prometheus, make_report
from gpustack.runners.http import DirectEndpoint

from .chained_backfill import chained_backfill
from .harness import PrometheusServer
from .history import DAY, History, load_history, prometheus_yml
from .history_gaps import gap_answer, gap_history
from .releases import Release

REL = 0.01  # as the other report figures (test_report.py)
DAYS = 10


@pytest.fixture(scope="module")
def gaps(
    tmp_path_factory: pytest.TempPathFactory, prometheus_release: Release
) -> Iterator[tuple[History, PrometheusServer]]:
    work = tmp_path_factory.mktemp("report-gaps")
    end = int(time.time()) // 60 * 60 - 60
    history = gap_history(end, DAYS)
    load_history(history, work / "tsdb", work, prometheus_release)
    server = PrometheusServer(prometheus_yml(work / "p.yml", [usage_rules_path()]), work / "tsdb", work / "log",
                              retention="400d", release=prometheus_release)  # fmt: skip
    server.start(timeout=120)
    try:
        chained_backfill(server, history.start, history.end, work)
        yield history, server
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def _report(history: History, server: PrometheusServer, mode: str) -> Report:
    report, _ = make_report(Prometheus(DirectEndpoint(server.url)), Request(end=history.end, seconds=DAYS * DAY), mode)
    return report


def test_the_history_has_exporter_gaps_while_pods_run() -> None:
    history = gap_history(1_800_000_000 // 60 * 60, DAYS)
    assert all(len(n.gaps) >= 10 for n in history.nodes)
    answer = gap_answer(history, history.end - DAYS * DAY)
    assert 0.05 * answer.allocated_h < answer.unmeasured_h < 0.2 * answer.allocated_h


@pytest.mark.both_prometheus  # version-sensitive: Prometheus 2's closed ranges count a minute more
def test_rules_and_raw_note_the_known_unmeasured_gpu_hours(
    gaps: tuple[History, PrometheusServer], prometheus_release: Release
) -> None:
    history, server = gaps
    known = gap_answer(history, history.end - DAYS * DAY, closed_ranges=prometheus_release.version_tuple < (3,))
    rules, raw = _report(history, server, "auto"), _report(history, server, "raw")
    assert (rules.source, raw.source) == ("recording rules", "raw expressions")
    for report in (rules, raw):
        assert report.total.allocated_h == pytest.approx(known.allocated_h, rel=REL), report.source
        assert report.total.measured_h == pytest.approx(known.measured_h, rel=REL), report.source
        unmeasured = report.total.allocated_h - report.total.measured_h
        assert unmeasured == pytest.approx(known.unmeasured_h, rel=REL), report.source
        assert any(f"{unmeasured:,.1f} allocated GPU-hours have no DCGM activity" in n for n in report.notes)
    for a, b in ((rules.total.used_h, raw.total.used_h), (rules.total.idle_h, raw.total.idle_h)):
        assert a == pytest.approx(b, rel=1e-6)
    assert rules.capacity_h == pytest.approx(raw.capacity_h, rel=1e-6)
