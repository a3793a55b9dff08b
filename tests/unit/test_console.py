"""The one console: the confirmation prompt shows its [y/N] hint and reads the answer."""

from __future__ import annotations

import io

import pytest

from gpustack.console import Console


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("answer", "expected"), [("y\n", True), ("yes\n", True), ("n\n", False), ("\n", False)])
def test_confirm_prompt_shows_the_hint(monkeypatch: pytest.MonkeyPatch, answer: str, expected: bool) -> None:
    out = io.StringIO()
    monkeypatch.setattr("sys.stdin", Tty(answer))
    console = Console(stream=out, color=False)
    assert console.confirm("Apply 1 fix(es) to [cp1]?", assume_yes=False) is expected
    assert out.getvalue() == "Apply 1 fix(es) to [cp1]? [y/N] "


def test_confirm_without_terminal_is_no(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert Console(stream=io.StringIO()).confirm("Go?", assume_yes=False) is False
    assert Console(stream=io.StringIO()).confirm("Go?", assume_yes=True) is True
