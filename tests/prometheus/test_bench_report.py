"""scripts/bench_report.py runs end to end on a small history. Its timings are printed, not asserted (they
are the benchmark's output); what is asserted is that both paths ran and agreed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_report.py"


def test_bench_runs_both_paths_and_they_agree(promtool: str) -> None:
    assert promtool
    proc = subprocess.run([sys.executable, str(SCRIPT), "--gpus", "4", "--days", "2", "--repeat", "1"],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = dict(re.findall(r"^(raw expressions|recording rules)\s+(\d+)\s+[\d.]+\s+[\d,.]+$", proc.stdout, re.M))
    assert rows == {"raw expressions": "10", "recording rules": "5"}, proc.stdout
    assert re.search(r"raw/rules wall time = [\d.]+x .*; queries 10 vs 5; same numbers$", proc.stdout, re.M)
