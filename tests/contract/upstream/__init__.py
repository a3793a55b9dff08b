"""Upstream facts the doubles are checked against, as data: one YAML file per real thing, every fact with the
``source`` it was read from (repository, path, tag or commit). Loaded with :func:`facts`."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent


@cache
def facts(name: str) -> dict[str, Any]:
    """The facts of ``<name>.yaml`` (e.g. ``grafana``)."""
    data = yaml.safe_load((HERE / f"{name}.yaml").read_text())
    assert isinstance(data, dict), name
    return data


def fact_files() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.yaml"))
