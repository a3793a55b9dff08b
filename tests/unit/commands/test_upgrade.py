"""`gpustack upgrade` without hosts: the skew policy decides before any stage changes anything,
the local record (upgrade.json) is written running, per node, done or failed; the CLI's refusals
and `plan upgrade --to`."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from gpustack import commands
from gpustack.cluster import skew, upgrade_record
from gpustack.commands import upgrade as up_mod
from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.engine import run as engine_run
from gpustack.engine.plan import CommandPlan, Stage
from gpustack.engine.steps import StageSummary
from gpustack.errors import StageError

CFG = Config.model_validate(
    {
        "nodes": [
            {"name": "cp", "address": "192.0.2.10", "role": "control-plane", "connection": "local"},
            {"name": "w1", "address": "192.0.2.11", "connection": "local"},
            {"name": "w2", "address": "192.0.2.12", "connection": "local"},
        ],
        "versions": {"kubernetes": "1.35"},
    }
)
OLD, NEW = pins.KUBERNETES["1.35"], pins.KUBERNETES["1.36"]

#: the CLI under test is this checkout (not whichever gpustack is installed)
THIS_CHECKOUT = {k: os.environ[k] for k in ("PYTHONPATH", "GPUSTACK_TODAY") if k in os.environ}


def facts(**versions: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for node, v in versions.items():
        out[node] = {"kubernetes": {"gpustack_marker": {"kubernetes_version": v}}, "nvidia_pci_devices": []}
    return out


class Engine:
    """lifecycle with preflight and the playbook replaced: records what would run and with what."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, host_facts: dict[str, Any]) -> None:
        monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
        self.ran: list[str] = []
        self.extravars: dict[str, Any] = {}
        self.progress_seen: dict[str, Any] | None = None
        self.fail_at: str | None = None
        self.snapshot = ""
        monkeypatch.setattr(
            engine_run, "run_preflight", lambda plan, cfg, opts, run_dir, console, **kw: (host_facts, [])
        )
        monkeypatch.setattr(engine_run, "ansible_stages", self.ansible)

    def ansible(self, plan_: CommandPlan, stages: list[Stage], cfg: Config, opts: Any, *a: Any, **kw: Any) -> Any:
        self.ran += [s.id for s in stages]
        self.extravars = dict(opts.extravars)
        if "etcd-snapshot" in self.ran and self.snapshot:  # what the role's fetch leaves on this machine
            Path(self.extravars["gpustack_etcd_snapshot_local_dir"], self.snapshot).write_bytes(b"db")
        self.cfg_version = cfg.versions.kubernetes
        self.progress_seen = upgrade_record.read_progress(upgrade_record.progress_path(cfg))
        if self.fail_at in self.ran:
            raise StageError("w2: kubeadm upgrade node failed", stage=self.fail_at, hosts=("w2",))
        return [StageSummary(s.id, "changed", 0.0, 1) for s in stages], type(
            "R", (), {"failures": [], "rc": 0, "status": "successful"}
        )()


def run(to: str = "1.36") -> up_mod.UpgradeResult:
    return up_mod.upgrade(CFG, up_mod.UpgradeOptions(to=to), Console(stream=io.StringIO(), color=False))


def test_a_skipped_minor_is_refused_before_any_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine(monkeypatch, tmp_path, facts(cp="1.34.11", w1="1.34.11", w2="1.34.11"))
    with pytest.raises(skew.SkewError) as err:
        run("1.36")
    assert err.value.exit_code == 2 and "skips a minor" in err.value.message and "--to 1.35" in err.value.message
    assert engine.ran == []
    assert not upgrade_record.progress_path(CFG).exists()


def test_a_node_gpustack_did_not_install_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host_facts = facts(cp=OLD, w1=OLD)
    host_facts["w2"] = {"kubernetes": {"gpustack_marker": None}}
    Engine(monkeypatch, tmp_path, host_facts)
    with pytest.raises(skew.SkewError, match="w2"):
        run()


def test_an_upgrade_runs_at_the_target_and_records_its_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host_facts = facts(cp=OLD, w1=OLD, w2=OLD)
    host_facts["w2"]["nvidia_pci_devices"] = [{"slot": "0000:01:00.0"}]
    engine = Engine(monkeypatch, tmp_path, host_facts)
    result = run()
    assert engine.ran == ["etcd-snapshot", "repository", "control-plane", "workers"]
    assert engine.extravars["gpustack_etcd_snapshot_host"] == CFG.control_planes[0].name
    assert engine.cfg_version == NEW  # the playbook renders the target's repository, packages and pin
    assert engine.extravars["gpustack_upgrade_gpu_nodes"] == ["w2"]
    assert engine.extravars["gpustack_upgrade_progress_file"] == str(upgrade_record.progress_path(CFG))
    # written before the first change: running, every node pending at its version
    seen = engine.progress_seen
    assert seen is not None and seen["status"] == "running" and (seen["from"], seen["to"]) == (OLD, NEW)
    assert seen["nodes"]["w1"] == {"role": "worker", "version": OLD, "status": "pending"}
    done = json.loads(upgrade_record.progress_path(CFG).read_text())
    assert done["status"] == "done" and all(n["status"] == "done" for n in done["nodes"].values())
    assert upgrade_record.progress_path(CFG).stat().st_mode & 0o777 == 0o600
    assert [s.stage for s in result.summaries][-1] == "record"


