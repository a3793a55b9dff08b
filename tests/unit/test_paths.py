"""State directories: private (0700) all the way down whatever the umask; run directories pruned."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpustack.errors import ConfigError
from gpustack.paths import ensure_private_dir, keep_runs, new_run_dir, prune_runs


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
