"""gpustack/checks/certs.py: certificate expiry judged against the warn and fail days."""

from __future__ import annotations

import datetime as dt

import pytest

from gpustack.checks import certs

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize(
    ("delta", "status", "text"),
    [
        (dt.timedelta(days=200), "pass", "expires 2027-06-17 12:00 UTC (in 200 days)"),
        (dt.timedelta(days=90), "warn", "in 90 days"),
        (dt.timedelta(days=31), "warn", "in 31 days"),
        (dt.timedelta(days=30), "fail", "in 30 days"),
        (dt.timedelta(hours=5), "fail", "in 5 hours"),
        (dt.timedelta(minutes=9), "fail", "in 9 minutes"),
        (-dt.timedelta(days=3), "fail", "EXPIRED 2026-11-26 12:00 UTC (3 days ago)"),
    ],
)
def test_judge(delta: dt.timedelta, status: str, text: str) -> None:
    j = certs.judge(NOW + delta, NOW, warn_days=90, fail_days=30)
    assert j.status == status and text in j.text


def test_parse_iso() -> None:
    assert certs.parse_iso("2027-11-28T01:36:57Z") == dt.datetime(2027, 11, 28, 1, 36, 57, tzinfo=dt.timezone.utc)
    assert certs.parse_iso("2027-11-28T01:36:57+00:00") == certs.parse_iso("2027-11-28T01:36:57Z")
    assert certs.parse_iso("") is None and certs.parse_iso(None) is None and certs.parse_iso("soon") is None
