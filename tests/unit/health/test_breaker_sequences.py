"""Sequences of ``health --apply`` runs that tried to cordon more nodes in a window than the strictest limit
recorded for it (issue 29): a released node failing again, short-window runs beside an idle hourly one, an
API server replica with a skewed clock, an emptied or deleted ledger. Each is driven through the pure
decision with the nodes' own record of their quarantines, as the runner passes it."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpustack.health.breaker import MARGIN, MAX_SKEW, RESTORED, Candidate, Entry, Ledger, decide
from gpustack.health.policy import Settings

T0 = 1_800_000_000.0
HOURLY = Settings(max_nodes=2, max_percent=100, window=3600)
MIN = 60


@dataclass
class Cluster:
    """The ledger, the nodes' quarantine histories and releases, and every cordon made (true times)."""

    ledger: Ledger = field(default_factory=Ledger)
    history: dict[str, list[float]] = field(default_factory=dict)
    released: dict[str, float] = field(default_factory=dict)
    cordons: list[tuple[str, float]] = field(default_factory=list)
    exists: bool = False

    def run(self, t: float, nodes: list[str], settings: Settings = HOURLY, *, date: float | None = None,
            by: str = "cron") -> tuple[str, ...]:  # fmt: skip
        """One --apply run at true time ``t`` (the evaluator's clock) whose API server says ``date``."""
        stamps = [Entry(n, at, "", (), settings.window, 2) for n, ats in self.history.items() for at in ats]
        cands = [Candidate(n, ("xid-79",), self.released.get(n)) for n in nodes if not self.quarantined(n)]
        now = t if date is None else date
        d = decide(self.ledger, cands, 10, settings, now, by, local=t, stamps=stamps,
                   created="" if self.exists else "no ledger ConfigMap")  # fmt: skip
        if d.ledger is not None and d.changed:
            self.ledger, self.exists = d.ledger, True
        for n in d.approved:
            self.history.setdefault(n, []).append(now)
            self.cordons.append((n, t))
        return d.approved

    def quarantined(self, node: str) -> bool:
        return bool(self.history.get(node)) and self.released.get(node, 0) < max(self.history[node])

    def release(self, node: str, t: float) -> None:
        self.released[node] = t

    def most_in(self, window: int) -> int:
        """The most cordons made within any ``window`` seconds (true times)."""
        times = sorted(t for _, t in self.cordons)
        return max((sum(1 for u in times if s <= u < s + window) for s in times), default=0)


def test_a_released_node_failing_again_spends_budget_and_gets_an_entry() -> None:
    c = Cluster()
    assert c.run(T0, ["a"]) == ("a",)
    c.release("a", T0 + 10 * MIN)
    assert c.run(T0 + 50 * MIN, ["a"]) == ("a",)  # a new quarantine: budget spent, a new entry
    assert [e.at for e in c.ledger.entries if e.node == "a"] == [T0, T0 + 50 * MIN]
    c.release("a", T0 + 55 * MIN)
    assert c.run(T0 + 61 * MIN, ["b", "c"]) == ()  # a at 0 and 50 min: 2 within the window and its margin
    assert c.run(T0 + 65 * MIN, ["b", "c"]) == ("b",)  # a's second cordon is in the window: one left
    assert c.most_in(3600) <= 2 and len(c.cordons) == 3  # was a, a, b, c in 11 min
    # an interrupted run (the ledger written, the node never patched) is still finished for free
    d = decide(c.ledger, [Candidate("c")], 10, HOURLY, T0 + 62 * MIN, "cron", stamps=[])
    assert d.held == ("c",)
    pending = Ledger((Entry("x", T0, "cron", (), 3600, 2), Entry("y", T0, "cron", (), 3600, 2)))
    again = decide(pending, [Candidate("x")], 10, HOURLY, T0 + 60, "cron", local=T0 + 60)
    assert again.approved == ("x",) and again.added == 0


def test_every_run_records_its_limit_so_short_windows_cannot_outrun_an_idle_hourly_policy() -> None:
    c = Cluster()
    assert c.run(T0, []) == ()  # the hourly run, nothing to quarantine: its limit is recorded all the same
    assert [(x.window, x.limit) for x in c.ledger.limits] == [(3600, 2)]
    short = Settings(max_nodes=2, max_percent=100, window=60)
    for i in range(5):
        t = T0 + 30 + 61 * i
        c.run(t, [f"n{i}a", f"n{i}b"], short, by="ops --window 60")
        c.run(t + 1, [], by="cron")  # the idle hourly run keeps running
    assert len(c.cordons) == 2 and c.most_in(3600) == 2  # was 10 in 244 s


def test_an_api_server_replica_ahead_or_behind_cannot_free_budget() -> None:
    c = Cluster()
    assert c.run(T0, ["a", "b"]) == ("a", "b")
    # a replica 40 min ahead answers: its Date disagrees with the evaluator's clock, every quarantine is held
    ahead = T0 + 25 * MIN
    assert c.run(ahead, ["c", "d"], date=ahead + 40 * MIN) == ()
    d = decide(c.ledger, [Candidate("c")], 10, HOURLY, ahead + 40 * MIN, "cron", local=ahead)
    assert d.held == ("c",) and "differ by 2400 s" in d.clock and d.ledger is None
    # an evaluator whose own clock is ahead too: the ledger's times are checked both ways, so a run dated
    # before the newest time in the ledger by more than MAX_SKEW is held as well
    skewed = decide(c.ledger, [Candidate("c")], 10, HOURLY, T0 - 10 * MIN, "cron", local=T0 - 10 * MIN)
    assert skewed.held == ("c",) and "after the API server's Date" in skewed.clock
    # within MAX_SKEW the run goes ahead, and the margin keeps the window whole
    assert c.run(T0 + 60 * MIN, ["c"], date=T0 + 60 * MIN + MAX_SKEW) == ()
    assert c.run(T0 + 60 * MIN + MARGIN, ["c"]) == ("c",)
    assert c.most_in(3600) <= 2


def test_an_emptied_or_deleted_ledger_leaves_a_trace_and_frees_nothing() -> None:
    for emptied in (Ledger(), Ledger.from_text('{"version": 2, "entries": []}')):
        c = Cluster()
        assert c.run(T0, ["a", "b"]) == ("a", "b")
        d = decide(emptied, [Candidate("c")], 10, HOURLY, T0 + 10 * MIN, "cron", local=T0 + 10 * MIN,
                   stamps=[Entry(n, T0, "", (), 3600, 2) for n in ("a", "b")], created="no ledger ConfigMap")  # fmt: skip
        assert d.held == ("c",) and len(d.restored) == 2 and d.changed
        assert d.ledger is not None and {e.by for e in d.ledger.entries} == {RESTORED}
        assert d.ledger.created is not None and d.ledger.created.reason == "no ledger ConfigMap"
        assert Ledger.from_text(d.ledger.to_text()) == d.ledger  # the trace is written back
