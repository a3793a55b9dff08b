"""docs/checks.md is generated from the registry and must not drift from it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from gpustack.diagnose import registry

ROOT = Path(__file__).resolve().parents[3]


def test_checks_md_is_current() -> None:
    spec = importlib.util.spec_from_file_location("gen_check_reference", ROOT / "scripts" / "gen_check_reference.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (ROOT / "docs" / "checks.md").read_text(encoding="utf-8") == mod.render(), (
        "run: python scripts/gen_check_reference.py"
    )


def test_every_check_has_layer_title_and_reads() -> None:
    specs = registry.load_all().values()
    assert len(specs) >= 40
    for s in specs:
        assert s.layer in registry.LAYERS and s.title and s.reads and set(s.commands) <= {"verify", "doctor"}
