"""README.md and docs/*.md hold together: every relative link resolves to a file (and its anchor to a
heading), every docs page is in docs/README.md's index, the README keeps the two set-up commands CI and
the checker run, and it stays under 16 KB (samples and long sections belong in docs/)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from gpustack.config.model import Config

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
README_LIMIT = 16_000  # bytes, as `wc -c README.md` counts them

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """The text without fenced blocks and code spans: links there are examples, not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (github-slugger): markup dropped, lower case, every character that
    is not a letter, digit, space, ``-`` or ``_`` removed, spaces turned into ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").replace("*", "").lower()
    return "".join(c for c in text if c.isalnum() or c in "-_ ").replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def links(path: Path) -> list[str]:
    return LINK.findall(prose(path.read_text(encoding="utf-8")))


def test_slug_matches_github() -> None:
    assert slug("`gpustack upgrade --to`") == "gpustack-upgrade---to"
    assert slug("Ubuntu's per-OS variables: what was checked, what could not be") == (
        "ubuntus-per-os-variables-what-was-checked-what-could-not-be"
    )
    assert slug("CLI-wide rules (issue #10), held by a test") == "cli-wide-rules-issue-10-held-by-a-test"
    assert slug("`gpustack render --out DIR [--facts RUN/facts]`") == "gpustack-render---out-dir---facts-runfacts"


def test_link_parser_skips_code_and_finds_links() -> None:
    text = "See [a](a.md#x) and `[b](b.md)`.\n```\n[c](c.md)\n```\n![img](d.png) [e](https://e.example)"
    assert LINK.findall(prose(text)) == ["a.md#x", "d.png", "https://e.example"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: …
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.relative_to(ROOT)}")
    assert broken == []


def test_docs_paths_named_in_prose_exist() -> None:
    """`docs/NAME.md` written as text (not a link) must name a page that exists too."""
    named = {m for page in PAGES for m in re.findall(r"\bdocs/([\w-]+\.md)", page.read_text(encoding="utf-8"))}
    assert sorted(n for n in named if not (DOCS / n).exists()) == []


def test_every_docs_page_is_in_the_index() -> None:
    index = DOCS / "README.md"
    listed = {Path(t.partition("#")[0]).name for t in links(index)}
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert sorted(pages - listed) == [], "add a line per page to docs/README.md"


def test_readme_stays_small() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size < README_LIMIT, f"README.md is {size} bytes; move samples and long sections to docs/"


def test_readme_keeps_the_two_set_up_commands() -> None:
    """CI (.ci/run) and the project's checker run exactly these two lines of the README."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Set-up: two commands\n\n```bash\n(.*?)\n```", text, re.S)
    assert block is not None
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands == ["./scripts/gpustack up", "scripts/test.sh"]
    assert (ROOT / "scripts" / "gpustack").is_file()
    assert (ROOT / "scripts" / "test.sh").is_file()


def test_readme_first_screen_shows_install_only_and_the_prerequisites() -> None:
    """Before the command table: both forms (install and build here; install only) and what each needs."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first = text[: text.index("## Commands")]
    assert "./scripts/gpustack version   # install only" in first
    for needed in ("Python >= 3.10", "python3-venv", "passwordless `sudo`", "known_hosts", "--accept-new-host-keys",
                   "ssh-keygen"):  # fmt: skip
        assert needed in first, needed
    assert len(first.splitlines()) < 60


def test_readme_has_a_line_per_command() -> None:
    """Every registered top-level command has a row in the README's command table."""
    import typer.main

    from gpustack.cli.app import app

    group = typer.main.get_command(app)
    names = set(getattr(group, "commands", {}))
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `gpustack ([a-z-]+)", text, re.M))
    assert sorted(names - rows) == []


def test_configuration_lists_every_section() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    section = text.split("## Sections", 1)[1].split("\n## ", 1)[0]
    assert sorted(name for name in Config.model_fields if f"- `{name}`" not in section) == []
