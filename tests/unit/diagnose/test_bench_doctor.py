"""scripts/bench_doctor.py runs the CLI against the fake API server in its own process.

Its timings are printed, not asserted (they are the benchmark's output); what is asserted is that it
runs end to end and that the request count does not grow with the node count.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "bench_doctor.py"


def test_bench_runs_and_requests_stay_flat() -> None:
    # --smoke: sizes 1 and 20, one run each (tests/unit/test_bench_smoke.py counts on this test for it)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--smoke"],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    rows = re.findall(r"^(doctor|verify)\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+(\d+)$", proc.stdout, re.M)
    assert len(rows) == 4, proc.stdout + proc.stderr
    requests = {(cmd, int(nodes)): int(req) for cmd, nodes, _, req, _ in rows}
    for cmd in ("doctor", "verify"):
        assert requests[(cmd, 1)] == requests[(cmd, 20)] > 0
    assert "warning" not in proc.stderr, proc.stderr
    assert re.search(r"doctor: 20/1 nodes: requests \d+/\d+; command wall time", proc.stdout)
