"""The circuit breaker: at most N nodes, and at most P% of the GPU nodes, quarantined per window. Pure.

Its state is a ledger of quarantines (node, time, by whom, why, and the window and limit each was approved
under) and of the limits recent runs decided under, kept in one ConfigMap (``gpustack-system/gpustack-health-breaker``, key ``ledger.json``; the I/O is
:mod:`gpustack.health.ledger`). Three guarantees (docs/operations.md, "The circuit breaker"):

- **One clock.** Every time in the ledger, and the "now" a decision is made at, is the API server's (the
  ``Date`` header of the ledger read), never an evaluator's own: skewed evaluators count the same entries.
- **Retention independent of the run.** Entries are kept for :data:`RETENTION` or the longest window any
  run has used (recorded in the ledger, it only grows), whatever this run's ``--window``. And a run's limit
  stays in force for its window: every run that had a node to quarantine records its window and limit
  (``limits``), and a new quarantine must fit this run's limit *and* every limit recorded within its own
  window, so a short-window run cannot spend the budget a longer-window policy counts.
- **Fail closed.** An unreadable ledger (not JSON, a malformed entry, an unknown version, a ConfigMap
  without the key) holds every new quarantine; the finding says why and how to repair it.

A node already in the ledger within the window is approved again without spending budget: a run that was
interrupted between the ledger write and the node patch is finished by the next run. Entries dated in the
future (a ledger written by an older gpustack on a skewed clock) count in every window until they age out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpustack.health.policy import Settings

LEDGER_KEY = "ledger.json"
LEDGER_VERSION = 2  # 2: entries carry their window and limit, the ledger its retention and limits; 1 is still read
READABLE_VERSIONS = (1, 2)
#: entries younger than this are never dropped (nor younger than the longest window a run used)
RETENTION = 7 * 86400


class LedgerUnreadable(ValueError):
    """The ledger's text cannot be trusted (the message says why)."""


@dataclass(frozen=True)
class Entry:
    node: str
    at: float  # epoch seconds, the API server's clock
    by: str
    rules: tuple[str, ...] = ()
    window: int = 0  # the window and limit of the run that approved it (0 / -1: unknown, a version 1 entry)
    limit: int = -1

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "at": round(self.at, 3), "by": self.by, "rules": list(self.rules),
                "window": self.window, "limit": self.limit}  # fmt: skip


@dataclass(frozen=True)
class LimitRecord:
    """A run decided under this limit at ``at``: it stays in force until ``at + window``."""

    window: int
    limit: int
    at: float
    by: str

    def to_json(self) -> dict[str, Any]:
        return {"window": self.window, "limit": self.limit, "at": round(self.at, 3), "by": self.by}


def _limit(raw: Any, index: int) -> LimitRecord:
    try:
        record = LimitRecord(int(raw["window"]), int(raw["limit"]), float(raw["at"]), str(raw.get("by") or ""))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise LedgerUnreadable(f"limit {index} ({json.dumps(raw)[:120]}): {type(exc).__name__} {exc}") from None
    if record.window <= 0 or record.limit < 0 or not math.isfinite(record.at):
        raise LedgerUnreadable(f"limit {index} ({json.dumps(raw)[:120]}): window, limit or at is out of range")
    return record


def _entry(raw: Any, index: int) -> Entry:
    if not isinstance(raw, dict):
        raise LedgerUnreadable(f"entry {index} is not an object")
    try:
        node, at = raw["node"], float(raw["at"])
        rules = raw.get("rules") or []
        window, limit = int(raw.get("window", 0)), int(raw.get("limit", -1))
    except (KeyError, TypeError, ValueError) as exc:
        raise LedgerUnreadable(f"entry {index} ({json.dumps(raw)[:120]}): {type(exc).__name__} {exc}") from None
    if not isinstance(node, str) or not node or not math.isfinite(at) or not isinstance(rules, list):
        raise LedgerUnreadable(f"entry {index} ({json.dumps(raw)[:120]}): node, at or rules is malformed")
    return Entry(node, at, str(raw.get("by") or ""), tuple(str(r) for r in rules), window, limit)


