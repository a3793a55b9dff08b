"""`gpustack secrets rotate-key` without hosts: the engine runs the plan with the preflight and the playbook replaced
(each Ansible stage records the EncryptionConfiguration the run would give the control planes, read as the engine
reads it when the playbook starts); the rewrite goes to tests/unit/cluster/test_key_rotation.py's SecretStore. The
stages in order, the keys each control-plane stage applies, a run cut off at every Ansible stage finished by the next
without a second key, the refusals, and the role's order (the restart mark before the file)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack.commands import secrets_rotate_key as rk
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.engine import run as engine_run
from gpustack.engine.plan import CommandPlan, Stage
from gpustack.engine.steps import StageSummary
from gpustack.errors import ConfigError, StageError
from gpustack.paths import resource_file
from gpustack.render.encryption_keys import ensure_keys, load_keys, rotation_phase
from tests.unit.cluster.test_key_rotation import SecretStore

NODES = [{"name": f"cp{i}", "address": f"192.0.2.1{i}", "role": "control-plane", "connection": "local"}
         for i in (1, 2, 3)] + [{"name": "w1", "address": "192.0.2.20", "connection": "local"}]  # fmt: skip


def config(**sec: Any) -> Config:
    return Config.model_validate({"nodes": NODES, "cluster": {"virtual_ip": "192.0.2.100"}, "security": sec})


class Engine:
    """The engine with its preflight and Ansible stages replaced: records what each control-plane stage applies."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
        self.applied: list[tuple[str, list[str]]] = []
        self.limit: list[str] = []
        self.fail_at: str | None = None
        self.store = SecretStore()
        monkeypatch.setattr(engine_run, "run_preflight", lambda *a, **kw: ({}, []))
        monkeypatch.setattr(engine_run, "ansible_stages", self.ansible)
        monkeypatch.setattr(rk, "admin_kube", lambda cfg: self.store)

    def ansible(self, plan: CommandPlan, stages: list[Stage], cfg: Config, opts: Any, *a: Any, **kw: Any) -> Any:
        from gpustack.render.encryption_keys import run_extravars

        ev = run_extravars(cfg, make=False)  # what engine/stages.py adds when this playbook run starts
        assert "gpustack_encryption_config" in ev
        keys = [k["name"] for k in yaml.safe_load(ev["gpustack_encryption_config"])["resources"][0]["providers"][0]
                ["secretbox"]["keys"]]  # fmt: skip
        self.limit = list(opts.limit)
        for stage in stages:
            if stage.id == self.fail_at:
                self.fail_at = None
                raise StageError(f"cp2: task 'Wait until the API server is ready' failed in {stage.id}",
                                 stage=stage.id, hosts=("cp2",))  # fmt: skip
            self.applied.append((stage.id, keys))
        return [StageSummary(s.id, "changed", 0.0, 1) for s in stages], type(
            "R", (), {"failures": [], "rc": 0, "status": "successful"}
        )()


def rotate(cfg: Config, *, dry_run: bool = False) -> rk.RotateResult:
    return rk.rotate(cfg, rk.RotateOptions(dry_run=dry_run), Console(stream=io.StringIO(), color=False))


def test_a_rotation_applies_each_phase_on_the_control_planes_in_upstreams_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine(monkeypatch, tmp_path)
    cfg = config()
    (old,) = ensure_keys(cfg)
    result = rotate(cfg)
    (new,) = load_keys(cfg)
    assert new.name != old.name and rotation_phase(cfg) is None
    assert engine.applied == [("add", [old.name, new.name]), ("write-new", [new.name, old.name]),
                              ("drop-old", [new.name])]  # fmt: skip
    assert engine.limit == ["cp1", "cp2", "cp3"]  # the control planes only
    assert len(engine.store.puts) == 3  # every Secret rewritten once, between write-new and drop-old
    rows = {s.stage: s for s in result.summaries}
    assert [s.stage for s in result.summaries if s.stage in rk.PLAN.stage_ids] == list(rk.PLAN.stage_ids)
    assert rows["rewrite"].status == "changed" and "3 Secret(s) rewritten" in rows["rewrite"].note


@pytest.mark.parametrize("cut_at", ["add", "write-new", "drop-old"])
def test_a_run_cut_off_at_a_control_plane_stage_is_finished_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut_at: str
) -> None:
    engine = Engine(monkeypatch, tmp_path)
    cfg = config()
    (old,) = ensure_keys(cfg)
    engine.fail_at = cut_at
    with pytest.raises(StageError):
        rotate(cfg)
    assert rotation_phase(cfg) is not None  # recorded: the next run resumes it
    if cut_at != "drop-old":
        assert old in load_keys(cfg)  # the old key stays until every Secret was rewritten
    rotate(cfg)
    keys = load_keys(cfg)
    assert len(keys) == 1 and keys[0].name != old.name and rotation_phase(cfg) is None
    # one new key over both runs: every stage of both applied only the old key and that one
    assert {name for _, applied in engine.applied for name in applied} == {old.name, keys[0].name}
    assert engine.applied[-1] == ("drop-old", [keys[0].name])
    # the rewrite happened once every API server wrote with the new key, never with the old key first
    assert len(engine.store.puts) == 3


def test_a_dry_run_changes_no_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine(monkeypatch, tmp_path)
    cfg = config()
    keys = ensure_keys(cfg)
    result = rotate(cfg, dry_run=True)
    assert load_keys(cfg) == keys and rotation_phase(cfg) is None and engine.store.puts == []
    assert {s.stage: s.status for s in result.summaries if s.stage in ("new-key", "rewrite")} == {
        "new-key": "not run", "rewrite": "not run"}  # fmt: skip


def test_refused_without_encryption_or_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine(monkeypatch, tmp_path)
    with pytest.raises(ConfigError, match="no encryption key to rotate") as err:
        rotate(config())
    assert err.value.exit_code == 2
    with pytest.raises(ConfigError, match="encryption_at_rest is off"):
        rotate(config(encryption_at_rest=False))
    assert engine.applied == []


def test_the_plays_run_one_control_plane_at_a_time_and_mark_the_restart_before_the_write() -> None:
    plays = yaml.safe_load(resource_file("playbooks", "secrets-rotate-key.yml").read_text())
    assert [p["name"] for p in plays] == ["add", "write-new", "drop-old"]
    for play in plays:
        assert (play["hosts"], play["serial"], play["any_errors_fatal"]) == ("control_plane", 1, True)
        assert play["roles"] == [{"role": "encryption_key"}] and play["tags"] == [play["name"]]
    tasks = yaml.safe_load(resource_file("playbooks", "roles/encryption_key/tasks/main.yml").read_text())
    names = [t["name"] for t in tasks]
    mark, write = (
        names.index("Mark the API server as due for a restart"),
        names.index("Write the Secret encryption configuration"),
    )
    assert mark < write
    assert tasks[write]["no_log"] is True and tasks[write]["ansible.builtin.copy"]["mode"] == "0600"
    restart = tasks[names.index("Restart the API server")]
    assert [t["name"] for t in restart["block"]][-1] == "Clear the restart mark"  # only once /readyz answered
