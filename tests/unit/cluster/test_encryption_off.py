"""Encryption at rest turned off on a cluster that encrypts (gpustack/cluster/encryption_off.py): `gpustack up` refuses
it after the preflight and before any stage (exit 2, the way back and upstream's decrypt steps in the message), judged
from the control plane's mirror pods in the fake API server (tests/fakes/kube_api.py), or, where the API cannot be
read, from the hosts' facts and this machine's key store. `security apply`'s refusal is
tests/unit/commands/test_security_apply.py's (the same message)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from gpustack.cluster import encryption_off as off
from gpustack.cluster import security_apply as sa
from gpustack.commands import up as up_mod
from gpustack.commands.up import PLAN as UP
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.engine import run as engine_run
from gpustack.engine.options import RunOptions
from gpustack.engine.plan import CommandPlan, Stage
from gpustack.engine.steps import StageSummary
from gpustack.errors import ConfigError
from gpustack.render.encryption_keys import ensure_keys
from gpustack.render.security import ENCRYPTION_CONFIG
from gpustack.runners.kube import ApiUnreachable, Kube
from tests.fakes.kube_api import FakeKubeAPI
from tests.unit.commands.test_security_apply import mirror_pod

NODES = [{"name": "cp1", "address": "192.0.2.11", "role": "control-plane", "connection": "local"},
         {"name": "w1", "address": "192.0.2.20", "connection": "local"}]  # fmt: skip
BUILT = {"cp1": {"kubernetes": {"admin_conf": True}}, "w1": {"kubernetes": {"admin_conf": False}}}


def config(encryption: bool) -> Config:
    return Config.model_validate({"nodes": NODES, "security": {"encryption_at_rest": encryption}})


def seed_apiserver(api: FakeKubeAPI, *, encrypts: bool) -> None:
    args = [{"name": "encryption-provider-config", "value": ENCRYPTION_CONFIG}] if encrypts else []
    api.seed([mirror_pod("cp1", "kube-apiserver", args)])


def unreachable(cfg: Config) -> Kube:
    raise ApiUnreachable("https://192.0.2.11:6443", "connection refused")


def test_an_api_server_that_encrypts_refuses_encryption_off(fake_api: FakeKubeAPI, kube: Kube) -> None:
    seed_apiserver(fake_api, encrypts=True)
    with pytest.raises(ConfigError) as err:
        off.refuse_at_up(config(False), BUILT, kube=lambda cfg: kube)
    assert err.value.exit_code == 2
    assert (
        "`gpustack up` does not turn encryption off" in err.value.message and "nothing was changed" in err.value.message
    )
    hint = err.value.hint or ""
    assert "security.encryption_at_rest: true again" in hint and "decrypt-data" in hint
    assert "- identity: {}` first" in hint and "kubectl replace" in hint


def test_a_cluster_that_does_not_encrypt_or_encryption_on_is_left_alone(fake_api: FakeKubeAPI, kube: Kube) -> None:
    seed_apiserver(fake_api, encrypts=False)
    off.refuse_at_up(config(False), BUILT, kube=lambda cfg: kube)  # built without encryption: nothing to turn off
    off.refuse_at_up(config(True), BUILT, kube=unreachable)  # on: never read
    # no cluster on any control plane yet: nothing is encrypted, nothing read
    off.refuse_at_up(config(False), {"cp1": {"kubernetes": {"admin_conf": False}}}, kube=unreachable)


def test_without_the_api_the_hosts_and_the_key_store_decide(tmp_path: Path) -> None:
    off.refuse_at_up(config(False), BUILT, kube=unreachable, root=tmp_path)  # no key kept: not refused
    ensure_keys(config(True), tmp_path)  # the `up` that built it with encryption on kept a key
    with pytest.raises(ConfigError, match="does not turn encryption off"):
        off.refuse_at_up(config(False), BUILT, kube=unreachable, root=tmp_path)


def test_up_refuses_it_after_the_preflight_before_any_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_api: FakeKubeAPI, kube: Kube
) -> None:
    seed_apiserver(fake_api, encrypts=True)
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(sa, "admin_kube", lambda cfg: kube)
    monkeypatch.setattr(engine_run, "run_preflight", lambda plan, cfg, opts, run_dir, console, **kw: (BUILT, []))
    changed: list[str] = []

    def ansible_stages(plan_: CommandPlan, stages: list[Stage], *a: Any, **kw: Any) -> Any:
        changed.extend(s.id for s in stages)
        return [StageSummary(s.id, "ok", 0.0) for s in stages], type(
            "R", (), {"failures": [], "rc": 0, "status": "successful"}
        )()

    monkeypatch.setattr(engine_run, "ansible_stages", ansible_stages)
    opts = RunOptions(stages=UP.select(skip=["kubelet-certs", "cluster"]))
    with pytest.raises(ConfigError) as err:
        up_mod.up(config(False), opts, Console(stream=io.StringIO(), color=False))
    assert err.value.exit_code == 2 and changed == []
    [run_dir] = (tmp_path / "runs").iterdir()
    rows = json.loads((run_dir / "summary.json").read_text())
    assert [(r["stage"], r["status"]) for r in rows] == [("preflight", "failed")]
