#!/usr/bin/env python3
"""Maintainer's report: every pin, the end of its upstream support, how far away that is, and the newer releases
gpustack knows of (with how far each is confirmed and why it is not pinned).

    python scripts/pins_report.py [--today YYYY-MM-DD] [--warn-days 90] [--json] [--strict] [--smoke]
                                  [--online [--recorded DIR]]

Offline (the default) it reads only what ships with gpustack (gpustack/config/pins.py, horizons.py, security.py): no
network. ``--online`` adds what upstream has released now (scripts/pins_online.py: GitHub release lists, dl.k8s.io's
stable-<minor>.txt, the release sha256 files; read-only, nothing is written or trusted); ``--recorded DIR`` answers
those requests from recorded files instead (tests/fixtures/pins-online). The day defaults to the
real date (or GPUSTACK_TODAY), so run it before a release: a pin past its end of support, or within
``--warn-days`` of it, is the one to move first (docs/maintaining.md says how). ``--strict`` exits 1 when any pin
is past its end of support. ``--smoke`` (CI, tests/unit/test_pins_report.py): the report for 2026-11-26, checked
for a verdict and a source on every pin and a pinned component behind every known release.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date

from gpustack.config import horizons, lifecycle, pins, support

SMOKE_DAY = date(2026, 11, 26)


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--today", type=date.fromisoformat, default=None, help="judge on this day (YYYY-MM-DD)")
    parser.add_argument("--warn-days", type=int, default=support.WARN_DAYS)
    parser.add_argument("--json", action="store_true", help="the report as JSON")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a pin is past its end of support")
    parser.add_argument("--smoke", action="store_true", help="CI: the report for 2026-11-26, checked")
    parser.add_argument("--online", action="store_true", help="also ask upstream what it has released (read-only)")
    parser.add_argument("--recorded", metavar="DIR", default=None, help="--online from recorded answers in DIR")
    return parser.parse_args(argv)


def rows(on: date, warn_days: int) -> list[dict[str, object]]:
    """One row per pin: the judged horizon and the newer releases known for its component."""
    out = []
    for j in lifecycle.pin_support(None, on):
        h = horizons.BY_KEY.get((j.component if j.component != "kube-prometheus-stack" else "prometheus", j.branch))
        verdict = support.judge(h, on, warn_days) if h else j.verdict
        newer = newer_known(j.component, j.version)
        checksums = pins.CHECKSUM_SOURCES.get((j.component, j.version), "")
        out.append({"component": lifecycle.pin_label(j), "version": j.version, "branch": j.branch,
                    **verdict.to_json(), "source": j.source, "note": j.note, "newer_known": newer,
                    "checksums": checksums})  # fmt: skip
    return out


def newer_known(component: str, version: str) -> list[str]:
    """The known releases newer than a pin: of its component (kube-prometheus-stack also the Prometheus it
    deploys); for Kubernetes, patches of the pinned minor, and new minors beside the newest pinned one."""
    have = support.version_tuple(version)
    newest_minor = max(support.version_tuple(m) for m in pins.KUBERNETES)
    out = []
    for k in horizons.KNOWN_RELEASES:
        if k.component == "prometheus" and component == "kube-prometheus-stack":
            out.append(f"Prometheus {k.version}")
            continue
        if k.component != component or support.version_tuple(k.version) <= have:
            continue
        if component == "kubernetes":
            minor = support.version_tuple(k.version)[:2]
            if minor != have[:2] and not (minor > newest_minor and have[:2] == newest_minor):
                continue
        out.append(k.version)
    return out


def _table(headers: list[str], body: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [headers, *body]) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [headers, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render(report: list[dict[str, object]], on: date) -> str:
    body = [[str(r["component"]), str(r["version"]), str(r["ends"]), support.days_text(r["days"]),  # type: ignore[arg-type]
             str(r["status"]).upper() if r["status"] in ("past", "ending") else str(r["status"]),
             ", ".join(r["newer_known"]) or "-"]  # type: ignore[arg-type]
            for r in report]  # fmt: skip
    out = [f"gpustack pins on {on.isoformat()}", "",
           _table(["component", "pinned", "support ends", "when", "status", "newer known"], body), "",
           "Where each date comes from:"]  # fmt: skip
    out += [f"  {r['component']} {r['version']}: {r['source']}" + (f" ({r['note']})" if r["note"] else "")
            for r in report]  # fmt: skip
    out += ["", "Newer releases gpustack knows of (gpustack/config/horizons.py KNOWN_RELEASES):"]
    for k in horizons.KNOWN_RELEASES:
        when = f", {k.released}" if k.released else ""
        out.append(f"  {k.component} {k.version}{when}: {k.confirmed} [{k.source}]; not pinned: {k.why_not_pinned}")
    out += ["", "Pinned checksums, two sources each (gpustack/config/pins.py CHECKSUM_SOURCES):"]
    out += [f"  {r['component']} {r['version']}: {r['checksums']}" for r in report if r["checksums"]]
    return "\n".join(out)


def summary(report: list[dict[str, object]]) -> str:
    count = {s: sum(1 for r in report if r["status"] == s) for s in ("past", "ending", "unknown")}
    return (f"pins_report: {len(report)} pins, {count['past']} past end of support, {count['ending']} ending "
            f"(within the warning window), {count['unknown']} without a published date; "
            f"{len(horizons.KNOWN_RELEASES)} newer releases known")  # fmt: skip


def smoke_problems(report: list[dict[str, object]]) -> list[str]:
    """What must hold for the report to mean anything: a verdict and a source on every pin, and a pinned
    component behind every known release."""
    problems = [f"{r['component']}: no source" for r in report if not r["source"]]
    problems += [f"{r['component']}: no verdict" for r in report if r["status"] not in support.Status.__args__]  # type: ignore[attr-defined]
    pinned = {lifecycle.pin_label(j).split(" ")[0] for j in lifecycle.pin_support(None, SMOKE_DAY)} | {"prometheus"}
    problems += [
        f"known release of unpinned {k.component}" for k in horizons.KNOWN_RELEASES if k.component not in pinned
    ]
    return problems


def _online(args: argparse.Namespace) -> list[dict[str, object]]:
    import pins_online  # beside this script (sys.path[0] is scripts/)

    fetch = pins_online.recorded(args.recorded) if args.recorded else pins_online.http_get
    return pins_online.discover(fetch)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    on = SMOKE_DAY if args.smoke else (args.today or support.today())
    report = rows(on, args.warn_days)
    upstream = _online(args) if args.online else None
    if args.json:
        print(json.dumps({"today": on.isoformat(), "pins": report,
                          "known_releases": [k.__dict__ for k in horizons.KNOWN_RELEASES],
                          **({"upstream": upstream} if upstream is not None else {})}, indent=2))  # fmt: skip
    else:
        print(render(report, on))
        if upstream is not None:
            import pins_online

            print()
            print(pins_online.render(upstream))
        print()
        print(summary(report))
    if args.smoke:
        problems = smoke_problems(report)
        for p in problems:
            print(f"pins_report: {p}", file=sys.stderr)
        return 1 if problems else 0
    return 1 if args.strict and any(r["status"] == "past" for r in report) else 0


if __name__ == "__main__":
    sys.exit(main())
