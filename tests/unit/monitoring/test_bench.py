"""scripts/bench_series.py reports the budget verdict through its exit status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "bench_series.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False)


def test_shipped_counters_are_within_budget() -> None:
    proc = _run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "series per GPU: 26" in proc.stdout
    assert "verdict: OK" in proc.stdout
    assert "exported but read by no panel, rule or policy query: none" in proc.stdout


def test_time_slicing_blows_the_budget() -> None:
    proc = _run("--pods-per-gpu", "2")
    assert proc.returncode == 1
    assert "52 series per GPU exceeds the target of 40" in proc.stdout
