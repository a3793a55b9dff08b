"""What a message says, whatever the width the console wrapped it at.

The console wraps errors and hints at word boundaries to the terminal's width (80 columns without a terminal), so
where a line breaks depends on the length of what it names: pytest's temporary path, the clone's directory. A
test compares the words, never the line breaks: ``needle in said(err)``."""

from __future__ import annotations


def said(text: str) -> str:
    """``text``'s words joined by single spaces (the console never breaks a word: a path stays whole)."""
    return " ".join(text.split())
