"""The etcd snapshot stage's Python side: the config section, which control plane takes it, this machine's copies
(0600, the newest etcd.snapshots.local_keep), the playbook variables, `gpustack etcd snapshot`'s plan."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpustack.cluster import etcd_snapshot
from gpustack.commands import SEQUENCES
from gpustack.config.model import Config
from gpustack.render.etcd import etcd_vars


def config(**etcd: object) -> Config:
    return Config.model_validate({
        "nodes": [{"name": "cp1", "address": "10.0.0.1", "role": "control-plane"},
                  {"name": "cp2", "address": "10.0.0.2", "role": "control-plane"},
                  {"name": "w1", "address": "10.0.0.3"}],
        "etcd": etcd,
    })  # fmt: skip


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
    return tmp_path


def test_defaults_are_twice_a_day_keep_five() -> None:
    s = Config().etcd.snapshots
    assert (s.scheduled, s.interval, s.interval_seconds, s.keep, s.copy_to, s.local_keep) == (
        True, "12h", 43200, 5, "", 10)  # fmt: skip
    assert etcd_vars(Config()) == {"gpustack_etcd_snapshot_keep": 5, "gpustack_etcd_snapshot_copy_to": "",
                                   "gpustack_etcd_snapshot_scheduled": True,
                                   "gpustack_etcd_snapshot_interval_seconds": 43200}  # fmt: skip


@pytest.mark.parametrize(
    ("snapshots", "message"),
    [
        ({"interval": "10m"}, "shorter than 15 minutes"),
        ({"interval": "12 hours"}, "is not"),
        ({"keep": 0}, "greater than or equal to 1"),
        ({"copy_to": "backups/etcd"}, "absolute path"),
        ({"local_keep": 0}, "greater than or equal to 1"),
        ({"every": "1h"}, "Extra inputs"),
    ],
)
def test_bad_settings_are_refused(snapshots: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        config(snapshots=snapshots)


def test_settings_reach_the_playbooks() -> None:
    cfg = config(snapshots={"interval": "1d", "keep": 7, "copy_to": "/mnt/backup/etcd/", "scheduled": False})
    assert etcd_vars(cfg) == {"gpustack_etcd_snapshot_keep": 7, "gpustack_etcd_snapshot_copy_to": "/mnt/backup/etcd",
                              "gpustack_etcd_snapshot_scheduled": False,
                              "gpustack_etcd_snapshot_interval_seconds": 86400}  # fmt: skip


def test_the_first_staying_control_plane_takes_it() -> None:
    cfg = config()
    assert etcd_snapshot.snapshot_host(cfg) == "cp1"
    assert etcd_snapshot.snapshot_host(cfg, ["cp1"]) == "cp2"
    assert etcd_snapshot.snapshot_host(cfg, ["cp1", "cp2", "w1"]) == "cp1", "a whole-cluster reset: before it goes"


def test_extravars_make_this_machines_directory_private(state: Path) -> None:
    os.umask(0o022)
    ev = etcd_snapshot.extravars(config(), ["cp1"])
    dest = state / "clusters" / "gpustack" / "etcd-snapshots"
    assert ev == {"gpustack_etcd_snapshot_host": "cp2", "gpustack_etcd_snapshot_local_dir": str(dest)}
    assert stat.S_IMODE(dest.stat().st_mode) == 0o700
    assert set(ev) == set(etcd_snapshot.EXTRAVARS)


def test_settle_keeps_the_newest_private(state: Path) -> None:
    cfg = config(snapshots={"local_keep": 2})
    d = etcd_snapshot.local_dir(cfg)
    d.mkdir(parents=True)
    for i, name in enumerate(["etcd-cp1-20261101T000000Z.db", "etcd-cp2-20261102T000000Z.db",
                              "etcd-cp1-20261103T000000Z.db"]):  # fmt: skip
        (d / name).write_bytes(b"s")
        (d / name).chmod(0o644)
        os.utime(d / name, (1000 + i, 1000 + i))
    (d / "notes.txt").write_text("stays")
    newest = etcd_snapshot.settle(cfg)
    assert newest == d / "etcd-cp1-20261103T000000Z.db" == etcd_snapshot.latest(cfg)
    assert sorted(p.name for p in d.iterdir()) == ["etcd-cp1-20261103T000000Z.db", "etcd-cp2-20261102T000000Z.db",
                                                   "notes.txt"]  # fmt: skip
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in d.glob("*.db"))
    assert etcd_snapshot.settle(Config.model_validate({"cluster": {"name": "other"}})) is None


def test_the_etcd_snapshot_plan() -> None:
    plan = SEQUENCES["etcd-snapshot"]
    assert plan.playbook == "etcd.yml" and plan.stage_ids == ("etcd-snapshot",)
    assert set(plan.extravars) == set(etcd_snapshot.EXTRAVARS)
    play = (Path(__file__).resolve().parents[3] / "playbooks" / "etcd.yml").read_text()
    assert "- name: etcd-snapshot" in play and "tags: [etcd-snapshot]" in play


def test_gpustack_etcd_snapshot_names_the_file_it_brought_here(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command through the one engine, the playbook replaced by what the role's fetch leaves on this machine."""
    import io
    from typing import Any

    from gpustack.commands import etcd as etcd_cmd
    from gpustack.console import Console
    from gpustack.engine import run as engine_run
    from gpustack.engine.steps import StageSummary

    cfg = Config.model_validate({"nodes": [{"name": "cp1", "address": "192.0.2.10", "role": "control-plane",
                                            "connection": "local"}]})  # fmt: skip
    seen: dict[str, Any] = {}

    def ansible(plan: Any, stages: list, cfg_: Config, opts: Any, *a: Any, **kw: Any) -> Any:
        seen.update(stages=[s.id for s in stages], extravars=dict(opts.extravars))
        dest = Path(opts.extravars["gpustack_etcd_snapshot_local_dir"], "etcd-cp1-20261129T050000Z.db")
        dest.write_bytes(b"db" * 100)
        return [StageSummary(s.id, "changed", 0.0, 1) for s in stages], type(
            "R", (), {"failures": [], "rc": 0, "status": "successful"}
        )()

    monkeypatch.setattr(engine_run, "ansible_stages", ansible)
    out = io.StringIO()
    result = etcd_cmd.snapshot(cfg, etcd_cmd.SnapshotOptions(), Console(stream=out, color=False))
    assert seen["stages"] == ["etcd-snapshot"] and seen["extravars"]["gpustack_etcd_snapshot_host"] == "cp1"
    assert result.path == etcd_snapshot.local_dir(cfg) / "etcd-cp1-20261129T050000Z.db"
    assert stat.S_IMODE(result.path.stat().st_mode) == 0o600
    assert f"etcd snapshot {result.path} (200 bytes, verified)" in " ".join(out.getvalue().split())


def test_gpustack_etcd_snapshot_needs_a_control_plane() -> None:
    import io

    from gpustack.commands import etcd as etcd_cmd
    from gpustack.console import Console
    from gpustack.errors import ConfigError

    with pytest.raises(ConfigError, match="no control-plane node"):
        etcd_cmd.snapshot(Config(), etcd_cmd.SnapshotOptions(), Console(stream=io.StringIO(), color=False))
