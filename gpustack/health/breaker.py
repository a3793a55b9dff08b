"""The circuit breaker: at most N nodes, and at most P% of the GPU nodes, quarantined per window. Pure.

Its state is a ledger of quarantines (node, time, by whom, why) kept in one ConfigMap
(``gpustack-system/gpustack-health-breaker``, key ``ledger.json``). An evaluator reads the ledger, decides,
and writes the new ledger back with the ``resourceVersion`` it read as a precondition *before* it touches a
node; a concurrent evaluator's write makes that write fail with 409 Conflict, and the loser reads again and
decides again. So two evaluators never spend the same budget twice (see docs/decisions.md). An entry stays
for the window even when the node patch then fails or the node is released: the breaker limits how many
quarantines *happen* per window, whatever became of them.

A node already in the ledger within the window is approved again without spending budget: a run that was
interrupted between the ledger write and the node patch is finished by the next run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpustack.health.policy import Settings

LEDGER_KEY = "ledger.json"
LEDGER_VERSION = 1


@dataclass(frozen=True)
class Entry:
    node: str
    at: float  # epoch seconds
    by: str
    rules: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "at": round(self.at, 3), "by": self.by, "rules": list(self.rules)}


@dataclass(frozen=True)
class Ledger:
    entries: tuple[Entry, ...] = ()

    @classmethod
    def from_text(cls, text: str | None) -> Ledger:
        """Parse ``ledger.json``; an empty or unreadable ledger is empty (the breaker then starts afresh)."""
        try:
            data = json.loads(text or "{}")
        except ValueError:
            return cls()
        out = []
        for e in data.get("entries") or [] if isinstance(data, dict) else []:
            try:
                out.append(Entry(str(e["node"]), float(e["at"]), str(e.get("by") or ""), tuple(e.get("rules") or ())))
            except (KeyError, TypeError, ValueError):
                continue
        return cls(tuple(out))

    def to_text(self) -> str:
        return json.dumps({"version": LEDGER_VERSION, "entries": [e.to_json() for e in self.entries]}, sort_keys=True)

    def recent(self, now: float, window: int) -> list[Entry]:
        return [e for e in self.entries if now - window < e.at <= now + 60]  # +60: clock skew between evaluators


@dataclass(frozen=True)
class Decision:
    approved: tuple[str, ...]  # nodes to quarantine now (new entries or entries from an interrupted run)
    held: tuple[str, ...]  # nodes the breaker stops
    ledger: Ledger  # the ledger to write (pruned to the window, new entries appended)
    limit: int
    used: int  # quarantines in the window, the approved ones included

    @property
    def changed(self) -> bool:
        return bool(self.approved)


@dataclass
class Candidate:
    node: str
    rules: tuple[str, ...] = field(default=())


def decide(
    ledger: Ledger, candidates: Sequence[Candidate], gpu_nodes: int, settings: Settings, now: float, by: str
) -> Decision:
    """Approve candidates in order while the window's budget lasts."""
    recent = ledger.recent(now, settings.window)
    limit = settings.limit(gpu_nodes)
    seen = {e.node for e in recent}
    entries = list(recent)
    approved, held = [], []
    for c in candidates:
        if c.node in seen:
            approved.append(c.node)
        elif len(entries) < limit:
            entries.append(Entry(c.node, now, by, c.rules))
            seen.add(c.node)
            approved.append(c.node)
        else:
            held.append(c.node)
    return Decision(tuple(approved), tuple(held), Ledger(tuple(entries)), limit, len(entries))
