"""scripts/bench_doctor.py runs the CLI against the fake API server in its own process.

Its timings are printed, not asserted (they are the benchmark's output); what is asserted is that it
runs end to end, that the request count does not grow with the node count, and that it prints doctor's and
verify's ratios side by side in one result line (issue 32).
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
    rows = re.findall(
        r"^(doctor|verify)\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+(\d+)$", proc.stdout, re.M
    )
    assert len(rows) == 4, proc.stdout + proc.stderr
    requests = {(cmd, int(nodes)): int(req) for cmd, nodes, _, req, _ in rows}
    for cmd in ("doctor", "verify"):
        assert requests[(cmd, 1)] == requests[(cmd, 20)] > 0
    assert "warning" not in proc.stderr, proc.stderr
    result = re.search(
        r"^bench_doctor: 20/1 nodes: doctor ([\d.]+)x, verify ([\d.]+)x \(target <= 2x\); "
        r"requests doctor (\d+)->(\d+), verify (\d+)->(\d+) \(LIST pages only: \+(\d+) <= (\d+)\); (OK|MISSED)$",
        proc.stdout,
        re.M,
    )
    assert result, proc.stdout
    reqs = [int(g) for g in result.groups()[2:8]]
    assert reqs[:4] == [requests[("doctor", 1)], requests[("doctor", 20)], requests[("verify", 1)],
                        requests[("verify", 20)]]  # fmt: skip
    assert reqs[4] == 0  # 20 nodes add fewer objects than one page
    # the verdict follows the figures it prints (wall times vary; the rule does not)
    ratios_ok = all(float(r) <= 2 for r in result.groups()[:2])
    assert (result.group(9) == "OK") == (ratios_ok and reqs[4] <= reqs[5])
    assert proc.returncode == (0 if ratios_ok else 1)


def _summary(cli: dict[tuple[str, int], tuple[int, float]], objects: dict[int, int]) -> tuple[int, str]:
    import contextlib
    import importlib.util
    import io

    spec = importlib.util.spec_from_file_location("bench_doctor", SCRIPT)
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = bench.summary(cli, {k: (0, 0.1) for k in cli}, objects, 1, 1000)
    return code, out.getvalue().splitlines()[-1]


def test_the_verdict_holds_both_commands_to_2x_and_requests_to_list_pages() -> None:
    objects = {1: 54, 1000: 11043}  # 10,989 more objects: 22 pages of 500 at most
    good = {
        ("doctor", 1): (17, 2.0),
        ("doctor", 1000): (38, 3.9),
        ("verify", 1): (17, 2.0),
        ("verify", 1000): (38, 2.5),
    }
    code, line = _summary(good, objects)
    assert (code, line) == (0, "bench_doctor: 1000/1 nodes: doctor 1.95x, verify 1.25x (target <= 2x); requests "
                               "doctor 17->38, verify 17->38 (LIST pages only: +21 <= 22); OK")  # fmt: skip
    slow_verify = {**good, ("verify", 1000): (38, 4.2)}
    assert _summary(slow_verify, objects)[0] == 1 and _summary(slow_verify, objects)[1].endswith("MISSED")
    per_node = {**good, ("doctor", 1000): (17 + 1000, 3.0)}  # a request per node is not flat, however fast
    assert _summary(per_node, objects)[0] == 1
