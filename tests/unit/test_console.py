"""The one console: the confirmation prompt shows its [y/N] hint and reads the answer."""

from __future__ import annotations

import io

import pytest

from gpustack.console import Console, column_widths, grid, shorten


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


# --- the layout at any width: a token is never broken (issue #18) ------------------------------------


def lines_of(renderable: object, width: int) -> list[str]:
    out = io.StringIO()
    console = Console(stream=out, color=False)
    console.out.width = width
    console.print(renderable, soft_wrap=True)
    return out.getvalue().splitlines()


def whole_everywhere(tokens: list[str], lines: list[str]) -> None:
    """Every token on one line; a line wider than the terminal holds nothing but one token."""
    for t in tokens:
        assert any(t in line for line in lines), f"{t} broken:\n" + "\n".join(lines)
    for line in lines:
        assert len(line) <= 80 or len(line.split()) == 1, f"too wide: {line!r}"


def test_column_widths_hold_the_longest_token_or_give_up() -> None:
    cols = ["id", "note"]
    cells = [["P11-existing-kubernetes", "a kubelet from another installation runs here"]]
    widths = column_widths(cols, cells, 80, [True, False])
    assert widths is not None and widths[0] == len("P11-existing-kubernetes") and sum(widths) + 7 <= 80
    assert widths[1] == len(cells[0][1])  # room enough: no wrap at all
    narrow = column_widths(cols, cells, 45, [True, False])
    assert narrow is not None and narrow[1] >= len("installation") and sum(narrow) + 7 <= 45
    assert column_widths(cols, [["x", "sha256:" + "a" * 64]], 60, [True, False]) is None  # blocks then


def test_a_table_too_wide_for_its_tokens_becomes_blocks() -> None:
    sha = "sha256:" + "c" * 64
    url = "https://github.com/containerd/containerd/releases/download/v2.2.7/containerd-2.2.7-linux-amd64.tar.gz"
    lines = lines_of(grid("artifacts", ["artifact", "checksum", "url"], [["containerd", sha, url]], width=80), 80)
    whole_everywhere([sha, url], lines)
    assert lines[1].startswith("- artifact") and "containerd" in lines[1]
    assert not any("┃" in line for line in lines)


def test_errors_wrap_at_words_and_a_huge_value_is_shortened(capsys: pytest.CaptureFixture[str]) -> None:
    console = Console(color=False)
    console.err.width = 80
    path = "/very/long/path/" + "x" * 90 + "/admin.conf"
    console.error(f"cannot read {path}: the file holds {'v' * 5000} and more words " * 3, "a hint " * 30)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0].startswith("error: ") and any(line.startswith("hint: ") for line in lines)
    assert all(line.startswith("  ") for line in lines[1:] if not line.startswith("hint: "))
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in lines), err
    assert path in err.split() or f"{path}:" in err.split(), "a long path stays whole"
    assert "v" * 5000 not in err and "(5,000 characters)" in err
    assert shorten("x" * 1_000_000).endswith("… (1,000,000 characters)") and len(shorten("x" * 1_000_000)) < 130
