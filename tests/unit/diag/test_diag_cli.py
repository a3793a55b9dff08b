"""`gpustack diag` from the command line against the fake API server (real time: the simulated pods finish
at once, the runner's first look is after one second)."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from gpustack.cli.app import main
from tests.fakes.kube_api import FakeKubeAPI, JobSimulator

from .conftest import cpu_node, gpu_node, plan


def _main(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return int(exc.value.code or 0)


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)  # no gpustack.yaml here: the embedded default config
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("NO_COLOR", "1")
    with FakeKubeAPI.running() as fake:
        fake.seed([gpu_node("gpu-node-1"), gpu_node("gpu-node-2"), cpu_node("cpu-1")])
        JobSimulator(fake, {"gpu-node-1": plan("diag-r2-pass.log", seconds=0),
                            "gpu-node-2": plan("diag-r3-memory-fail-gpu5.log", seconds=0, phase="Failed")}).install()  # fmt: skip
        yield fake


def test_json_report_and_exit_code(api: FakeKubeAPI, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kc = api.write_kubeconfig(tmp_path / "kc")
    code = _main(["diag", "--kubeconfig", str(kc), "--level", "2", "-o", "json", "--save", str(tmp_path / "r.xml")])
    out = capsys.readouterr()
    assert code == 1  # GPU 5 of gpu-node-2 failed its memory test
    report = json.loads(out.out)  # progress went to stderr: stdout is one JSON document
    assert report["command"] == "diag --level 2"
    assert report["summary"]["fail"] == 1
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert [(c["id"], c["host"], c["layer"]) for c in failed] == [("D03-memory", "gpu-node-2 GPU 5", "diag")]
    assert "Job gpustack-diag/" in out.err
    suites = ET.parse(tmp_path / "r.xml").getroot()
    assert suites.get("failures") == "1" and suites.find("testsuite").get("name") == "diag"


def test_table_report(api: FakeKubeAPI, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kc = api.write_kubeconfig(tmp_path / "kc")
    code = _main(["diag", "--kubeconfig", str(kc), "--node", "gpu-node-1", "--level", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert "D01-software" in out and "D03-memory" in out and "D02-pcie" in out
    assert "OK: all" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["diag", "--level", "5"], "less than or equal to 4"),
        (["diag", "--health", "--level", "2"], "--level does not apply"),
        (["diag", "-o", "yaml"], "--output yaml"),
        (["diag", "--kubeconfig", "/nonexistent/kc"], "no such file"),
        (["diag", "--node", "nope"], "no such node"),
    ],
)
def test_bad_input_is_exit_2(
    api: FakeKubeAPI, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    kc = api.write_kubeconfig(tmp_path / "kc")
    if "--kubeconfig" not in argv:
        argv = [*argv, "--kubeconfig", str(kc)]
    assert _main(argv) == 2
    assert message in " ".join(capsys.readouterr().err.split())  # errors wrap at words
    assert api.mutating_requests() == []


def test_no_cluster_is_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    assert _main(["diag"]) == 3
    assert "run `gpustack up` first" in capsys.readouterr().err


def test_dry_run_says_which_nodes_gpus_and_how_long_and_creates_nothing(
    api: FakeKubeAPI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kc = api.write_kubeconfig(tmp_path / "kc")
    api.reset_requests()
    assert _main(["diag", "--kubeconfig", str(kc), "--level", "3", "--dry-run", "-o", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert api.mutating_requests() == []  # no Job, no namespace, no verdict
    rows = {r["node"]: r for r in plan["nodes"]}
    assert sorted(rows) == ["gpu-node-1", "gpu-node-2"]  # the CPU node is not a candidate
    assert rows["gpu-node-1"]["gpus"].endswith("(all allocatable)") and rows["gpu-node-1"]["typical"] == "15-30 min"
    assert "dcgmi --timeout 2700 s" in rows["gpu-node-1"]["at_most"] and rows["gpu-node-1"]["at_most"].startswith(
        "57 min"
    )
    assert "on 2 node(s) at once" in plan["summary"] and "Nothing was created" in plan["summary"]
    assert _main(["diag", "--kubeconfig", str(kc), "--node", "gpu-node-2", "--dry-run"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "gpu-node-2" in out and "gpu-node-1" not in out and "usually for seconds" in out
    assert _main(["diag", "--kubeconfig", str(kc), "--node", "cpu-1", "--dry-run"]) == 2  # the run's own refusal
