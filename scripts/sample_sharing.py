#!/usr/bin/env python3
"""Print the sample output docs/gpu-sharing.md shows, by running the commands against the test doubles:

1. ``gpustack verify --layer gpu-operator`` against the fake API server in its own process
   (tests/fakes/serve_kube_api.py ``--share mig``: three nodes, the last one's 8 H100s at all-1g.10gb, mig.strategy
   mixed; verify's test pods run by the GPU kubelet double, tests/fakes/gpu_kubelet.py);
2. ``gpustack report --since 1d`` against a real Prometheus holding the one-day history of
   tests/prometheus/test_report_sharing.py (an H100 at all-1g.10gb and two L40S time-sliced 4 ways) with the usage
   rules recorded over it.

Both run as a user runs them: ``python -m gpustack`` in its own process, 110 columns, no colour, an empty state
directory. Usage: ``python scripts/sample_sharing.py [--only verify|report]``. Asserts nothing (the tests do).
"""

from __future__ import annotations

import argparse
import calendar
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: the window's end the report sample shows (a fixed time: the sample does not move with the clock)
END = "2026-11-26T23:10:00Z"


def _env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_") and k != "KUBECONFIG"}
    env.update(GPUSTACK_STATE_DIR=str(state), NO_COLOR="1", COLUMNS="110", HOME=str(state),
               PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH")))))  # fmt: skip
    return env


def _gpustack(args: list[str], work: Path) -> str:
    state = work / "state"
    state.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "gpustack", *args], cwd=work, env=_env(state), capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    shown = " ".join(args).replace(f"{work}/", "")
    return f"$ gpustack {shown}\n{proc.stdout}{proc.stderr}(exit {proc.returncode})\n".replace(str(work), ".")


def verify_sample(work: Path) -> str:
    kubeconfig = work / "kubeconfig"
    server = subprocess.Popen([sys.executable, "-m", "tests.fakes.serve_kube_api", "--nodes", "3", "--share", "mig",
                               "--kubeconfig", str(kubeconfig)], cwd=ROOT, env=_env(work), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if not line.startswith("ready"):
            raise SystemExit(f"the fake API server did not start: {line!r}")
        return _gpustack(["verify", "--layer", "gpu-operator", "--kubeconfig", str(kubeconfig)], work)
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)


def report_sample(work: Path) -> str:
    from tests.prometheus.history import backfilled
    from tests.prometheus.test_report_sharing import sharing_history

    end = calendar.timegm(time.strptime(END, "%Y-%m-%dT%H:%M:%SZ"))
    pair = backfilled(work / "history", sharing_history(end), None)
    try:
        return _gpustack(["report", "--since", "1d", "--until", END, "--prometheus-url", pair.rules.url], work).replace(
            pair.rules.url, "http://prometheus:9090"
        )
    finally:
        pair.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("verify", "report"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpustack-sample-") as tmp:
        work = Path(tmp)
        (work / "history").mkdir()
        if args.only in (None, "verify"):
            print(verify_sample(work))
        if args.only in (None, "report"):
            print(report_sample(work))


if __name__ == "__main__":
    main()
