"""`gpustack etcd restore`'s Python side: which snapshot (the newest local copy that verifies, a named one, an
unfinished restore's), the refusals before anything changes (exit 2), what it says will be lost, its plan and
playbook variables, the run through the one engine with this machine's record (running, failed, done), and the CLI's
question. The host side: tests/unit/playbooks/test_etcd_restore_host.py; the real etcd and API server:
tests/controlplane/test_etcd_restore.py."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from gpustack.cluster import etcd_restore as rules
from gpustack.cluster import etcd_snapshot
from gpustack.commands import SEQUENCES
from gpustack.commands import etcd_restore as cmd
from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.engine import run as engine_run
from gpustack.engine.steps import StageSummary
from gpustack.errors import ConfigError, StageError
from gpustack.render.ansible import etcdutl_vars

REPO = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 11, 29, 8, 0, 0, tzinfo=timezone.utc)


def config(cps: int = 3) -> Config:
    """Control planes and a worker, reached without SSH (the engine checks SSH host keys before any stage)."""
    nodes = [{"name": f"cp{i}", "address": f"192.0.2.{10 + i}", "role": "control-plane", "connection": "local"}
             for i in range(1, cps + 1)]  # fmt: skip
    worker = {"name": "w1", "address": "192.0.2.50", "connection": "local"}
    return Config.model_validate({"nodes": [*nodes, worker]})


def snapshot_bytes(body: bytes = b"k" * 1024) -> bytes:
    """What etcd streams: the database (whole pages) and the sha256 of it."""
    return body + hashlib.sha256(body).digest()


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def local(cfg: Config, name: str, data: bytes, mtime: int) -> Path:
    d = etcd_snapshot.local_dir(cfg)
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)
    os.utime(d / name, (mtime, mtime))
    return d / name


def test_the_plan_stops_every_member_before_any_is_restored() -> None:
    plan = SEQUENCES["etcd-restore"]
    assert plan.playbook == "etcd-restore.yml"
    assert plan.stage_ids == ("check", "stop", "restore", "start", "confirm")
    assert set(plan.extravars) == set(rules.EXTRAVARS)
    play = (REPO / "playbooks" / "etcd-restore.yml").read_text()
    for stage in ("stop", "restore", "start"):
        assert f"- name: {stage}  #" in play and f"tags: [{stage}]" in play
    assert play.count("any_errors_fatal: true") == 3 and "serial" not in play


def test_the_newest_local_snapshot_that_verifies_is_chosen() -> None:
    cfg = config()
    good = local(cfg, "etcd-cp1-20261128T000000Z.db", snapshot_bytes(), 1000)
    corrupt = bytearray(snapshot_bytes(b"n" * 1024))
    corrupt[5] ^= 0xFF
    local(cfg, "etcd-cp1-20261129T000000Z.db", bytes(corrupt), 2000)
    path, facts = rules.choose(cfg, None, None)
    assert path == good and facts == {"size": 1056, "sha256": hashlib.sha256(good.read_bytes()).hexdigest()}


def test_no_snapshot_that_verifies_is_refused_before_anything_changes() -> None:
    cfg = config()
    with pytest.raises(rules.SnapshotRefused, match="no etcd snapshot of cluster gpustack here") as ei:
        cmd.prepare(cfg, cmd.RestoreOptions())
    assert ei.value.exit_code == 2 and "gpustack etcd restore FILE" in (ei.value.hint or "")
    local(cfg, "etcd-cp1-20261129T000000Z.db", b"x" * 1000, 1000)
    with pytest.raises(rules.SnapshotRefused, match="not a whole etcd snapshot"):
        cmd.prepare(cfg, cmd.RestoreOptions())
    assert not rules.record_path(cfg).exists()


def test_a_named_corrupt_snapshot_is_refused(tmp_path: Path) -> None:
    bad = bytearray(snapshot_bytes())
    bad[-1] ^= 0x01
    (tmp_path / "s.db").write_bytes(bytes(bad))
    with pytest.raises(rules.SnapshotRefused, match="does not match its content"):
        cmd.prepare(config(), cmd.RestoreOptions(snapshot=tmp_path / "s.db"))


def test_no_control_plane_no_restore() -> None:
    with pytest.raises(ConfigError, match="no control-plane node"):
        cmd.prepare(Config(), cmd.RestoreOptions())


def test_a_new_restore_says_what_it_loses(tmp_path: Path) -> None:
    snap = tmp_path / "etcd-cp2-20261129T044512Z.db"
    snap.write_bytes(snapshot_bytes())
    record = cmd.prepare(config(), cmd.RestoreOptions(snapshot=snap), now=NOW)
    assert record["id"] == "20261129T080000Z" and record["token"] == "gpustack-restore-20261129T080000Z"
    assert record["taken"] == "2026-11-29T04:45:12Z" and record["members"] == ["cp1", "cp2", "cp3"]
    assert record["sha256"] == hashlib.sha256(snap.read_bytes()).hexdigest() and record["status"] == "planned"
    lines = rules.losses(record, NOW)
    assert "taken 2026-11-29T04:45:12Z (3 hours ago): everything written to the cluster since is LOST" in lines[1]
    assert "etcd members restored: cp1, cp2, cp3" in lines[2]
    assert lines[3].endswith(".before-restore-20261129T080000Z")
    assert rules.extravars(record) == {
        "gpustack_etcd_restore_id": "20261129T080000Z", "gpustack_etcd_restore_snapshot": str(snap.resolve()),
        "gpustack_etcd_restore_sha256": record["sha256"],
        "gpustack_etcd_restore_token": "gpustack-restore-20261129T080000Z",
    }  # fmt: skip


def test_an_unfinished_restore_is_continued_and_another_snapshot_refused(tmp_path: Path) -> None:
    cfg = config()
    snap, other = tmp_path / "a.db", tmp_path / "b.db"
    snap.write_bytes(snapshot_bytes())
    other.write_bytes(snapshot_bytes(b"o" * 1024))
    first = rules.with_status(cmd.prepare(cfg, cmd.RestoreOptions(snapshot=snap), now=NOW), "failed", NOW, "boom")
    rules.record_path(cfg).parent.mkdir(parents=True)
    rules.record_path(cfg).write_text(json.dumps(first))
    again = cmd.prepare(cfg, cmd.RestoreOptions())
    assert again["resumed"] and (again["id"], again["token"]) == (first["id"], first["token"])
    with pytest.raises(rules.SnapshotRefused, match=f"the etcd restore {first['id']} of .* is unfinished"):
        cmd.prepare(cfg, cmd.RestoreOptions(snapshot=other))
    snap.write_bytes(snapshot_bytes(b"z" * 1024))
    with pytest.raises(rules.SnapshotRefused, match="changed since the unfinished restore"):
        cmd.prepare(cfg, cmd.RestoreOptions())
    rules.record_path(cfg).write_text(json.dumps({**first, "status": "done"}))
    assert cmd.prepare(cfg, cmd.RestoreOptions(snapshot=other), now=NOW)["snapshot"] == str(other.resolve())


class Nodes:
    """A client that lists nodes (the confirm step's one request)."""

    def __init__(self, n: int) -> None:
        self.n, self.paths = n, []  # type: ignore[var-annotated]

    def list_all(self, path: str) -> list[dict]:
        self.paths.append(path)
        return [{"metadata": {"name": f"n{i}"}} for i in range(self.n)]


def fake_ansible(seen: dict[str, Any], fail: str = "") -> Any:
    def ansible(plan: Any, stages: list, cfg_: Config, opts: Any, *a: Any, **kw: Any) -> Any:
        seen.setdefault("stages", []).extend(s.id for s in stages)
        seen["extravars"] = dict(opts.extravars)
        seen["limit"] = list(opts.limit)
        seen["record_during"] = json.loads(rules.record_path(cfg_).read_text())
        if fail:
            raise StageError(fail, stage=stages[0].id)
        return [StageSummary(s.id, "changed", 0.0, 1) for s in stages], type(
            "R", (), {"failures": [], "rc": 0, "status": "successful"}
        )()

    return ansible


def test_the_restore_runs_every_phase_and_confirms_through_the_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = config()
    snap = tmp_path / "etcd-cp1-20261129T044512Z.db"
    snap.write_bytes(snapshot_bytes())
    seen: dict[str, Any] = {}
    monkeypatch.setattr(engine_run, "ansible_stages", fake_ansible(seen))
    record = cmd.prepare(cfg, cmd.RestoreOptions(snapshot=snap), now=NOW)
    os.umask(0o022)
    nodes = Nodes(4)
    result = cmd.restore(cfg, cmd.RestoreOptions(snapshot=snap), Console(stream=io.StringIO(), color=False), record,
                         kube=lambda: nodes)  # type: ignore[arg-type,return-value]  # fmt: skip
    assert seen["stages"] == ["stop", "restore", "start"] and seen["limit"] == ["cp1", "cp2", "cp3"]
    # the restore's own variables, and etcd's release archive per arch with its pinned sha256 (the etcdutl fallback)
    assert seen["extravars"] == {**rules.extravars(record), **etcdutl_vars(cfg)}
    assert seen["extravars"]["gpustack_etcd_downloads"]["arm64"] == {
        "url": f"https://github.com/etcd-io/etcd/releases/download/v{pins.ETCD_VERSION}/etcd-v{pins.ETCD_VERSION}-linux-arm64.tar.gz",
        "sha256": pins.ETCD_SHA256[pins.ETCD_VERSION]["arm64"],
    }
    assert set(seen["extravars"]) <= set(cmd.PLAN.extravars), "every variable declared by the plan"
    assert seen["record_during"]["status"] == "running", "written before the first host changes"
    assert nodes.paths == ["/api/v1/nodes"] and result.nodes == 4
    path = rules.record_path(cfg)
    assert json.loads(path.read_text())["status"] == "done" and result.record["status"] == "done"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_failed_phase_leaves_the_record_for_the_next_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(1)
    snap = tmp_path / "s.db"
    snap.write_bytes(snapshot_bytes())
    monkeypatch.setattr(engine_run, "ansible_stages", fake_ansible({}, fail="etcdutl snapshot restore failed (1)"))
    record = cmd.prepare(cfg, cmd.RestoreOptions(snapshot=snap), now=NOW)
    with pytest.raises(StageError) as ei:
        cmd.restore(cfg, cmd.RestoreOptions(), Console(stream=io.StringIO(), color=False), record,
                    kube=lambda: Nodes(1))  # type: ignore[arg-type,return-value]  # fmt: skip
    assert "run `gpustack etcd restore` again: it finishes restore 20261129T080000Z" in (ei.value.hint or "")
    saved = json.loads(rules.record_path(cfg).read_text())
    assert saved["status"] == "failed" and "etcdutl" in saved["error"]
    assert cmd.prepare(cfg, cmd.RestoreOptions())["id"] == "20261129T080000Z"


def test_a_snapshot_changed_after_the_question_stops_before_the_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = config(1)
    snap = tmp_path / "s.db"
    snap.write_bytes(snapshot_bytes())
    seen: dict[str, Any] = {}
    monkeypatch.setattr(engine_run, "ansible_stages", fake_ansible(seen))
    record = cmd.prepare(cfg, cmd.RestoreOptions(snapshot=snap), now=NOW)
    snap.write_bytes(snapshot_bytes(b"q" * 1024))
    with pytest.raises(Exception, match="changed since it was checked"):
        cmd.restore(cfg, cmd.RestoreOptions(), Console(stream=io.StringIO(), color=False), record)
    assert "stages" not in seen and not rules.record_path(cfg).exists()


# -- the CLI ----------------------------------------------------------------------------------------------------


def cli(argv: list[str]) -> tuple[int, str, str]:
    from gpustack.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as ei:
        main(argv)
    return int(ei.value.code or 0), out.getvalue(), err.getvalue()


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    cfg = tmp_path / "gpustack.yaml"
    cfg.write_text("nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\n")
    return cfg


def test_without_a_terminal_it_says_what_is_lost_and_refuses(
    user: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap = tmp_path / "etcd-cp1-20261129T044512Z.db"
    snap.write_bytes(snapshot_bytes())
    seen: dict[str, Any] = {}
    monkeypatch.setattr(engine_run, "ansible_stages", fake_ansible(seen))
    code, out, err = cli(["etcd", "restore", str(snap), "-c", str(user)])
    assert code == 2 and "pass --yes to restore" in err
    assert "everything written to the cluster since is LOST" in out and "etcd members restored: cp1" in out
    assert "stages" not in seen


def test_a_missing_file_is_bad_input(user: Path, tmp_path: Path) -> None:
    code, _, err = cli(["etcd", "restore", str(tmp_path / "nope.db"), "-c", str(user), "--yes"])
    assert code == 2 and "no such snapshot file" in err


def test_with_yes_it_restores_and_says_so(user: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpustack.runners import kubeconfig

    user.write_text("nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane, connection: local}\n")
    snap = tmp_path / "etcd-cp1-20261129T044512Z.db"
    snap.write_bytes(snapshot_bytes())
    seen: dict[str, Any] = {}
    monkeypatch.setattr(engine_run, "ansible_stages", fake_ansible(seen))
    monkeypatch.setattr(kubeconfig, "cluster_client", lambda *a, **kw: Nodes(3))
    code, out, err = cli(["etcd", "restore", str(snap), "-c", str(user), "--yes"])
    assert code == 0, err
    assert seen["stages"] == ["stop", "restore", "start"]
    text = " ".join(out.split())
    assert f"etcd restored from {snap.resolve()} on cp1; 3 node(s) read through the API server" in text
    assert "snapshot " + str(snap) in text and "(1056 bytes, sha256" in text
