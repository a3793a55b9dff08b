"""The one console object: owns output, verbosity and colour. Everything the user sees goes
through here; library code never prints."""

from __future__ import annotations

import os
import sys
from typing import Any

# rich is imported when a Console is made, not with this module: `gpustack --help` prints no table
STYLES = {
    "ok": "green",
    "changed": "yellow",
    "warn": "yellow",
    "fail": "bold red",
    "skip": "dim",
    "stage": "bold cyan",
    "host": "magenta",
    "hint": "cyan",
}


#: columns whose cells are names a user copies into a flag (--check, --ignore, --only, --node):
#: never wrapped mid-word, whatever the terminal width (the other columns fold instead)
WHOLE_COLUMNS = frozenset({"id", "check", "stage", "host", "node"})


class Console:
    def __init__(self, *, verbosity: int = 0, color: bool | None = None, stream: Any = None) -> None:
        from rich.console import Console as RichConsole
        from rich.theme import Theme

        no_color = bool(os.environ.get("NO_COLOR") or os.environ.get("GPUSTACK_NO_COLOR"))
        self.verbosity = verbosity
        theme = Theme(STYLES)
        self.out = RichConsole(
            theme=theme,
            file=stream or sys.stdout,
            no_color=no_color if color is None else not color,
            highlight=False,
            soft_wrap=True,
        )
        self.err = RichConsole(theme=theme, stderr=True, no_color=no_color, highlight=False, soft_wrap=True)

    @property
    def interactive(self) -> bool:
        return self.out.is_terminal and not os.environ.get("CI")

    def print(self, *args: Any, **kw: Any) -> None:
        self.out.print(*args, **kw)

    def info(self, msg: str) -> None:
        self.out.print(msg)

    def debug(self, msg: str) -> None:
        if self.verbosity > 0:
            self.out.print(f"[dim]{msg}[/dim]")

    def warn(self, msg: str) -> None:
        self.out.print(f"[warn]warning:[/warn] {msg}")

    def error(self, msg: str, hint: str | None = None) -> None:
        """Print an error (and its fix). The text is literal: a path or value containing ``[/]``
        or other markup characters is printed as written, never interpreted."""
        from rich.markup import escape

        self.err.print(f"[fail]error:[/fail] {escape(msg)}", markup=True)
        if hint:
            self.err.print(f"[hint]hint:[/hint] {escape(hint)}")

    def table(self, title: str, columns: list[str], rows: list[list[str]]) -> None:
        from rich.table import Table

        t = Table(title=title, title_justify="left", show_lines=False)
        for i, c in enumerate(columns):
            if c in WHOLE_COLUMNS:
                cells = [r[i] for r in rows if i < len(r) and "[" not in r[i]]
                longest = max([len(c)] + [len(line) for cell in cells for line in cell.splitlines()])
                t.add_column(c, no_wrap=True, min_width=longest)
            else:
                t.add_column(c, overflow="fold")  # never cut a command the user must copy
        for r in rows:
            t.add_row(*r)
        self.out.print(t)

    def confirm(self, question: str, *, assume_yes: bool) -> bool:
        if assume_yes:
            return True
        if not sys.stdin.isatty():
            return False
        from rich.markup import escape

        return self.out.input(f"{escape(question)} \\[y/N] ").strip().lower() in {"y", "yes"}
