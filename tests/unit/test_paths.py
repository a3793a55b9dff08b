"""State directories: private (0700) all the way down whatever the umask; run directories pruned.
Shipped files are found one way: gpustack.paths.resource_dir / resource_file."""

from __future__ import annotations

import ast
import os
import stat
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import gpustack
from gpustack.errors import ConfigError
from gpustack.paths import (
    BESIDE,
    INSIDE,
    ensure_private_dir,
    keep_runs,
    new_run_dir,
    prune_runs,
    resource_dir,
    resource_file,
)


@pytest.fixture
def umask_000() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_missing_parents_are_created_private(tmp_path: Path, umask_000: None) -> None:
    (tmp_path / "home").mkdir(mode=0o755)
    target = tmp_path / "home" / ".local" / "state" / "gpustack" / "clusters" / "lab"
    ensure_private_dir(target)
    for d in (
        tmp_path / "home/.local",
        tmp_path / "home/.local/state",
        tmp_path / "home/.local/state/gpustack",
        target,
    ):
        assert mode(d) == 0o700, d
    assert mode(tmp_path / "home") == 0o755  # an existing parent is not changed


def test_run_dirs_are_pruned_to_the_newest(tmp_path: Path) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    runs = [new_run_dir(tmp_path, now=t0 + timedelta(minutes=i), keep=3) for i in range(5)]
    (tmp_path / "runs" / "notes").mkdir()  # not a run: kept
    left = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert left == sorted([r.name for r in runs[-3:]] + ["notes"])
    assert prune_runs(tmp_path / "runs", 1) == runs[-3:-1]
    assert runs[-1].is_dir()


def test_keep_runs_from_the_environment() -> None:
    assert keep_runs({}) == 20
    assert keep_runs({"GPUSTACK_KEEP_RUNS": "5"}) == 5
    for bad in ("0", "-1", "lots"):
        with pytest.raises(ConfigError, match="GPUSTACK_KEEP_RUNS"):
            keep_runs({"GPUSTACK_KEEP_RUNS": bad})


@pytest.mark.parametrize("name", BESIDE + INSIDE)
def test_every_shipped_directory_is_found(name: str) -> None:
    assert resource_dir(name).is_dir()


def test_a_file_under_a_shipped_directory() -> None:
    assert resource_file("templates", "monitoring", "gpu-alerts.rules.yaml").is_file()
    assert resource_file("playbooks", "site.yml").is_file()


def test_an_unknown_directory_is_refused() -> None:
    with pytest.raises(ValueError, match="not a directory gpustack ships"):
        resource_dir("etc")


def test_no_module_finds_shipped_files_another_way() -> None:
    """No __file__ arithmetic, importlib.resources or jinja2.PackageLoader outside gpustack/paths.py."""
    pkg = Path(gpustack.__file__).parent
    offenders = []
    for path in pkg.rglob("*.py"):
        if path.name == "paths.py" and path.parent == pkg:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "__file__":
                offenders.append(f"{path.relative_to(pkg)}: __file__")
            elif isinstance(node, ast.Attribute) and (
                node.attr == "PackageLoader"
                or (node.attr == "files" and isinstance(node.value, ast.Name) and node.value.id == "resources")
            ):
                offenders.append(f"{path.relative_to(pkg)}: {node.attr}")
    assert not offenders
