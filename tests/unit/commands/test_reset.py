"""`gpustack reset`'s local-state stage: this machine's state of the cluster archived once; a reset
after a reset archives nothing (the empty directory the engine made is removed, not archived)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpustack.commands.reset import archive_state
from gpustack.config.model import Config

CFG = Config.model_validate({"nodes": [{"name": "cp", "address": "192.0.2.10", "role": "control-plane"}]})
NOW = datetime(2026, 11, 26, 19, 30, tzinfo=timezone.utc)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
    return tmp_path


def test_the_clusters_state_is_archived_private(state: Path) -> None:
    src = state / "clusters" / "gpustack"
    src.mkdir(parents=True)
    (src / "admin.conf").write_text("kubeconfig")
    archive, removed = archive_state(CFG, forget=False, now=NOW)
    assert archive == state / "archive" / "gpustack-20261126T193000Z" and removed == []
    assert (archive / "admin.conf").read_text() == "kubeconfig" and archive.stat().st_mode & 0o777 == 0o700
    assert not src.exists()


def test_a_second_reset_archives_nothing(state: Path) -> None:
    assert archive_state(CFG, forget=False, now=NOW) == (None, [])
    (state / "clusters" / "gpustack").mkdir(parents=True)  # what the engine makes before a playbook
    assert archive_state(CFG, forget=False, now=NOW) == (None, [])
    assert not (state / "archive").exists() and not (state / "clusters" / "gpustack").exists()
    (state / "clusters" / "gpustack").mkdir()
    assert archive_state(CFG, forget=True, now=NOW) == (None, [])


def test_forget_deletes(state: Path) -> None:
    src = state / "clusters" / "gpustack"
    src.mkdir(parents=True)
    (src / "grafana-admin-password").write_text("x")
    assert archive_state(CFG, forget=True, now=NOW) == (None, [src])
    assert not src.exists() and not (state / "archive").exists()
