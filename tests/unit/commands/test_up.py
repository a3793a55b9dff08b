"""`up` on a live cluster whose installed Kubernetes differs from the config is refused after
preflight and before any stage changes a host (exit 2, pointing at `gpustack upgrade`)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from gpustack.cluster import skew
from gpustack.commands import up as up_mod
from gpustack.commands.up import PLAN as UP
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.engine import run as engine_run
from gpustack.engine.options import RunOptions
from gpustack.engine.plan import CommandPlan, Stage
from gpustack.engine.steps import StageSummary

CFG = Config.model_validate(
    {
        "nodes": [
            {"name": "cp", "address": "192.0.2.10", "role": "control-plane", "connection": "local"},
            {"name": "w1", "address": "192.0.2.11", "connection": "local"},
        ],
        "versions": {"kubernetes": "1.36"},
    }
)


def marker(version: str) -> dict[str, Any]:
    return {"kubernetes": {"gpustack_marker": {"managed_by": "gpustack", "kubernetes_version": version}}}


def run_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, facts: dict[str, Any]) -> list[str]:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(engine_run, "run_preflight", lambda plan, cfg, opts, run_dir, console, **kw: (facts, []))
    changed: list[str] = []

    def ansible_stages(plan_: CommandPlan, stages: list[Stage], *a: Any, **kw: Any) -> Any:
        changed.extend(s.id for s in stages)
        return [StageSummary(s.id, "ok", 0.0) for s in stages], type(
            "R", (), {"failures": [], "rc": 0, "status": "successful"}
        )()

    monkeypatch.setattr(engine_run, "ansible_stages", ansible_stages)
    opts = RunOptions(stages=UP.select(skip=["kubelet-certs", "cluster"]))
    up_mod.up(CFG, opts, Console(stream=io.StringIO(), color=False))
    return changed


def test_a_changed_version_is_refused_before_any_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(skew.SkewError) as err:
        run_up(tmp_path, monkeypatch, {"cp": marker("1.35.8"), "w1": marker("1.35.8")})
    assert err.value.exit_code == 2 and "gpustack upgrade --to 1.36" in err.value.message
    [run_dir] = (tmp_path / "runs").iterdir()
    rows = json.loads((run_dir / "summary.json").read_text())
    assert [(r["stage"], r["status"]) for r in rows] == [("preflight", "failed")]


def test_the_same_version_runs_every_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v = CFG.versions.kubernetes
    assert run_up(tmp_path, monkeypatch, {"cp": marker(v), "w1": {}})[:2] == ["os", "firewall"]
