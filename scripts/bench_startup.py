#!/usr/bin/env python3
"""Start-up time of `gpustack --help` against a bare Typer hello-world, in one run.

Both are run as users run them: a fresh interpreter each time (``python -m gpustack --help`` and
a one-command Typer app's ``--help``), alternating so that both see the same machine load; the
median of N runs of each is printed with the ratio. The target (issue #10) is a ratio of at most
1.5: the CLI module imports only Typer, rich and gpustack's own light modules; everything else
(the config model, pydantic, YAML, Ansible, Kubernetes clients) is imported inside command bodies.

    python3 scripts/bench_startup.py [-n RUNS]
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

app = typer.Typer()


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
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80", "NO_COLOR": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory() as tmp:
        hello = Path(tmp) / "hello.py"
        hello.write_text(HELLO, encoding="utf-8")
        bare = [sys.executable, str(hello), "--help"]
        ours = [sys.executable, "-m", "gpustack", "--help"]
        _time(bare, env), _time(ours, env)  # warm the page cache and write the bytecode
        bare_s: list[float] = []
        ours_s: list[float] = []
        for _ in range(args.runs):
            bare_s.append(_time(bare, env))
            ours_s.append(_time(ours, env))
    b, g = statistics.median(bare_s), statistics.median(ours_s)
    print(f"bare Typer hello-world --help: {b * 1000:.0f} ms (median of {args.runs})")
    print(f"gpustack --help:               {g * 1000:.0f} ms (median of {args.runs})")
    print(f"bench_startup: ratio={g / b:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
