#!/usr/bin/env python3
"""Start-up time of `gpustack --help` against a bare Typer hello-world, in one run.

Both are run as users run them: a fresh interpreter each time (``python -m gpustack --help`` and
a one-command Typer app's ``--help``), alternating so that both see the same machine load; the
median of N runs of each is printed with the ratio. The target (issue #10) is a ratio of at most
1.5: the CLI module imports only Typer, rich and gpustack's own light modules; everything else
(the config model, pydantic, YAML, Ansible, Kubernetes clients) is imported inside command bodies.

    python3 scripts/bench_startup.py [-n RUNS] [--smoke]

``--smoke`` (CI, tests/unit/test_bench_smoke.py): one timed run of each; the ratio is then noise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HELLO = """\
import typer

app = typer.Typer(rich_markup_mode=MODE)


@app.command()
def hello(name: str = "world") -> None:
    print(f"hello {name}")


if __name__ == "__main__":
    app()
"""


def _time(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--runs", type=int, default=15, help="runs of each (default 15)")
    parser.add_argument("--smoke", action="store_true", help="one run of each (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.runs = 1
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80", "NO_COLOR": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory() as tmp:
        # Typer's default help (rich), and plain click help as gpustack's (rich_markup_mode=None)
        for name, mode in (("hello.py", '"rich"'), ("hello_plain.py", "None")):
            (Path(tmp) / name).write_text(HELLO.replace("MODE", mode), encoding="utf-8")
        argvs = {
            "bare": [sys.executable, str(Path(tmp) / "hello.py"), "--help"],
            "plain": [sys.executable, str(Path(tmp) / "hello_plain.py"), "--help"],
            "gpustack": [sys.executable, "-m", "gpustack", "--help"],
        }
        for argv in argvs.values():
            _time(argv, env)  # warm the page cache and write the bytecode
        times: dict[str, list[float]] = {k: [] for k in argvs}
        for _ in range(args.runs):
            for key, argv in argvs.items():
                times[key].append(_time(argv, env))
    b, p, g = (statistics.median(times[k]) for k in ("bare", "plain", "gpustack"))
    print(f"bare Typer hello-world --help:              {b * 1000:.0f} ms (median of {args.runs})")
    print(f"bare Typer hello-world, plain click help:   {p * 1000:.0f} ms")
    print(f"gpustack --help (plain click help):         {g * 1000:.0f} ms")
    print(f"bench_startup: ratio={g / b:.2f} (target <= 1.5); against the plain-help hello-world {g / p:.2f}")


if __name__ == "__main__":
    main()
