"""The one console object: owns output, verbosity and colour. Everything the user sees goes
through here; library code never prints.

It also owns the layout at any terminal width (docs/commands.md, "Rules every command keeps"): a
token (a word, a sha256 sum, a URL, a path, a check id) is never broken across lines. Text wraps at
word boundaries; a table gets column widths that hold its longest token, or, when no such widths
fit the terminal, one block per record; an error or warning wraps at word boundaries with a
hanging indent, and a value too long to be useful in a message is shortened (:func:`shorten`)."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import textwrap
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console as RichConsole
    from rich.console import RenderableType
    from rich.text import Text

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
#: never wrapped at all, whatever the terminal width (the other columns wrap at word boundaries)
WHOLE_COLUMNS = frozenset({"id", "check", "stage", "host", "node"})
#: columns whose lines are commands to copy: a line is never wrapped (a table keeps it whole, or the
#: record becomes a block where it has a line of its own)
COMMAND_COLUMNS = frozenset({"fix", "runs"})
#: a value longer than this is shortened in a message (a 1 MB value is not echoed whole)
MESSAGE_VALUE_LIMIT = 120
#: the width used when the output is not a terminal and $COLUMNS is not set
DEFAULT_WIDTH = 80
#: seconds a wait goes on silently before a terminal is told what it waits for
WAIT_NOTICE_AFTER = 1.5


@contextlib.contextmanager
def waiting(what: str, *, stream: Any = None, after: float | None = None) -> Iterator[None]:
    """Around a wait that is usually short (a connection): when the block still runs after ``after`` seconds
    and stderr (``stream``) is a terminal, one line there says what is waited for and for how long at most
    (``waiting for WHAT ...``). Nothing is said on a pipe or a file, or when the wait ends in time."""
    stream = stream or sys.stderr
    if not (hasattr(stream, "isatty") and stream.isatty()):
        yield
        return

    def notice() -> None:
        from rich.console import Console as RichConsole
        from rich.text import Text

        no_color = bool(os.environ.get("NO_COLOR") or os.environ.get("GPUSTACK_NO_COLOR"))
        out = RichConsole(file=stream, highlight=False, soft_wrap=True, no_color=no_color)
        out.print(Text(f"waiting for {what} ...", style="dim"))

    timer = threading.Timer(WAIT_NOTICE_AFTER if after is None else after, notice)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def literal(value: object) -> str:
    """``value`` as console markup that prints as written: user text (a config key, a value, a path, a host or
    node name, a remote system's output) inside a styled line or a table cell is never read as markup."""
    from rich.markup import escape

    return escape(str(value))


def shorten(value: object, limit: int = MESSAGE_VALUE_LIMIT) -> str:
    """``value`` as text for a message: at most ``limit`` characters, the rest said in numbers."""
    text = str(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 30]}… ({len(text):,} characters)"


