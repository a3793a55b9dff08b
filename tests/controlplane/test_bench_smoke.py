"""scripts/bench_controlplane.py's ``--smoke`` path (tests/unit/test_bench_smoke.py lists it here): one node on the
fake and on a real control plane of its own; the result lines parse and the verdicts agree. Figures are printed,
not asserted (they are the benchmark's output). ~45 s on the 2-core machine."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NUM = r"\d+(?:\.\d+)?"


@pytest.mark.parametrize("pods", ["written"])
def test_bench_controlplane_smoke(pods: str) -> None:
    """The DaemonSets' pods written as their controller and kubelet would (tests/controlplane/written.py, what the
    1,000-node size uses on 2 cores). The other way, the real controllers and kwok (the script's default), is what
    every other test here loads with (tests/controlplane/load.py), so a second smoke run of ~90 s in CI's longest
    lane would prove nothing more."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_controlplane.py"), "--smoke",
                           "--daemonset-pods", pods], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False)  # fmt: skip
    out = proc.stdout + proc.stderr[-3000:]
    assert proc.returncode == 0, out
    for command in ("doctor", "verify", "health"):
        assert re.search(rf"^{command}: 1 nodes: real/fake wall time {NUM}/{NUM} s = {NUM}x; requests real \d+, "
                         rf"fake \d+; 1/1 nodes: real {NUM}x, fake {NUM}x$", proc.stdout, re.M), out  # fmt: skip
    assert "verdicts: the same on both servers at every size" in proc.stdout, out
