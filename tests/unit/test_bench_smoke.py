"""Every benchmark in scripts/ (bench_*.py) runs its ``--smoke`` path in CI, so none rots unnoticed.

Each script runs as a user runs it (a subprocess) on a tiny input; its result line must parse. Figures are
printed, not asserted (they are the benchmark's output), except what the line states as a property
(the converged cluster layer makes no mutating Helm call; the series budget's verdict is OK). Three scripts
are smoke-tested elsewhere: bench_up.py needs test hosts (tests/testbed/test_up_single.py),
bench_doctor.py's fake-API path has its own test (tests/unit/diagnose/test_bench_doctor.py) and
bench_controlplane.py needs the real control plane (tests/controlplane/test_bench_smoke.py).
Time on the 2-core CI machine: ~25 s in all (bench_doctor --monitoring ~17 s, bench_cluster ~6 s).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.prometheus.harness import binaries_missing

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
NUM = r"\d+(?:\.\d+)?"
NEEDS_PROMETHEUS = pytest.mark.prometheus

#: (script, arguments, the result line, needs a real Prometheus)
SMOKE = [
    ("bench_cluster.py", ["--smoke"],
     rf"^bench_cluster: converged helm mutating=0 api writes \(server-side applies\)=\d+; "
     rf"wall fresh={NUM}s converged={NUM}s$", False),
    ("bench_series.py", ["--smoke"], r"^bench_series: series/GPU=\d+ verdict=OK$", False),
    ("bench_startup.py", ["--smoke"],
     rf"^bench_startup: ratio={NUM} \(target <= 1\.5\); against the plain-help hello-world {NUM}$", False),
    ("bench_report.py", ["--smoke"],
     rf"^bench_report: raw/rules wall time = {NUM}x \({NUM} s vs {NUM} s, median of 1\); queries 10 vs 5; "
     r"same numbers$", True),
    ("bench_doctor.py", ["--monitoring", "--smoke"],
     rf"^doctor \(4 cluster layers\): 1/1 nodes: requests \d+/\d+; wall time {NUM}/{NUM} s = {NUM}x; "
     r"verdict the same$", True),
]  # fmt: skip
#: scripts whose smoke path another test runs, and that test
ELSEWHERE = {
    "bench_up.py": ROOT / "tests" / "testbed" / "test_up_single.py",
    "bench_doctor.py": ROOT / "tests" / "unit" / "diagnose" / "test_bench_doctor.py",
    "bench_controlplane.py": ROOT / "tests" / "controlplane" / "test_bench_smoke.py",
}


def test_every_bench_script_has_a_smoke_path_and_a_test() -> None:
    scripts = {p.name for p in SCRIPTS.glob("bench_*.py")}
    assert scripts == {s for s, *_ in SMOKE} | set(ELSEWHERE), "add the new benchmark's --smoke to SMOKE"
    for name in scripts:
        assert '"--smoke"' in (SCRIPTS / name).read_text(), f"{name} has no --smoke flag"
    for test in ELSEWHERE.values():
        assert re.search(r'"--smoke"|smoke=True', test.read_text()), f"{test} does not run the smoke path"


@pytest.mark.parametrize(
    ("script", "args", "result", "prometheus"),
    [pytest.param(*row, id=" ".join([row[0], *row[1]]), marks=[NEEDS_PROMETHEUS] if row[3] else []) for row in SMOKE],
)
def test_smoke_path_prints_its_result_line(script: str, args: list[str], result: str, prometheus: bool) -> None:
    if prometheus and binaries_missing():
        pytest.skip(f"not installed: {', '.join(binaries_missing())} (apt-get install prometheus)")
    proc = subprocess.run([sys.executable, str(SCRIPTS / script), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(result, proc.stdout, re.M), proc.stdout[-3000:] + proc.stderr[-3000:]
