"""scripts/gpu_probe.py against recorded data, so the command the lead runs on a lent GPU machine cannot rot.

A capture runs on this (GPU-less) machine with nvidia-smi and lspci replaced by a double that prints what
tests/fixtures/gpu-probe/replay-h100 recorded (tests/fakes/recorded_command.py); what was not recorded fails
the way a missing feature would, and the probe must still exit 0 and list it. The recorded capture itself is
analysed again (``--replay``): gpustack's parsers accept it and its sources agree. ~10 s in all.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_probe.py"
RECORDED = ROOT / "tests" / "fixtures" / "gpu-probe" / "replay-h100"
REPLAYER = ROOT / "tests" / "fakes" / "recorded_command.py"
FACTS_FIXTURE = ROOT / "tests" / "fixtures" / "facts" / "ubuntu2204-gpu.json"


def load_probe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_probe_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_probe(*args: str, path_dir: Path | None = None, python: tuple[str, ...] = (sys.executable,)) -> str:
    env = dict(os.environ)
    if path_dir is not None:
        env["PATH"] = f"{path_dir}{os.pathsep}{env['PATH']}"
    proc = subprocess.run([*python, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One capture with the recorded nvidia-smi and lspci on PATH; returns the output directory."""
    bin_dir = tmp_path_factory.mktemp("fakebin")
    for program in ("nvidia-smi", "lspci"):
        shim = bin_dir / program
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPLAYER}" "{RECORDED}" {program} "$@"\n')
        shim.chmod(0o755)
    out = tmp_path_factory.mktemp("probe")
    stdout = run_probe("--out", str(out), "--label", "test-host", path_dir=bin_dir)
    assert stdout.rstrip().splitlines()[-1].startswith("gpu_probe: ")
    return out


def test_recorded_outputs_are_saved_in_the_recorded_layout(capture: Path) -> None:
    raw = capture / "fixtures" / "gpu-probe" / "test-host"
    for meta in (RECORDED / "commands").glob("*.json"):
        assert (raw / "commands" / meta.name).is_file()
        assert (raw / "commands" / f"{meta.stem}.txt").read_text() == (
            RECORDED / "commands" / f"{meta.stem}.txt"
        ).read_text()
    # the files a recorded capture has, a new one has too (so it can be dropped into tests/fixtures)
    assert {p.name for p in RECORDED.glob("*.json")} <= {p.name for p in raw.glob("*.json")}
    probe = load_probe()
    assert {p.stem for p in (raw / "commands").glob("*.json")} == {name for name, *_ in probe.COMMANDS}


def test_failed_probes_are_listed_and_the_run_still_succeeds(capture: Path) -> None:
    summary = json.loads((capture / "summary.json").read_text())
    status = {p["name"]: p["status"] for p in summary["probes"]}
    assert status["nvidia-smi"] == status["nvidia-smi-L"] == status["nvidia-smi-query-gpu"] == "ok"
    assert status["nvidia-smi-q"] == "failed"  # not recorded: the double refuses it
    assert "nvidia-smi -q: exit status 6" in summary["failures"]
    assert (capture / "summary.txt").read_text().startswith("gpu_probe ")
    checks = {c["check"].split(" (")[0]: c for c in summary["cross_checks"]}
    assert checks["GPU names"]["status"] == "ok"
    assert checks["driver version"]["values"]["nvidia-smi"] == "565.57.01"


def test_facts_keep_every_recorded_field_and_the_preflight_runs_on_them(capture: Path) -> None:
    facts = json.loads((capture / "fixtures" / "facts" / "test-host.json").read_text())
    recorded = json.loads(FACTS_FIXTURE.read_text())
    assert set(recorded) <= set(facts)
    summary = json.loads((capture / "summary.json").read_text())
    diff = summary["facts_vs_recorded"]["ubuntu2204-gpu"]
    assert diff["missing"] == [] and diff["type_changed"] == []
    assert any(v.startswith("nvidia_pci_devices: recorded (['0x2330'], 8)") for v in diff["values"])
    assert summary["preflight"]["status"] == "ok"
    findings = json.loads((capture / "fixtures" / "gpu-probe" / "test-host" / "preflight.json").read_text())
    assert findings["P08-gpu"]["status"] in ("pass", "warn")
    assert summary["capture_vs_recorded"]["replay-h100"]["commands not answering here"] == []


def test_the_recorded_capture_parses_and_its_sources_agree(tmp_path: Path) -> None:
    stdout = run_probe("--replay", str(RECORDED), "--out", str(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [c["check"] for c in summary["cross_checks"] if c["status"] != "ok"] == [], stdout
    assert len(summary["cross_checks"]) == 9
    assert summary["preflight"] == {"status": "not run", "error": "no facts"}


def test_without_gpustack_dependencies_the_preflight_is_reported_not_run(tmp_path: Path) -> None:
    """Only python3 and the checkout: -S hides site-packages (pydantic, ansible); facts and captures still work."""
    run_probe("--out", str(tmp_path), "--label", "bare", "--timeout", "20", python=(sys.executable, "-S"))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["preflight"]["status"] == "not run"
    assert "pip install -e ." in summary["preflight"]["error"]
    assert (tmp_path / "fixtures" / "facts" / "bare.json").is_file()


def test_pure_parsers_on_recorded_shapes() -> None:
    probe = load_probe()
    rows = probe.parse_query_csv((RECORDED / "commands" / "nvidia-smi-query-gpu.txt").read_text())
    assert rows[0]["memory.total"] == "81559 MiB" and rows[0]["pci.bus_id"] == "00000000:18:00.0"
    assert probe.pci_address("00000000:18:00.0") == "0000:18:00.0"
    assert probe.parse_smi_header((RECORDED / "commands" / "nvidia-smi.txt").read_text()) == {
        "driver": "565.57.01",
        "cuda": "12.7",
    }
    gpus = probe.parse_smi_list((RECORDED / "commands" / "nvidia-smi-L.txt").read_text())
    assert probe.label_for({"os_id": "ubuntu", "os_version_id": "22.04"}, gpus) == "ubuntu2204-h100-80gb-hbm3"
    diff = probe.compare_facts({"a": 1, "kubernetes": {"x": True}, "peers": {"10.0.0.2": True}},
                               {"a": "1", "kubernetes": {}, "peers": {}, "b": 2})  # fmt: skip
    assert diff == {"missing": ["kubernetes.x"], "new": ["b"], "type_changed": ["a: int -> str"]}


REAL = ROOT / "tests" / "fixtures" / "gpu-probe" / "ubuntu2404-h100-80gb-hbm3"


def test_the_real_h100_capture_replays_and_only_the_missing_dev_char_links_differ(tmp_path: Path) -> None:
    """The capture of 2026-11-27 (docs/gpu-probe.md#last-run-on-real-hardware): its sources agree, and the one
    difference is real (that VM has no /dev/char links to the NVIDIA nodes)."""
    stdout = run_probe("--replay", str(REAL), "--out", str(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    status = {c["check"].split(" (")[0]: c["status"] for c in summary["cross_checks"]}
    assert [k for k, v in status.items() if v != "ok"] == ["/dev/char links to NVIDIA nodes"], stdout
    assert len(status) == 9


def test_nvml_probe_without_nvml_says_so_and_exits_0(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-S", str(ROOT / "scripts" / "nvml_probe.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "nvml.json").read_text())
    assert "pynvml" in result["error"] or "nvmlInit" in result["error"]
