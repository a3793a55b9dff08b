"""scripts/pins_report.py, the maintainer's report, runs as a maintainer runs it (a subprocess): its --smoke path
(the report for 2026-11-26, checked for a verdict and a source on every pin) and a chosen day's verdicts.
~2 s on the 2-core CI machine."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from gpustack.config import pins

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "pins_report.py"


def report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip


def test_smoke_path_prints_every_pin_and_its_result_line() -> None:
    proc = report("--smoke")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    # past: Kubernetes 1.34 only (kube-prometheus-stack is judged by the 3.13 LTS gpustack deploys with it)
    assert re.search(r"^pins_report: 15 pins, 1 past end of support, 1 ending \(within the warning window\), "
                     r"3 without a published date; \d+ newer releases known$", proc.stdout, re.M), proc.stdout[-500:]  # fmt: skip
    assert proc.stdout.startswith("gpustack pins on 2026-11-26")
    row = next(line for line in proc.stdout.splitlines() if line.startswith("containerd "))
    assert pins.CONTAINERD_VERSION in row and "2028-04-30" in row and "in 521 days" in row and "2.3.5" in row
    assert "Kubespray checksums.yml" in proc.stdout and "containerd RELEASES.md" in proc.stdout
    for name, version in (("cni-plugins", pins.CNI_PLUGINS_VERSION), ("crictl", pins.CRICTL_VERSION)):
        assert any(line.startswith(f"{name} ") and version in line for line in proc.stdout.splitlines()), name
    assert "flannel-io/flannel pins the same two in its e2e suite" in proc.stdout  # the plugins' second source
    kps = next(line for line in proc.stdout.splitlines() if line.startswith("kube-prometheus-stack "))
    assert "2027-07-31" in kps and "supported" in kps, kps


def test_a_chosen_day_and_strict() -> None:
    data = json.loads(report("--json", "--today", "2027-03-15").stdout)
    status = {(p["component"], p["version"]): p["status"] for p in data["pins"]}
    assert status["kubernetes", pins.KUBERNETES["1.35"]] == "past"  # 2027-02-28
    assert status["nvidia-driver (GPU Operator default)", "595.91.07"] == "past"  # March 2027, month only
    assert status["containerd", pins.CONTAINERD_VERSION] == "supported"
    assert report("--strict", "--today", "2026-11-26").returncode == 1, "1.34 is past its end of support"
    assert report("--today", "2026-11-26").returncode == 0
