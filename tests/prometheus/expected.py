"""The warnings a healthy new cluster may show: docs/checks.md's "Expected on a new cluster" table, read by the
golden paths and the any-size test (a warning not listed there fails them)."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "checks.md"


def expected_warns() -> set[tuple[str, str]]:
    """``(check id, summary)`` of the warnings docs/checks.md lists under "Expected on a new cluster"."""
    text = DOCS.read_text(encoding="utf-8")
    section = re.search(r"^## Expected on a new cluster\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, "docs/checks.md has a '## Expected on a new cluster' section"
    rows = re.findall(r"^\| `([A-Z]\d\d-[\w-]+)` \| warn \| (.+?) \|", section.group(1), re.M)
    assert rows, "the section lists its warnings as '| `ID` | warn | summary | why |' rows"
    return {(check, summary.replace("\\|", "|")) for check, summary in rows}
