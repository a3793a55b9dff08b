"""The circuit breaker's decision and ledger (pure)."""

from __future__ import annotations

from gpustack.health.breaker import Candidate, Entry, Ledger, decide
from gpustack.health.policy import Settings

NOW = 1_800_000_000.0
S = Settings(max_nodes=2, max_percent=50, window=3600)


def cands(*names: str) -> list[Candidate]:
    return [Candidate(n, ("xid-79",)) for n in names]


def test_the_n_plus_first_is_held() -> None:
    d = decide(Ledger(), cands("a", "b", "c"), 10, S, NOW, "t")
    assert (d.approved, d.held, d.limit, d.used) == (("a", "b"), ("c",), 2, 2)
    assert [e.node for e in d.ledger.entries] == ["a", "b"]
    again = decide(d.ledger, cands("c"), 10, S, NOW + 60, "t")  # the next run: budget spent
    assert again.held == ("c",) and again.approved == ()


def test_percent_of_gpu_nodes() -> None:
    d = decide(Ledger(), cands("a", "b"), 2, Settings(max_nodes=5, max_percent=10), NOW, "t")
    assert d.approved == ("a",) and d.held == ("b",)  # 10% of 2 nodes rounds up to 1


def test_the_window_expires() -> None:
    old = Ledger((Entry("a", NOW - 3700, "t"), Entry("b", NOW - 100, "t")))
    d = decide(old, cands("c", "d"), 10, S, NOW, "t")
    assert d.approved == ("c",) and d.held == ("d",)
    assert [e.node for e in d.ledger.entries] == ["b", "c"]  # pruned to the window


def test_an_interrupted_run_is_finished_without_spending_budget() -> None:
    ledger = Ledger((Entry("a", NOW - 30, "t"), Entry("b", NOW - 20, "t")))
    d = decide(ledger, cands("a", "c"), 10, S, NOW, "t")
    assert d.approved == ("a",) and d.held == ("c",) and len(d.ledger.entries) == 2


def test_ledger_round_trip_and_garbage() -> None:
    ledger = Ledger((Entry("a", NOW, "gpustack health --apply (ops@host)", ("xid-79", "row-remap-failure")),))
    assert Ledger.from_text(ledger.to_text()) == ledger
    assert Ledger.from_text("not json") == Ledger()
    assert Ledger.from_text('{"entries": [{"node": "a"}, {"node": "b", "at": 5}]}').entries == (Entry("b", 5.0, ""),)
