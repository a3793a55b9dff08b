"""scripts/bench_up.py's smoke path: one host, `up --skip cluster` fresh then converged, the result line printed.

The script's :func:`bench` runs on this session's own file server, proxy and published sources (the
``sources`` fixture): a subprocess could not, since this session holds the machine-wide test-bed lock
and the bed's ports. Its figures are printed, not asserted (they are the benchmark's output); what is
asserted: both runs succeeded, the fresh one changed the host, the converged one nothing, and the result
line parses. ~60 s on an idle 2-core machine (the fresh run was 40.8 s there); 200 s measured on
2026-11-26 with other test runs alongside (load 4-6).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from .services import Sources

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_up.py"
RESULT = re.compile(r"^bench_up: converged/fresh=(\d+\.\d\d) three/one=(\d+\.\d\d|- \(smoke: one host only\))$", re.M)


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_up_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_up_smoke_prints_its_result_line(
    rootfs: Path, sources: Sources, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rootfs.is_dir()
    line = load_script().bench(sources, tmp_path, smoke=True)
    out = capsys.readouterr().out
    m = RESULT.search(out)
    assert m is not None and m.group(0) == line, out
    assert 0 < float(m.group(1)) < 1, out  # the converged re-run is faster than the fresh one
    assert re.search(r"^fresh +[\d.]+ +[1-9]\d* ", out, re.M), out  # the fresh run changed the host
    assert re.search(r"^converged +[\d.]+ +0 ", out, re.M), out  # the re-run changed nothing