def wrap_words(text: str, width: int, indent: str = "  ") -> str:
    """``text`` wrapped at word boundaries to ``width`` (a longer token stays whole on its own line);
    each line of a multi-line text keeps its indentation, its continuation lines get ``indent`` more."""
    out: list[str] = []
    for line in text.splitlines() or [""]:
        lead = line[: len(line) - len(line.lstrip())]
        words = " ".join(shorten(w, 1000) for w in line.split(" "))
        out += textwrap.wrap(
            words,
            width=max(width, 20),
            initial_indent="",
            subsequent_indent=lead + indent,
            break_long_words=False,
            break_on_hyphens=False,
            drop_whitespace=True,
        ) or [line]
    return "\n".join(out)


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

    @property
    def width(self) -> int:
        return self.out.width or DEFAULT_WIDTH

    def print(self, *args: Any, **kw: Any) -> None:
        """Console markup, for lines gpustack styles itself: anything from the user or a remote system in it
        (a key, value, path, host name, node, remote output) goes in through :func:`literal`."""
        self.out.print(*args, **kw)

    def info(self, msg: str) -> None:
        """A line of literal text (never markup)."""
        from rich.text import Text

        self.out.print(Text(msg), soft_wrap=True)

    def debug(self, msg: str) -> None:
        """A line of literal text, dimmed, shown with ``-v``."""
        if self.verbosity > 0:
            from rich.text import Text

            self.out.print(Text(msg, style="dim"), soft_wrap=True)

    def _say(self, to: RichConsole, label: str, style: str, msg: str) -> None:
        """``label: msg``, wrapped at word boundaries to the width; the text is literal (a path or
        value containing ``[/]`` is printed as written, never interpreted as markup)."""
        from rich.text import Text

        wrapped = wrap_words(f"{label}: {msg}", to.width or DEFAULT_WIDTH)
        text = Text(wrapped)
        text.stylize(style, 0, len(label) + 1)
        to.print(text, soft_wrap=True)

    def say(self, text: str) -> None:
        """Literal text (never markup) wrapped at word boundaries to the width, continuation lines
        indented: a path or URL in it stays whole."""
        from rich.text import Text

        self.out.print(Text(wrap_words(text, self.width)), soft_wrap=True)

    def warn(self, msg: str, *, stderr: bool = False) -> None:
        """``warning: msg``, literal, on stdout (beside the output it is about) or on ``stderr`` (a notice that
        must not mix with JSON or a password on stdout)."""
        self._say(self.err if stderr else self.out, "warning", "warn", msg)

    def error(self, msg: str, hint: str | None = None) -> None:
        """Print an error (and its fix) on stderr."""
        self._say(self.err, "error", "fail", msg)
        if hint:
            self._say(self.err, "hint", "hint", hint)

    def table(self, title: str, columns: list[str], rows: list[list[str]], *, blocks: bool = False) -> None:
        """A table whose cells are console markup (user text in them through :func:`literal`); its title is
        literal text. See :func:`grid` for the layout (``blocks``: one block per record even where a boxed table
        fits, for a report whose other tables do not)."""
        # soft_wrap: what grid laid out is printed as it is (a token longer than the terminal is
        # left whole for the terminal to fold, never cut or broken by rich)
        self.out.print(grid(title, columns, rows, width=self.width, blocks=blocks), soft_wrap=True)

    def fits(self, columns: list[str], rows: list[list[str]]) -> bool:
        """Whether :meth:`table` would print these rows as a boxed table at this width."""
        plain = [[_text(c).plain for c in r] for r in rows]
        whole = [c in WHOLE_COLUMNS or c in COMMAND_COLUMNS for c in columns]
        return column_widths(columns, plain, self.width, whole) is not None

    def confirm(self, question: str, *, assume_yes: bool) -> bool:
        if assume_yes:
            return True
        if not sys.stdin.isatty():
            return False
        from rich.markup import escape

        return self.out.input(f"{escape(question)} \\[y/N] ").strip().lower() in {"y", "yes"}


# --- tables: a layout that fits, never a broken token ---------------------------------------------


def _text(cell: str) -> Text:
    from rich.errors import MarkupError
    from rich.text import Text

    try:
        return Text.from_markup(cell)
    except MarkupError:
        return Text(cell)


