#!/usr/bin/env python3
"""Write docs/checks.md: every verify/doctor check (id, layer, command, what it reads, fix mode),
generated from the check registry, then the file's hand-written sections (from its first "## " heading) as
they are. tests/unit/diagnose/test_reference.py fails when the table is stale."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpustack.diagnose.registry import reference_table  # noqa: E402

HEADER = """# verify and doctor checks

Generated from the code by `python scripts/gen_check_reference.py`; do not edit by hand.
Each check is a pure function of one collected snapshot (`gpustack/diagnose/checks_*.py`).
`--fix` marks the safe fixes `gpustack doctor --fix` applies after showing them; every other
failing check prints its exact fix.

"""


#: hand-written sections after the generated table (from the first "## " heading on) are kept as they are
TAIL = re.compile(r"^## ", re.M)


def render() -> str:
    """The header and the table from the registry, then the current file's hand-written sections."""
    out = ROOT / "docs" / "checks.md"
    current = out.read_text(encoding="utf-8") if out.exists() else ""
    tail = TAIL.search(current)
    return HEADER + reference_table() + ("\n" + current[tail.start() :] if tail else "")


def main() -> None:
    out = ROOT / "docs" / "checks.md"
    out.write_text(render(), encoding="utf-8")
    print(out)


if __name__ == "__main__":
    main()
