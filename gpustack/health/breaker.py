"""The circuit breaker: at most N nodes, and at most P% of the GPU nodes, quarantined per window. Pure.

Its state is a ledger of quarantines (node, time, by whom, why, and the window and limit each was approved
under) and of the limits recent runs decided under, kept in one ConfigMap (``gpustack-system/gpustack-health-breaker``, key ``ledger.json``; the I/O is
:mod:`gpustack.health.ledger`). Three guarantees (docs/operations.md, "The circuit breaker"):

- **One clock.** Every time in the ledger, and the "now" a decision is made at, is the API server's (the
  ``Date`` header of the ledger read), never an evaluator's own: skewed evaluators count the same entries.
- **A clock it checks.** That Date must agree with the evaluator's own clock within :data:`MAX_SKEW`, and
  no time in the ledger may be later than it by more than :data:`MAX_SKEW` (a replica or an evaluator
  ahead wrote it); otherwise every new quarantine is held (:func:`clock_problem`). Each window is counted
  with a margin of ``2 * MAX_SKEW`` (:data:`MARGIN`), so times that passed the check, each off by at most
  ``MAX_SKEW``, can never free budget early: an API server replica 40 minutes ahead is held, not obeyed.
- **Retention independent of the run.** Entries are kept for :data:`RETENTION` or the longest window any
  run has used (recorded in the ledger, it only grows), whatever this run's ``--window``. And a run's limit
  stays in force for its window: every ``--apply`` run records its window and limit (``limits``; renewed
  once half its window has passed, whether or not it had a node to quarantine), and a new quarantine must
  fit this run's limit *and* every limit recorded within its own window, so a short-window run cannot
  spend the budget a longer-window policy counts.
- **Fail closed.** An unreadable ledger (not JSON, a malformed entry, an unknown version, a ConfigMap
  without the key) holds every new quarantine; the finding says why and how to repair it.
- **The nodes keep a second record.** Every quarantine also appends its time, window and limit to the
  node's ``gpustack.io/quarantine-history`` annotation (kept through a release). A quarantine the nodes
  record and the ledger lacks (the ledger was emptied, edited or deleted) is restored into the ledger
  with ``by`` saying so, and counts; a ledger created anew records when, by whom and why (``created``).

A node whose latest entry is within the window and which neither carries a quarantine at or after that
entry nor was released since is approved again without spending budget: a run that was interrupted
between the ledger write and the node patch is finished by the next run. A node released and failing
again is a new quarantine: it spends budget and gets an entry of its own.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpustack.health.policy import Settings

LEDGER_KEY = "ledger.json"
LEDGER_VERSION = 2  # 2: entries carry their window and limit, the ledger its retention and limits; 1 is still read
READABLE_VERSIONS = (1, 2)
#: entries younger than this are never dropped (nor younger than the longest window a run used)
RETENTION = 7 * 86400
#: the most the API server's Date may differ from the evaluator's clock, or precede a time in the ledger
MAX_SKEW = 120
#: every window is counted this much longer: two clocks each within MAX_SKEW of the truth
MARGIN = 2 * MAX_SKEW
#: the ``by`` of an entry restored from a node's quarantine history
RESTORED = "restored from the node's gpustack.io/quarantine-history (missing from the ledger)"


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
class Created:
    """When, by whom and why this ledger was started (no ConfigMap: a first run, or it was deleted)."""

    at: float
    by: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"at": round(self.at, 3), "by": self.by, "reason": self.reason}


def _created(raw: Any) -> Created | None:
    if raw is None:
        return None
    try:
        created = Created(float(raw["at"]), str(raw.get("by") or ""), str(raw.get("reason") or ""))
    except (KeyError, TypeError, ValueError, AttributeError):
        raise LedgerUnreadable(f"{LEDGER_KEY}: created ({json.dumps(raw)[:120]}) is malformed") from None
    if not math.isfinite(created.at):
        raise LedgerUnreadable(f"{LEDGER_KEY}: created.at is not a time")
    return created


@dataclass(frozen=True)
class Ledger:
    entries: tuple[Entry, ...] = ()
    retention: int = RETENTION  # the longest window any run has used (or RETENTION): entries younger stay
    limits: tuple[LimitRecord, ...] = ()  # the limits runs decided under, each in force for its window
    created: Created | None = None  # set when a run started this ledger (None: an older gpustack did)

    def newest(self) -> float | None:
        """The latest time written into the ledger (entries, limits, creation)."""
        times = [e.at for e in self.entries] + [x.at for x in self.limits]
        times += [self.created.at] if self.created else []
        return max(times) if times else None

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
                   tuple(_limit(x, i) for i, x in enumerate(limits)), _created(data.get("created")))  # fmt: skip

    def to_text(self) -> str:
        data: dict[str, Any] = {"version": LEDGER_VERSION, "retention": self.retention,
                                "limits": [x.to_json() for x in self.limits],
                                "entries": [e.to_json() for e in self.entries]}  # fmt: skip
        if self.created is not None:
            data["created"] = self.created.to_json()
        return json.dumps(data, sort_keys=True)

    def within(self, now: float, window: int) -> list[Entry]:
        """Entries inside the window ending now (future-dated ones included)."""
        return [e for e in self.entries if e.at > now - window]


@dataclass(frozen=True)
class Decision:
    approved: tuple[str, ...]  # nodes to quarantine now (new entries or entries from an interrupted run)
    held: tuple[str, ...]  # nodes the breaker stops
    ledger: Ledger | None  # the ledger to write (None: nothing to write)
    limit: int
    used: int  # quarantines in this run's window (with the margin), the approved ones included
    added: int = 0  # new entries
    why_held: str = ""  # which limit held them, or why the ledger could not be trusted
    unreadable: str = ""  # set when the ledger could not be read: every new quarantine is held
    at: float | None = None  # the API server's time the decision was made at
    recorded_limit: bool = False  # this run's limit was (re)recorded: the ledger must be written
    clock: str = ""  # set when the API server's clock could not be trusted: every new quarantine is held
    restored: tuple[str, ...] = ()  # quarantines the nodes record and the ledger lacked (now restored)
    created: str = ""  # why this run starts a new ledger (empty: it exists)

    @property
    def changed(self) -> bool:
        return self.added > 0 or self.recorded_limit or bool(self.restored) or bool(self.created)


@dataclass
class Candidate:
    node: str
    rules: tuple[str, ...] = field(default=())
    released_at: float | None = None  # the node's last release (the API server's clock), if any


def held_unreadable(candidates: Sequence[Candidate], gpu_nodes: int, settings: Settings, problem: str) -> Decision:
    """Fail closed: the ledger could not be read, so no new quarantine."""
    return Decision((), tuple(c.node for c in candidates), None, settings.limit(gpu_nodes), 0,
                    why_held=f"the breaker's ledger is unreadable: {problem}", unreadable=problem)  # fmt: skip


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def clock_problem(ledger: Ledger, now: float, local: float | None) -> str:
    """Why the API server's time ``now`` cannot be trusted (empty: it can): it differs from the evaluator's
    clock ``local`` by more than MAX_SKEW, or the ledger holds a time later than it by more than MAX_SKEW."""
    if local is not None and abs(now - local) > MAX_SKEW:
        return (f"the API server's Date ({_iso(now)}) and this evaluator's clock ({_iso(local)}) differ by "
                f"{abs(now - local):.0f} s, more than {MAX_SKEW} s: one of them is wrong")  # fmt: skip
    newest = ledger.newest()
    if newest is not None and newest - now > MAX_SKEW:
        return (f"the ledger holds a time ({_iso(newest)}) {newest - now:.0f} s after the API server's Date "
                f"({_iso(now)}): a server or evaluator with a clock ahead wrote it, or this API server is behind; "
                f"every new quarantine is held until {_iso(newest - MAX_SKEW)}")  # fmt: skip
    return ""


def _restore(entries: list[Entry], stamps: Sequence[Entry], since: float) -> list[Entry]:
    """The node-recorded quarantines (``stamps``) younger than ``since`` that no ledger entry matches."""
    out: list[Entry] = []
    for st in stamps:
        if st.at > since and not any(e.node == st.node and abs(e.at - st.at) <= 1.5 for e in entries + out):
            out.append(Entry(st.node, st.at, RESTORED, st.rules, st.window, st.limit))
    return out


def _pending(c: Candidate, entries: Sequence[Entry], stamps: Sequence[Entry], since: float) -> bool:
    """The node's latest entry is younger than ``since`` and was never carried out: no quarantine recorded on
    the node at or after it, no release since (an interrupted run, finished without spending budget)."""
    mine = [e.at for e in entries if e.node == c.node and e.at > since]
    if not mine:
        return False
    last = max(mine)
    done = any(st.node == c.node and st.at >= last - 1.5 for st in stamps)
    return not done and (c.released_at is None or c.released_at < last)


def decide(
    ledger: Ledger, candidates: Sequence[Candidate], gpu_nodes: int, settings: Settings, now: float, by: str, *,
    local: float | None = None, stamps: Sequence[Entry] = (), created: str = "",
) -> Decision:  # fmt: skip
    """Approve candidates in order while every limit in force lasts (see the module docstring). ``local``: the
    evaluator's clock (None: not checked); ``stamps``: the quarantines the nodes record; ``created``: why a new
    ledger is started (no ConfigMap)."""
    limit = settings.limit(gpu_nodes)
    problem = clock_problem(ledger, now, local)
    if problem:
        return Decision((), tuple(c.node for c in candidates), None, limit, 0, at=now, clock=problem,
                        why_held=f"the breaker does not trust the API server's clock: {problem}")  # fmt: skip
    retention = max(ledger.retention, RETENTION, settings.window + MARGIN, *(e.window + MARGIN for e in ledger.entries))
    entries = [e for e in ledger.entries if e.at > now - retention]
    restored = _restore(entries, stamps, now - retention)
    entries += restored

    def inside(at: float, window: int) -> bool:
        return at > now - window - MARGIN

    # limits in force: this run's, each recorded one within its window, and each entry's within its window
    records = [x for x in ledger.limits if inside(x.at, x.window)]
    limits = {(settings.window, limit, "this run")}
    limits |= {(x.window, x.limit, x.by or "an earlier run") for x in records}
    limits |= {(e.window, e.limit, e.by or "an earlier run") for e in entries
               if e.window > 0 and e.limit >= 0 and inside(e.at, e.window)}  # fmt: skip
    approved, held, added = [], [], 0
    why = ""
    for c in candidates:
        if _pending(c, entries, stamps, now - settings.window - MARGIN):
            approved.append(c.node)
            continue
        full = [(w, lim, who) for w, lim, who in sorted(limits) if sum(1 for e in entries if inside(e.at, w)) >= lim]
        if full:
            w, lim, who = full[0]
            why = why or f"{lim} per {_minutes(w)} ({who}), all used"
            held.append(c.node)
            continue
        entries.append(Entry(c.node, now, by, c.rules, settings.window, limit))
        approved.append(c.node)
        added += 1
    mine = LimitRecord(settings.window, limit, now, by)
    same = [x for x in records if (x.window, x.limit) == (mine.window, mine.limit)]
    # every run puts its limit in force for its window, renewed once half of it has passed (not every run)
    recorded = added > 0 or all(x.at <= now - max(1, settings.window // 2) for x in same)
    others = tuple(x for x in records if (x.window, x.limit) != (mine.window, mine.limit))
    kept = (*others, mine) if recorded else tuple(records)
    made = Created(now, by, created) if created else ledger.created
    used = sum(1 for e in entries if inside(e.at, settings.window))
    return Decision(tuple(approved), tuple(held), Ledger(tuple(entries), retention, kept, made), limit, used, added,
                    why, at=now, recorded_limit=recorded, restored=tuple(f"{e.node} at {_iso(e.at)}" for e in restored),
                    created=created)  # fmt: skip


def _minutes(seconds: int) -> str:
    return f"{seconds // 60} min" if seconds >= 60 else f"{seconds} s"
