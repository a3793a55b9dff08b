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


HA = Config.model_validate({"nodes": [{"name": "cp1", "address": "192.0.2.10", "role": "control-plane"},
                                      {"name": "cp2", "address": "192.0.2.11", "role": "control-plane"},
                                      {"name": "w1", "address": "192.0.2.12"}]})  # fmt: skip


def test_an_etcd_snapshot_comes_first_when_a_control_plane_is_reset(state: Path) -> None:
    from gpustack.commands import SEQUENCES
    from gpustack.commands.reset import ResetOptions, describe, select_nodes, snapshot_extravars, snapshots_first

    assert SEQUENCES["reset"].stage_ids[0] == "etcd-snapshot"
    whole = select_nodes(HA, [])
    assert (
        snapshots_first(whole, ResetOptions()) and snapshot_extravars(HA, whole)["gpustack_etcd_snapshot_host"] == "cp1"
    )
    # a partial reset takes it on a control plane it resets: no host outside the run's limit is contacted
    cp2 = select_nodes(HA, ["cp2"])
    assert snapshot_extravars(HA, cp2)["gpustack_etcd_snapshot_host"] == "cp2"
    assert describe(HA, cp2, ResetOptions(nodes=("cp2",)))[1].startswith("first an etcd snapshot on cp2, copied to ")
    # a worker alone, or --no-snapshot: none
    assert not snapshots_first(select_nodes(HA, ["w1"]), ResetOptions())
    assert (
        describe(HA, select_nodes(HA, ["w1"]), ResetOptions())[1]
        == "no etcd snapshot first (no control plane is reset)"
    )
    assert not snapshots_first(whole, ResetOptions(no_snapshot=True))
    assert describe(HA, whole, ResetOptions(no_snapshot=True))[1] == "no etcd snapshot first (--no-snapshot)"