def test_a_failed_upgrade_is_recorded_and_a_rerun_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine(monkeypatch, tmp_path, facts(cp=OLD, w1=OLD, w2=OLD))
    engine.fail_at = "workers"
    engine.snapshot = "etcd-cp-20261129T000000Z.db"
    with pytest.raises(StageError) as err:
        run()
    assert "continues" in (err.value.hint or "")
    snap = Path(engine.extravars["gpustack_etcd_snapshot_local_dir"], engine.snapshot)
    assert f"etcd as it was before: {snap}" in (err.value.hint or ""), "the failure names the snapshot taken first"
    assert snap.stat().st_mode & 0o777 == 0o600
    failed = json.loads(upgrade_record.progress_path(CFG).read_text())
    assert failed["status"] == "failed" and "stage workers" in failed["error"]

    # the control plane and w1 finished before the failure (their markers say so): resumed
    Engine(monkeypatch, tmp_path, facts(cp=NEW, w1=NEW, w2=OLD))
    run()
    again = json.loads(upgrade_record.progress_path(CFG).read_text())
    assert again["status"] == "done" and again["attempts"] == 2 and again["from"] == OLD
    assert again["started"] == failed["started"]


def test_new_progress_marks_nodes_already_at_the_target() -> None:
    current = skew.ClusterVersions({"cp": NEW, "w1": OLD, "w2": NEW}, ("cp",))
    now = datetime(2026, 11, 24, 10, 0, tzinfo=timezone.utc)
    p = upgrade_record.new_progress(CFG, current, NEW, None, now)
    assert {n: v["status"] for n, v in p["nodes"].items()} == {"cp": "done", "w1": "pending", "w2": "done"}
    assert p["started"] == "2026-11-24T10:00:00Z" and p["format"] == upgrade_record.PROGRESS_FORMAT


def test_the_matrix_refuses_before_any_host_is_contacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine(monkeypatch, tmp_path, facts(cp=OLD))
    old_containerd = CFG.model_copy(
        update={
            "versions": CFG.versions.model_copy(
                update={"containerd": "1.7.28", "containerd_sha256": {"amd64": "0" * 64}}
            )
        }
    )
    with pytest.raises(skew.SkewError, match=r"versions\.containerd"):
        up_mod.upgrade(old_containerd, up_mod.UpgradeOptions(to="1.36"), Console(stream=io.StringIO(), color=False))
    assert engine.ran == []


def test_the_upgrade_sequence() -> None:
    seq = commands.sequence("upgrade")
    assert seq.stage_ids == ("preflight", "etcd-snapshot", "repository", "control-plane", "workers", "record")
    assert seq.playbook == "upgrade.yml" and not seq.converges


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "gpustack.yaml"
    cfg.write_text(
        "nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\n  - {name: w1, address: 192.0.2.11}\n"
        "versions: {kubernetes: '1.35'}\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        **THIS_CHECKOUT,
        "HOME": str(tmp_path),
        "GPUSTACK_STATE_DIR": str(tmp_path / "s"),
        "NO_COLOR": "1",
    }
    env["COLUMNS"] = "200"
    return subprocess.run(
        [sys.executable, "-m", "gpustack", *args, "-c", str(cfg)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "--to"),
        (("--to", "1.99"), "pinned versions"),
        (("--to", "1.36"), "--yes"),
    ],
)
def test_cli_refusals_exit_2(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    r = cli(tmp_path, "upgrade", *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr


def test_plan_upgrade_shows_each_nodes_turn(tmp_path: Path) -> None:
    r = cli(tmp_path, "plan", "upgrade", "--to", "1.36")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"upgrade to {NEW}: one node at a time" in out
    assert out.index(f"kubeadm upgrade apply v{NEW}") < out.index("│ 2 │ w1")


def test_resume_hint_keeps_the_log_and_drops_up_advice() -> None:
    h = up_mod.resume_hint(
        "1.36.4", "fix the cause and run `gpustack up` again (it resumes safely); full log: /r/stdout"
    )
    assert h.startswith("fix the cause, then run `gpustack upgrade --to 1.36.4` again: it continues")
    assert h.endswith("full log: /r/stdout") and "gpustack up`" not in h
    assert up_mod.resume_hint("1.36.4", None).endswith("where it stopped")
