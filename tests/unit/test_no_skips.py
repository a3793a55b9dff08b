"""tests/conftest.py: with PYTEST_NO_SKIPS=1 (the test command) a skipped test fails the run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def _run(tmp_path: Path, strict: bool) -> subprocess.CompletedProcess[str]:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\ndef test_runs():\n    assert True\n\n"
        "@pytest.mark.skip(reason='tool missing')\ndef test_skipped():\n    assert False\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_NO_SKIPS"}
    if strict:
        env["PYTEST_NO_SKIPS"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           str(tmp_path)], capture_output=True, text=True, env=env, timeout=120, check=False)  # fmt: skip


def test_a_skip_fails_the_strict_run(tmp_path: Path) -> None:
    r = _run(tmp_path, strict=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "PYTEST_NO_SKIPS=1: test_x.py::test_skipped skipped: Skipped: tool missing" in r.stdout


def test_a_skip_is_only_reported_otherwise(tmp_path: Path) -> None:
    r = _run(tmp_path, strict=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed, 1 skipped" in r.stdout
