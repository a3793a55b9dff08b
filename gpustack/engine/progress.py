"""What a run shows while it goes and when it ends: stage lines and the spinner fed by runner events
(:class:`Progress`), the preflight table, and the summary table."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gpustack.console import literal
from gpustack.errors import PreflightError

if TYPE_CHECKING:
    from gpustack.checks.model import Finding
    from gpustack.console import Console
    from gpustack.engine.steps import StageSummary
    from gpustack.runners import ansible as ar


class Progress:
    """Feeds the console from runner events: one line per stage start, task status in a spinner."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.stage: str | None = None
        self.stage_started = time.monotonic()
        self.status: Any = None

    def __enter__(self) -> Progress:
        if self.console.interactive:
            self.status = self.console.out.status("starting", spinner="dots")
            self.status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.__exit__(None, None, None)

    def end(self, result: ar.StageResult) -> None:
        """A stage's end line: time, changed count, hosts (or why it had none)."""
        if result.failures:
            verdict = f"[fail]failed[/fail] on {literal(', '.join(sorted({f.host for f in result.failures})))}"
        elif not result.hosts:
            verdict = "[skip]nothing to do (converged or no host in this stage)[/skip]"
        else:
            verdict = (
                f"[{'changed' if result.changed_total else 'ok'}]{result.changed_total} changed[/] "
                f"on {len(result.hosts)} host(s)"
            )
        self.console.print(f"[stage]■ {literal(result.stage)}[/stage] {verdict} [dim]{result.elapsed:.1f}s[/dim]")

    def __call__(self, stage: str, host: str | None, task: str | None) -> None:
        if stage != self.stage:
            self.stage = stage
            self.stage_started = time.monotonic()
            self.console.print(f"[stage]▶ {literal(stage)}[/stage]")
        elapsed = time.monotonic() - self.stage_started
        line = (f"[stage]{literal(stage)}[/stage] {'[host]' + literal(host) + '[/host] ' if host else ''}{literal(task or '')} "
                f"[dim]{elapsed:5.1f}s[/dim]")  # fmt: skip
        if self.status is not None:
            self.status.update(line)
        elif self.console.verbosity > 0 and task:
            self.console.print(f"  {line}")


def report_preflight(findings: list[Finding], console: Console) -> None:
    shown = [f for f in findings if f.status != "pass" or console.verbosity > 0]
    if shown:
        rows = [
            [
                literal(f.host or ""),
                literal(f.id),
                f"[{f.status}]{f.status}[/{f.status}]",
                literal(f.summary) + (f"\n[dim]{literal(f.evidence)}[/dim]" if f.evidence else ""),
                literal(f.fix),
            ]
            for f in shown
        ]
        console.table("Preflight", ["host", "check", "status", "finding", "fix"], rows)
    fails = [f for f in findings if f.status == "fail"]
    if fails:
        raise PreflightError(
            f"preflight failed: {len(fails)} problem(s) on {', '.join(sorted({f.host or '?' for f in fails}))}; nothing was changed",
            hint="fix them, or pass --ignore-preflight "
            + ",".join(sorted({f.name for f in fails}))
            + " if you are sure",
        )
    console.print(
        f"[ok]preflight passed[/ok] on {len({f.host for f in findings})} host(s)"
        + (
            f" with {sum(f.status == 'warn' for f in findings)} warning(s)"
            if any(f.status == "warn" for f in findings)
            else ""
        )
    )


def print_summary(summaries: list[StageSummary], console: Console, *, dry_run: bool) -> None:
    style = {"ok": "ok", "changed": "changed", "failed": "fail", "not run": "skip", "interrupted": "fail"}
    rows = [
        [
            literal(s.stage),
            f"[{style.get(s.status, 'skip')}]{literal(s.status)}[/]",
            str(s.changed),
            f"{s.elapsed:.1f}s",
            literal(", ".join(s.hosts)) + (f"{' ' if s.hosts else ''}[dim]({literal(s.note)})[/dim]" if s.note else ""),
        ]
        for s in summaries
    ]
    total = sum(s.elapsed for s in summaries)
    console.table(
        f"Summary{' (dry run: check mode, nothing changed)' if dry_run else ''} — {total:.1f}s",
        ["stage", "status", "changed", "time", "hosts"],
        rows,
    )
