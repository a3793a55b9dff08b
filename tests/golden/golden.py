"""Golden-file helpers: compare rendered data with tests/golden/<...>; ``UPDATE_GOLDEN=1`` rewrites them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

GOLDEN_DIR = Path(__file__).resolve().parent


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(data: Any) -> str:
    """Stable, readable YAML (multi-line strings as literal blocks, key order kept)."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)


def check_golden(relpath: str, data: Any) -> None:
    """Assert ``data`` equals the golden file (parsed), or rewrite it when UPDATE_GOLDEN=1."""
    path = GOLDEN_DIR / relpath
    text = dump(data)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.is_file(), f"missing golden file {path}: run with UPDATE_GOLDEN=1 to create it"
    expected = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert yaml.safe_load(text) == expected, f"{relpath} differs from the golden file (UPDATE_GOLDEN=1 to accept)"
