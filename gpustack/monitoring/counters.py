"""The dcgm-exporter counters CSV gpustack ships (``values/dcgm-counters.csv``). Pure parsing.

dcgm-exporter reads the file with Go's ``encoding/csv`` (``#`` starts a comment, three fields per
record). Besides the records, gpustack's file carries two comment conventions that the checks read:

- ``# kept deliberately: NAME — reason``: exported although no panel or rule uses it;
- ``# dropped: NAME — reason``: an upstream default gpustack does not export.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from gpustack.paths import resource_file

COUNTERS_FILE = "dcgm-counters.csv"
PROM_TYPES = frozenset({"gauge", "counter", "label"})
_NOTE = re.compile(r"^#\s*(kept deliberately|dropped):\s*(DCGM_\w+)\s*[\u2014\u2013-]+\s*(\S.*)$")  # em/en dash or -
_FIELD = re.compile(r"^DCGM_(FI|EXP)_[A-Z0-9_]+$")


class CounterFileError(ValueError):
    """The counters CSV would be rejected by dcgm-exporter, or breaks gpustack's conventions."""


@dataclass(frozen=True)
class Counter:
    """One CSV record: DCGM field name (also the metric name), Prometheus type and help text."""

    name: str
    prom_type: str
    help: str
    line: int

    @property
    def is_label(self) -> bool:
        """``label`` records become a label on every series (e.g. the driver version), not a series."""
        return self.prom_type == "label"


@dataclass(frozen=True)
class CounterFile:
    """The parsed file: records in order plus the two annotated comment lists."""

    counters: tuple[Counter, ...]
    kept_deliberately: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)

    @property
    def metrics(self) -> list[str]:
        """Names that become Prometheus metrics (``label`` records excluded)."""
        return [c.name for c in self.counters if not c.is_label]

    @property
    def labels(self) -> list[str]:
        """Names exported as labels on the other series."""
        return [c.name for c in self.counters if c.is_label]


def counters_path() -> Path:
    """The shipped CSV, from the source tree or the installed wheel."""
    return resource_file("values", COUNTERS_FILE)


def _parse_record(raw: str, lineno: int) -> Counter:
    if '"' in raw:
        raise CounterFileError(f"line {lineno}: double quotes are not allowed (Go csv would need escaping): {raw!r}")
    parts = [p.strip() for p in raw.split(",")]
    if len(parts) != 3:
        raise CounterFileError(f"line {lineno}: expected 3 comma-separated fields, got {len(parts)}: {raw!r}")
    name, prom_type, help_text = parts
    if not _FIELD.match(name):
        raise CounterFileError(f"line {lineno}: {name!r} is not a DCGM field name")
    if prom_type not in PROM_TYPES:
        raise CounterFileError(f"line {lineno}: unknown Prometheus type {prom_type!r} (use {sorted(PROM_TYPES)})")
    if not help_text:
        raise CounterFileError(f"line {lineno}: {name} has an empty help text")
    return Counter(name=name, prom_type=prom_type, help=help_text, line=lineno)


def _note(line: str) -> tuple[str, str, str] | None:
    match = _NOTE.match(line.strip())
    return (match.group(1), match.group(2), match.group(3).strip()) if match else None


def parse_counters(text: str) -> CounterFile:
    """Parse the CSV text; raise :class:`CounterFileError` on anything dcgm-exporter would reject."""
    counters: list[Counter] = []
    notes: dict[str, dict[str, str]] = {"kept deliberately": {}, "dropped": {}}
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            note = _note(stripped)
            if note:
                notes[note[0]][note[1]] = note[2]
            continue
        counters.append(_parse_record(stripped, lineno))
    _check_unique(counters)
    return CounterFile(tuple(counters), notes["kept deliberately"], notes["dropped"])


def _check_unique(counters: list[Counter]) -> None:
    seen: dict[str, int] = {}
    for c in counters:
        if c.name in seen:
            raise CounterFileError(f"line {c.line}: {c.name} is already defined on line {seen[c.name]}")
        seen[c.name] = c.line


def load_counters(path: Path | None = None) -> CounterFile:
    """Parse the shipped CSV (or ``path``)."""
    return parse_counters((path or counters_path()).read_text(encoding="utf-8"))
