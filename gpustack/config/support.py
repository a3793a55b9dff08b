"""Support horizons: when upstream stops supporting a branch, how sure that date is, and what it means today.

The data (every date with its source) is in :mod:`gpustack.config.horizons`; this module judges it. Pure
functions, no network: the dates ship with gpustack. ``today`` is always a parameter; :func:`today` is the
real date unless ``GPUSTACK_TODAY`` (YYYY-MM-DD) says otherwise (tests, or "what will doctor say in March?").

Upstream gives end dates in four shapes, kept apart so nothing is made more precise than its source:

* ``date``: a day (containerd's RELEASES.md, Kubernetes' schedule.yaml, Helm 3's security end).
* ``month``: a month only (NVIDIA's driver branches, containerd 1.7/2.0 extended support): judged from the
  **first** day of that month, the conservative reading, and always shown as the month.
* ``superseded``: "until the next release" (Helm 4 supports only its newest minor, runc its newest three,
  Flannel only its newest release, the GPU Operator's majors): past once the successor is out
  (``successor_released``); before that, ``expected`` may hold the month the successor is due, an estimate
  from the project's cadence, and the verdict says it is one; a branch upstream calls deprecated (``deprecated``:
  critical fixes only until its successor) is ``ending``, without a date.
* ``ended``: upstream lists the branch as ended without a date. ``none``: no end of support is published.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Literal

# one version parser for the pins and their horizons (re-exported: horizons and pins_report read it here)
from gpustack.config.pins import version_tuple as version_tuple
from gpustack.errors import UsageError

Kind = Literal["date", "month", "superseded", "ended", "none"]
#: supported; ending (within :data:`WARN_DAYS` of its end, or its successor is due); past; unknown (no data)
Status = Literal["supported", "ending", "past", "unknown"]
WARN_DAYS = 90
TODAY_ENV = "GPUSTACK_TODAY"


@dataclass(frozen=True)
class Horizon:
    """The end of upstream support of one branch of one component."""

    component: str  # "containerd", "kubernetes", "runc", "helm", "nvidia-driver", ...
    branch: str  # "2.3", "1.36", "R595", "26.7", "ubuntu-22.04"
    kind: Kind
    source: str  # where the date (or the policy) is written
    end: str = ""  # date: "2028-04-30"; month: "2027-03"
    successor: str = ""  # superseded: the release that ends it
    successor_released: str = ""  # superseded: the day the successor shipped ("" = not yet, as far as known)
    expected: str = ""  # superseded: the month the successor is due ("2027-01"), an estimate from the cadence
    deprecated: str = ""  # superseded: the day upstream deprecated the branch (fixes of critical bugs and CVEs only)
    note: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return self.component, self.branch


@dataclass(frozen=True)
class Verdict:
    """A horizon judged on a day."""

    status: Status
    ends: str  # for people: "2028-04-30", "March 2027", "until Helm 4.4.0 (expected ~2027-01, an estimate)"
    days: int | None  # days from ``today`` to the end (negative: past); None without a date
    estimated: bool  # the date is an estimate (a successor's expected month)
    text: str  # one line: the status and the end

    def to_json(self) -> dict[str, object]:
        return {"status": self.status, "ends": self.ends, "days": self.days, "estimated": self.estimated,
                "text": self.text}  # fmt: skip


@dataclass(frozen=True)
class KnownRelease:
    """A release newer than a pin that gpustack knows of, and how far it is confirmed (scripts/pins_report.py)."""

    component: str
    version: str
    released: str  # "2026-09-04", "2026-09" or "" (unknown)
    confirmed: str  # what is confirmed: "upstream tag", "third-party copies only", ...
    source: str
    why_not_pinned: str


def today() -> date:
    """The day horizons are judged against: ``GPUSTACK_TODAY`` (YYYY-MM-DD) when set, else the real date."""
    raw = os.environ.get(TODAY_ENV, "").strip()
    if not raw:
        return date.today()
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise UsageError(f"{TODAY_ENV}={raw!r} is not a date (YYYY-MM-DD)") from None


_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")  # fmt: skip


def month_start(month: str) -> date:
    """ "2027-03" -> 2027-03-01 (the conservative reading of a month-only date)."""
    year, mon = month.split("-")[:2]
    return date(int(year), int(mon), 1)


def month_name(month: str) -> str:
    """ "2027-03" -> "March 2027"."""
    d = month_start(month)
    return f"{_MONTHS[d.month - 1]} {d.year}"


def end_date(h: Horizon) -> date | None:
    """The day support ends (month-only: the first of the month); None when there is no such day."""
    if h.kind == "date":
        return date.fromisoformat(h.end)
    if h.kind == "month":
        return month_start(h.end)
    if h.kind == "superseded" and h.successor_released:
        return date.fromisoformat(h.successor_released)
    return None


def _by_days(days: int, warn_days: int) -> Status:
    return "past" if days < 0 else "ending" if days <= warn_days else "supported"


def judge(h: Horizon, on: date, warn_days: int = WARN_DAYS) -> Verdict:
    """How ``h`` stands on day ``on``: past, ending (within ``warn_days``), supported or unknown."""
    if h.kind in ("date", "month"):
        end = end_date(h)
        assert end is not None
        days = (end - on).days
        ends = h.end if h.kind == "date" else f"{month_name(h.end)} (month only)"
        status = _by_days(days, warn_days)
        return Verdict(status, ends, days, False, _text(status, ends, days))
    if h.kind == "ended":
        return Verdict("past", "ended (no date published)", None, False, "past its end of support (no date published)")
    if h.kind == "none":
        return Verdict("unknown", "no end of support published", None, False, "no end of support published")
    # superseded
    if h.successor_released:
        days = (date.fromisoformat(h.successor_released) - on).days
        ends = f"{h.successor} (released {h.successor_released})"
        if days <= 0:
            return Verdict("past", ends, days, False, f"past: superseded by {ends}")
        return Verdict(_by_days(days, warn_days), ends, days, False, f"until {ends}")
    if h.expected:
        due = month_start(h.expected)
        days = (due - on).days
        ends = f"until {h.successor} (expected ~{h.expected}, an estimate)"
        if days < 0:
            return Verdict("ending", ends, days, True, f"ending: {h.successor} was due ~{h.expected} (an estimate; "
                           "not confirmed released)")  # fmt: skip
        status = "ending" if days <= warn_days else "supported"
        return Verdict(status, ends, days, True, ("ending, " if status == "ending" else "") + ends)
    ends = f"until {h.successor}" if h.successor else "until superseded"
    if h.deprecated:  # upstream's own word: only critical fixes until it ends, so "ending", never "supported"
        ends = f"deprecated since {h.deprecated}, {ends}"
        return Verdict("ending", ends, None, False, f"deprecated upstream since {h.deprecated}: critical bug and "
                       f"CVE fixes only, {ends.split(', ', 1)[1]} (no date)")  # fmt: skip
    return Verdict("supported", ends, None, False, f"supported {ends} (no date)")


def _text(status: Status, ends: str, days: int) -> str:
    if status == "past":
        return f"past its end of support ({ends}, {-days} days ago)"
    if status == "ending":
        return f"support ends in {days} days ({ends})"
    return f"supported until {ends} ({days} days)"


def days_text(days: int | None) -> str:
    if days is None:
        return "-"
    return f"{-days} days ago" if days < 0 else f"in {days} days"


def later(on: date, days: int) -> date:
    return on + timedelta(days=days)
