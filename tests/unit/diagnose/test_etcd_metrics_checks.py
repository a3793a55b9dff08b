"""M12 (gpustack/diagnose/checks_etcd_metrics.py) on the answers Prometheus gives its two queries; the queries
themselves on the real Prometheus: tests/prometheus/test_etcd_leader_changes.py."""

from __future__ import annotations

from gpustack.diagnose.checks_etcd_metrics import etcd_leader_changes
from gpustack.diagnose.snapshot import PrometheusData, Snapshot


def snap(recent: float | None, hour: float | None, errors: dict[str, str] | None = None) -> Snapshot:
    queries = {}
    for name, value in (("etcd_leader_changes_15m", recent), ("etcd_leader_changes_1h", hour)):
        queries[name] = [] if value is None else [{"metric": {}, "value": [1764417600, str(value)]}]
    return Snapshot(prometheus=PrometheusData(reachable=True, queries=queries, query_errors=errors or {}))


def test_elections_warn_in_an_hour_and_fail_in_fifteen_minutes() -> None:
    (calm,) = etcd_leader_changes(snap(0, 1))
    assert calm.status == "pass" and "1 in the last hour" in calm.summary
    (hour,) = etcd_leader_changes(snap(1, 4))
    assert hour.status == "warn" and "4 times in the last hour" in hour.summary and "fsync" in hour.fix
    (storm,) = etcd_leader_changes(snap(4, 6))
    assert storm.status == "fail" and "4 times in 15 minutes" in storm.summary
    assert "6 in the last hour" in storm.evidence


def test_no_etcd_series_or_a_failed_query_is_a_skip() -> None:
    (unscraped,) = etcd_leader_changes(snap(None, None))
    assert unscraped.status == "skip" and "not scraped" in unscraped.summary
    assert "listen-metrics-urls" in unscraped.fix  # where the scrape is switched on
    (failed,) = etcd_leader_changes(snap(None, None, {"etcd_leader_changes_1h": "503 unavailable"}))
    assert failed.status == "skip" and "503" in failed.evidence
    (young,) = etcd_leader_changes(snap(0, None))  # scraped for less than the hour's window
    assert young.status == "pass"
