"""The circuit breaker's decision and ledger (pure): limits, retention, the limits of earlier runs, fail closed."""

from __future__ import annotations

import json

import pytest

from gpustack.health.breaker import (
    MARGIN,
    RETENTION,
    Candidate,
    Entry,
    Ledger,
    LedgerUnreadable,
    LimitRecord,
    decide,
    held_unreadable,
)
from gpustack.health.ledger import NO_DATE, LedgerRead, _decide, server_time
from gpustack.health.policy import Settings

NOW = 1_800_000_000.0
S = Settings(max_nodes=2, max_percent=50, window=3600)


def cands(*names: str) -> list[Candidate]:
    return [Candidate(n, ("xid-79",)) for n in names]


def test_the_n_plus_first_is_held() -> None:
    d = decide(Ledger(), cands("a", "b", "c"), 10, S, NOW, "t")
    assert (d.approved, d.held, d.limit, d.used, d.added) == (("a", "b"), ("c",), 2, 2, 2)
    assert d.ledger is not None and [(e.node, e.window, e.limit) for e in d.ledger.entries] == [
        ("a", 3600, 2),
        ("b", 3600, 2),
    ]
    assert d.why_held == "2 per 60 min (this run), all used" and d.at == NOW
    again = decide(d.ledger, cands("c"), 10, S, NOW + 60, "t")  # the next run: budget spent
    assert again.held == ("c",) and again.approved == ()


def test_percent_of_gpu_nodes() -> None:
    d = decide(Ledger(), cands("a", "b"), 2, Settings(max_nodes=5, max_percent=10), NOW, "t")
    assert d.approved == ("a",) and d.held == ("b",)  # 10% of 2 nodes rounds up to 1


def test_the_window_expires_but_entries_are_kept_for_the_retention() -> None:
    gone = NOW - 3600 - MARGIN - 1  # outside the window and its margin for clock skew
    old = Ledger((Entry("x", NOW - RETENTION - 5, "t"), Entry("a", gone, "t"), Entry("b", NOW - 100, "t")))
    d = decide(old, cands("c", "d"), 10, S, NOW, "t")
    assert d.approved == ("c",) and d.held == ("d",)
    assert d.ledger is not None and [e.node for e in d.ledger.entries] == ["a", "b", "c"]  # only x is past retention
    # inside the margin an entry still counts (a clock up to MAX_SKEW off cannot free it early)
    margin = Ledger((Entry("a", NOW - 3600 - MARGIN + 1, "t"), Entry("b", NOW - 100, "t")))
    assert decide(margin, cands("c"), 10, S, NOW, "t").held == ("c",)


def test_a_short_window_run_neither_prunes_nor_spends_a_longer_policys_budget() -> None:
    # the default policy (1 h, 2) quarantined two nodes 400 s ago (outside 60 s and the margin)
    hourly = decide(Ledger(), cands("a", "b"), 10, S, NOW - 400, "cron").ledger
    assert hourly is not None
    short = Settings(max_nodes=2, max_percent=50, window=60)
    d = decide(hourly, cands("c", "d"), 10, short, NOW, "ops --window 60")
    assert d.approved == () and d.held == ("c", "d") and "2 per 60 min (cron)" in d.why_held
    assert d.ledger is not None and {e.node for e in d.ledger.entries} == {"a", "b"}
    # an hour later the hourly limit is out of force, and the short run may spend its own budget
    later = decide(d.ledger, cands("c", "d", "e"), 10, short, NOW + 3600 + MARGIN, "ops --window 60")
    assert later.approved == ("c", "d") and later.held == ("e",)
    # a longer window than any before raises the ledger's retention for good
    weekly = Settings(max_nodes=2, max_percent=50, window=30 * 86400)
    assert decide(Ledger(), cands("z"), 10, weekly, NOW, "t").ledger.retention == 30 * 86400 + MARGIN  # type: ignore[union-attr]


def test_entries_dated_in_the_future_count() -> None:
    ahead = Ledger((Entry("a", NOW + 300, "skewed"), Entry("b", NOW + 300, "skewed")))
    assert decide(ahead, cands("c"), 10, S, NOW, "t").held == ("c",)


def test_an_interrupted_run_is_finished_without_spending_budget() -> None:
    ledger = Ledger((Entry("a", NOW - 30, "t"), Entry("b", NOW - 20, "t")))
    d = decide(ledger, cands("a", "c"), 10, S, NOW, "t")
    assert d.approved == ("a",) and d.held == ("c",) and d.added == 0
    assert d.ledger is not None and [e.node for e in d.ledger.entries] == ["a", "b"]  # no budget spent


