#!/usr/bin/env python3
"""Write docs/checks.md: every verify/doctor check (id, layer, command, what it reads, fix mode),
generated from the check registry. tests/unit/diagnose/test_reference.py fails when it is stale."""

from __future__ import annotations

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


def render() -> str:
    return HEADER + reference_table()


def main() -> None:
    out = ROOT / "docs" / "checks.md"
    out.write_text(render(), encoding="utf-8")
    print(out)


if __name__ == "__main__":
    main()