def _longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def _longest_line(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def longest_line(header: str, cells: Sequence[Sequence[str]], i: int) -> int:
    return max([_longest_line(header)] + [_longest_line(r[i]) for r in cells if i < len(r)])


def column_widths(
    columns: Sequence[str], cells: Sequence[Sequence[str]], width: int, whole: Sequence[bool] = ()
) -> list[int] | None:
    """Content widths for a boxed table of ``width`` columns in which no token is broken (each column
    at least its longest word; a ``whole`` column its longest line), spare room given where lines are
    longest; None when even the narrowest such table does not fit. ``cells`` are plain text."""
    n = len(columns)
    whole = list(whole) or [False] * n
    longest = [max([_longest_line(columns[i])] + [_longest_line(r[i]) for r in cells if i < len(r)]) for i in range(n)]
    least = [
        longest[i]
        if whole[i]
        else max([_longest_word(columns[i])] + [_longest_word(r[i]) for r in cells if i < len(r)])
        for i in range(n)
    ]
    room = width - (3 * n + 1)  # a border before each column and after the last, one space each side
    if sum(least) > room:
        return None
    widths = [max(1, w) for w in least]
    spare = room - sum(widths)
    while spare > 0:
        wanting = [i for i in range(n) if widths[i] < longest[i]]
        if not wanting:
            break
        deficit = sum(longest[i] - widths[i] for i in wanting)
        given = 0
        for i in wanting:
            add = min(longest[i] - widths[i], max(1, spare * (longest[i] - widths[i]) // deficit), spare - given)
            widths[i] += add
            given += add
            if given >= spare:
                break
        spare -= given
    return widths


def grid(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int,
    right: Sequence[int] = (),
    footer: Sequence[str] | None = None,
    blocks: bool = False,
) -> RenderableType:
    """A table (cells are console markup, the title literal text) laid out for ``width`` columns: boxed, with column widths
    from :func:`column_widths`, or one block per record when no boxed table fits (each field on its
    own line, ``key  value``, the value wrapped at word boundaries). ``right``: right-aligned columns
    (numbers); ``footer``: a last row (a total) set apart."""
    from rich.table import Table
    from rich.text import Text

    everything = [*rows, *([footer] if footer is not None else [])]
    plain = [[_text(c).plain for c in r] for r in everything]
    widths = column_widths(columns, plain, width, [c in WHOLE_COLUMNS or c in COMMAND_COLUMNS for c in columns])
    if widths is None or blocks:
        return _blocks(title, columns, everything, width)
    t = Table(title=Text(title) if title else None, title_justify="left", show_lines=False)
    for i, (c, w) in enumerate(zip(columns, widths, strict=True)):
        t.add_column(c, width=w, no_wrap=w >= longest_line(c, plain, i), justify="right" if i in right else "left")
    for r in rows:
        t.add_row(*[_text(c) for c in r])
    if footer is not None:
        t.add_section()
        t.add_row(*[_text(c) for c in footer], style="bold")
    return t


def _blocks(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> RenderableType:
    """One block per record: ``- first-key  value`` then ``  key  value`` for each other field. A
    value that does not fit beside its key goes below it; a command is never wrapped."""
    from rich.console import Group
    from rich.text import Text

    keyw = max(len(c) for c in columns)
    room = max(width - keyw - 4, 20)
    lines: list[Text] = [Text(title, style="italic")] if title else []
    for r in rows:
        for i, (c, cell) in enumerate(zip(columns, r, strict=False)):
            value = _text(cell)
            if not value.plain.strip():
                continue
            key = Text(("- " if i == 0 else "  ") + c, style="bold" if i == 0 else "")
            whole = c in WHOLE_COLUMNS or c in COMMAND_COLUMNS
            parts = value.split("\n") if whole else _wrap(value, room)
            if all(p.cell_len <= room for p in parts):
                lines.append(key + Text(" " * (keyw + 4 - key.cell_len)) + parts[0])
                lines += [Text(" " * (keyw + 4)) + p for p in parts[1:]]
            else:  # below its key, at a small indent
                lines.append(key)
                lines += [Text("    ") + p for p in (value.split("\n") if whole else _wrap(value, width - 4))]
    for line in lines:  # laid out here: never wrapped or cropped again when printed
        line.no_wrap, line.overflow = True, "ignore"
    return Group(*lines)


def _wrap(value: Text, width: int) -> list[Text]:
    """``value``'s lines wrapped at word boundaries to ``width``; a longer token is kept whole, on a
    line of its own (rich's own wrapping folds such a token, or crops it)."""
    out: list[Text] = []
    for line in value.split("\n"):
        offsets: list[int] = []
        col = 0
        for m in re.finditer(r"\S+\s*", line.plain):
            if col and col + len(m.group().rstrip()) > width:
                offsets.append(m.start())
                col = 0
            col += len(m.group())
        for part in line.divide(offsets):
            part.rstrip()
            out.append(part)
    return out or [value]