@dataclass(frozen=True)
class Ledger:
    entries: tuple[Entry, ...] = ()
    retention: int = RETENTION  # the longest window any run has used (or RETENTION): entries younger stay
    limits: tuple[LimitRecord, ...] = ()  # the limits runs decided under, each in force for its window

    @classmethod
    def from_text(cls, text: str | None) -> Ledger:
        """Parse ``ledger.json``; raise :class:`LedgerUnreadable` for anything that is not a ledger."""
        if not (text or "").strip():
            raise LedgerUnreadable(f"the ConfigMap has no {LEDGER_KEY}")
        try:
            data = json.loads(text or "")
        except ValueError as exc:
            raise LedgerUnreadable(f"{LEDGER_KEY} is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise LedgerUnreadable(f"{LEDGER_KEY} is not a JSON object")
        version = data.get("version")
        if version not in READABLE_VERSIONS:
            raise LedgerUnreadable(f"{LEDGER_KEY} has version {version!r}; this gpustack reads "
                                   f"{', '.join(map(str, READABLE_VERSIONS))} (a newer gpustack wrote it?)")  # fmt: skip
        raw = data.get("entries")
        if not isinstance(raw, list):
            raise LedgerUnreadable(f"{LEDGER_KEY} has no list of entries")
        try:
            retention = max(RETENTION, int(data.get("retention") or RETENTION))
        except (TypeError, ValueError):
            raise LedgerUnreadable(f"{LEDGER_KEY}: retention {data.get('retention')!r} is not a number") from None
        limits = data.get("limits", [])
        if not isinstance(limits, list):
            raise LedgerUnreadable(f"{LEDGER_KEY}: limits is not a list")
        return cls(tuple(_entry(e, i) for i, e in enumerate(raw)), retention,
                   tuple(_limit(x, i) for i, x in enumerate(limits)))  # fmt: skip

    def to_text(self) -> str:
        return json.dumps({"version": LEDGER_VERSION, "retention": self.retention,
                           "limits": [x.to_json() for x in self.limits],
                           "entries": [e.to_json() for e in self.entries]}, sort_keys=True)  # fmt: skip

    def within(self, now: float, window: int) -> list[Entry]:
        """Entries inside the window ending now (future-dated ones included)."""
        return [e for e in self.entries if e.at > now - window]


@dataclass(frozen=True)
class Decision:
    approved: tuple[str, ...]  # nodes to quarantine now (new entries or entries from an interrupted run)
    held: tuple[str, ...]  # nodes the breaker stops
    ledger: Ledger | None  # the ledger to write (None: nothing to write)
    limit: int
    used: int  # quarantines in this run's window, the approved ones included
    added: int = 0  # new entries
    why_held: str = ""  # which limit held them, or why the ledger could not be trusted
    unreadable: str = ""  # set when the ledger could not be read: every new quarantine is held
    at: float | None = None  # the API server's time the decision was made at
    recorded_limit: bool = False  # this run's limit was (re)recorded: the ledger must be written

    @property
    def changed(self) -> bool:
        return self.added > 0 or self.recorded_limit


@dataclass
class Candidate:
    node: str
    rules: tuple[str, ...] = field(default=())


def held_unreadable(candidates: Sequence[Candidate], gpu_nodes: int, settings: Settings, problem: str) -> Decision:
    """Fail closed: the ledger could not be read, so no new quarantine."""
    return Decision((), tuple(c.node for c in candidates), None, settings.limit(gpu_nodes), 0,
                    why_held=f"the breaker's ledger is unreadable: {problem}", unreadable=problem)  # fmt: skip


def decide(
    ledger: Ledger, candidates: Sequence[Candidate], gpu_nodes: int, settings: Settings, now: float, by: str
) -> Decision:
    """Approve candidates in order while every limit in force lasts (see the module docstring)."""
    limit = settings.limit(gpu_nodes)
    retention = max(ledger.retention, RETENTION, settings.window, *(e.window for e in ledger.entries))
    entries = [e for e in ledger.entries if e.at > now - retention]
    # limits in force: this run's, each recorded one within its window, and each entry's within its window
    records = [x for x in ledger.limits if x.at > now - x.window]
    limits = {(settings.window, limit, "this run")}
    limits |= {(x.window, x.limit, x.by or "an earlier run") for x in records}
    limits |= {(e.window, e.limit, e.by or "an earlier run") for e in entries
               if e.window > 0 and e.limit >= 0 and e.at > now - e.window}  # fmt: skip
    seen = {e.node for e in entries if e.at > now - settings.window}
    approved, held, added = [], [], 0
    why = ""
    for c in candidates:
        if c.node in seen:
            approved.append(c.node)
            continue
        full = [(w, lim, who) for w, lim, who in sorted(limits)
                if sum(1 for e in entries if e.at > now - w) >= lim]  # fmt: skip
        if full:
            w, lim, who = full[0]
            why = why or f"{lim} per {_minutes(w)} ({who}), all used"
            held.append(c.node)
            continue
        entries.append(Entry(c.node, now, by, c.rules, settings.window, limit))
        seen.add(c.node)
        approved.append(c.node)
        added += 1
    mine = LimitRecord(settings.window, limit, now, by)
    others = tuple(x for x in records if (x.window, x.limit) != (mine.window, mine.limit))
    # a run with candidates puts its limit in force for its window (held runs too), at most once a minute
    stale = all(x.at <= now - 60 for x in records if (x.window, x.limit) == (mine.window, mine.limit))
    recorded = bool(candidates) and (stale or added > 0)
    kept = (*others, mine) if recorded else tuple(records)
    used = sum(1 for e in entries if e.at > now - settings.window)
    return Decision(tuple(approved), tuple(held), Ledger(tuple(entries), retention, kept), limit, used, added, why,
                    at=now, recorded_limit=recorded)  # fmt: skip


def _minutes(seconds: int) -> str:
    return f"{seconds // 60} min" if seconds >= 60 else f"{seconds} s"