def test_a_held_run_puts_its_limit_in_force_for_its_window() -> None:
    # two 60-second runs spent their budget; an hourly run is held, and records its limit
    short = Settings(max_nodes=2, max_percent=50, window=60)
    d = decide(Ledger(), cands("a", "b"), 10, short, NOW, "short")
    hourly = decide(d.ledger, cands("c"), 10, S, NOW + 10, "cron")  # type: ignore[arg-type]
    assert hourly.held == ("c",) and hourly.changed and hourly.ledger is not None
    assert [(x.window, x.limit, x.by) for x in hourly.ledger.limits] == [(60, 2, "short"), (3600, 2, "cron")]
    # 400 s later the short runs' own window (and its margin) is empty, but the hourly limit is in force
    later = decide(hourly.ledger, cands("c", "d"), 10, short, NOW + 400, "short")
    assert later.held == ("c", "d") and later.why_held == "2 per 60 min (cron), all used"
    assert decide(hourly.ledger, cands("c"), 10, short, NOW + 10 + 3600 + MARGIN, "short").approved == ("c",)
    # a run renews its limit once half its window has passed, not on every evaluation
    assert not decide(hourly.ledger, cands("c"), 10, S, NOW + 40, "cron").changed
    assert decide(hourly.ledger, cands("c"), 10, S, NOW + 10 + 1800, "cron").recorded_limit


def test_ledger_round_trip_and_version_1() -> None:
    ledger = Ledger((Entry("a", NOW, "gpustack health --apply (ops@host)", ("xid-79", "row-remap-failure"), 3600, 2),),
                    limits=(LimitRecord(3600, 2, NOW, "cron"),))  # fmt: skip
    assert Ledger.from_text(ledger.to_text()) == ledger
    v1 = json.dumps({"version": 1, "entries": [{"node": "b", "at": 5, "by": "", "rules": []}]})
    assert Ledger.from_text(v1).entries == (Entry("b", 5.0, ""),)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (None, "has no ledger.json"),
        ("", "has no ledger.json"),
        ("not json", "is not JSON"),
        ("[]", "not a JSON object"),
        ('{"version": 3, "entries": []}', "version 3"),
        ('{"entries": []}', "version None"),
        ('{"version": 2}', "no list of entries"),
        ('{"version": 2, "entries": [{"node": "a"}]}', "entry 0"),
        ('{"version": 2, "entries": [{"node": "a", "at": 1}, {"node": "b", "at": "soon"}]}', "entry 1"),
        ('{"version": 2, "entries": [{"node": "a", "at": NaN}]}', "malformed"),
        ('{"version": 2, "entries": ["a"]}', "not an object"),
        ('{"version": 2, "retention": "long", "entries": []}', "retention"),
        ('{"version": 2, "entries": [], "limits": {}}', "limits is not a list"),
        ('{"version": 2, "entries": [], "limits": [{"window": 60}]}', "limit 0"),
        ('{"version": 2, "entries": [], "limits": [{"window": 0, "limit": 1, "at": 5}]}', "out of range"),
    ],
)
def test_an_unreadable_ledger_says_why(text: str | None, why: str) -> None:
    with pytest.raises(LedgerUnreadable, match=why):
        Ledger.from_text(text)


def test_fail_closed() -> None:
    d = held_unreadable(cands("a", "b"), 10, S, "ledger.json is not JSON")
    assert d.approved == () and d.held == ("a", "b") and d.ledger is None and "unreadable" in d.why_held
    unread = _decide(LedgerRead(None, "7", NOW, "entry 0: malformed"), cands("a"), 10, S, "t")
    assert unread.held == ("a",) and unread.unreadable == "entry 0: malformed"
    no_clock = _decide(LedgerRead(Ledger(), None, None), cands("a"), 10, S, "t")
    assert no_clock.held == ("a",) and no_clock.unreadable == NO_DATE


def test_server_time_from_the_date_header() -> None:
    assert server_time({"Date": "Fri, 15 Jan 2027 08:00:00 GMT"}) == NOW
    assert server_time({"date": "Fri, 15 Jan 2027 08:00:00 GMT"}) == NOW
    assert server_time({}) is None and server_time({"Date": "yesterday"}) is None and server_time(None) is None
