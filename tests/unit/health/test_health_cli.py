"""`gpustack health` and `gpustack health release` from the command line (fake API server, recorded series)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpustack.cli.app import main

from .conftest import HealthCluster


def _main(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return int(exc.value.code or 0)


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("NO_COLOR", "1")


def test_dry_run_then_apply(hc: HealthCluster, capsys: pytest.CaptureFixture[str]) -> None:
    hc.at(time.time())  # the CLI's evaluator keeps the real clock: the API server's must agree with it
    hc.xid("gpu-node-4", 2, 119)
    kc = str(hc.kubeconfig)
    assert _main(["health", "--kubeconfig", kc, "-o", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["command"] == "health (dry run)"
    [fail] = [c for c in report["checks"] if c["status"] == "fail"]
    assert fail["host"] == "gpu-node-4" and fail["layer"] == "quarantine" and "xid-119" in fail["summary"]
    assert hc.api.mutating_requests() == []
    assert _main(["health", "--kubeconfig", kc, "--apply"]) == 0
    out = capsys.readouterr().out
    assert "quarantined now" in out and "gpu-node-4" in out
    assert hc.node("gpu-node-4")["spec"]["unschedulable"] is True


def test_release_refused_is_exit_1_with_the_reason(hc: HealthCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["health", "release", "gpu-node-1", "--kubeconfig", str(hc.kubeconfig), "--yes"]) == 1
    assert "not quarantined by gpustack" in " ".join(capsys.readouterr().err.split())  # errors wrap at words


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["health", "--window", "5x"], "--window: '5x' is not a window"),
        (["health", "--max-percent", "0"], "--max-percent"),
        (["health", "-o", "csv"], "--output csv"),
        (["health", "--in-cluster", "--kubeconfig", "KC"], "exclude each other"),
        (["health", "--in-cluster", "--kubeconfig", "/x"], "--kubeconfig /x: no such file"),  # checked first
    ],
)
def test_bad_flags_are_exit_2(
    hc: HealthCluster, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    argv = [str(hc.kubeconfig) if a == "KC" else a for a in argv]
    assert _main([*argv, *([] if "--kubeconfig" in argv else ["--kubeconfig", str(hc.kubeconfig)])]) == 2
    assert message in " ".join(capsys.readouterr().err.split())  # errors wrap at words
    assert hc.api.mutating_requests() == []


def test_in_cluster_outside_a_pod_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert _main(["health", "--in-cluster"]) == 2
    assert "no in-cluster credentials" in capsys.readouterr().err


def test_policy_prints_the_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["health", "policy"]) == 0
    out = capsys.readouterr().out
    assert "gpustack XID policy, version 3" in out and "144-146, 149" in out and "CONTACT_SUPPORT" in out
    assert "recovery action" in " ".join(out.split())
    assert _main(["health", "policy", "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["version"] == "3" and len(data["xids"]) == 172
    assert {x["xid"]: x["action"] for x in data["xids"]}[95] == "reset"
    # 144-150 (issue 29): the stated choice where the subcode cannot be read, and the recovery actions
    rows = {x["xid"]: x for x in data["xids"]}
    assert (rows[145]["action"], rows[145]["with_recovery_action"]) == ("reset", "alert")
    assert rows[147]["action"] == rows[148]["action"] == "alert" and "cannot read the subcode" in rows[145]["reason"]
    assert data["recovery_actions"]["2"] == {"name": "NODE_REBOOT", "action": "reboot",
                                             "reason": data["recovery_actions"]["2"]["reason"]}  # fmt: skip
    assert _main(["health", "policy", "-o", "csv"]) == 2
    assert "--output csv" in capsys.readouterr().err


def test_health_help_shows_exit_codes_signals_and_the_breaker(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["health", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Exit codes: 0 nothing left to do; 1 a node needs a quarantine" in out and "2 usage; 3 the cluster" in out
    assert "Circuit breaker: at most --max-nodes" in out and "Signals (Prometheus, from dcgm-exporter)" in out
    assert _main(["--help"]) == 0  # the command list keeps the one-line summary
    assert "GPU fault quarantine" in " ".join(capsys.readouterr().out.split())
