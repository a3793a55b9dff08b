"""``gpustack report`` exit codes when Prometheus cannot be reached (3), without a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack.cli.app import main
from tests.prometheus.harness import free_port


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpustack.yaml").write_text("nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\n")
    return tmp_path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return int(exit_info.value.code or 0), " ".join(err.split())


def test_no_kubeconfig_and_no_url(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(["report"], capsys)
    assert code == 3 and "no kubeconfig for cluster" in err and "--prometheus-url" in err


def test_nothing_listening(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(["report", "--prometheus-url", f"http://127.0.0.1:{free_port()}"], capsys)
    assert code == 3 and "Prometheus unreachable via http://127.0.0.1:" in err
