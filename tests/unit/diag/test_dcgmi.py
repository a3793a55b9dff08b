"""The dcgmi parsers on recorded outputs written from NVIDIA's documented JSON (tests/fixtures/dcgmi)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack.diag.dcgmi import find_json, parse_diag, parse_health, split_log
from gpustack.diag.model import DcgmiParseError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgmi"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_level2_pass_has_every_test_on_every_gpu() -> None:
    out = split_log(fixture("diag-r2-pass.log"))
    assert out.begun and out.exit_code == 0
    run = parse_diag(out.text)
    assert (run.version, run.driver, run.runtime_error) == ("4.6.0", "595.91.07", "")
    assert [(t.category, t.name, t.status) for t in run.tests] == [
        ("Deployment", "software", "Pass"), ("Hardware", "memory", "Pass"), ("Integration", "pcie", "Pass")]  # fmt: skip
    assert all(len(t.results) == 8 and {r.status for r in t.results} == {"Pass"} for t in run.tests)
    assert [g.entity_id for g in run.gpus] == list(range(8)) and all(g.serial for g in run.gpus)


def test_failed_memory_on_one_gpu() -> None:
    out = split_log(fixture("diag-r3-memory-fail-gpu5.log"))
    assert out.exit_code == 205  # DCGM_ST_NVVS_ISOLATE_ERROR: the error's priority is ISOLATE
    run = parse_diag(out.text)
    memory = next(t for t in run.tests if t.name == "memory")
    assert memory.status == "Fail"
    [failed] = [r for r in memory.results if r.status != "Pass"]
    assert failed.entity_id == 5 and failed.status == "Fail"
    [w] = failed.warnings
    assert (w.error_id, w.category, w.severity) == (52, 10, 2)
    assert w.code == "DCGM_FR_FAULTY_MEMORY (52)"
    assert "hardware memory" in w.describe() and "severity isolate" in w.describe()
    assert {t.name for t in run.tests} == {"software", "memory", "diagnostic", "nvbandwidth", "pcie",
                                           "memory_bandwidth", "targeted_stress", "targeted_power"}  # fmt: skip


def test_skipped_test() -> None:
    run = parse_diag(split_log(fixture("diag-r2-memory-skipped.log")).text)
    memory = next(t for t in run.tests if t.name == "memory")
    assert memory.status == "Skip" and {r.status for r in memory.results} == {"Skip"}
    assert memory.results[0].warnings[0].error_id == 55


def test_timeout_is_a_runtime_error() -> None:
    run = parse_diag(split_log(fixture("diag-r3-timeout.log")).text)
    assert run.tests == () and "Timeout" in run.runtime_error and run.version == "4.6.0"


def test_hostengine_failure_has_no_dcgmi_output() -> None:
    out = split_log(fixture("diag-hostengine-failed.log"))
    assert not out.begun and out.exit_code is None
    with pytest.raises(DcgmiParseError):
        parse_diag(out.text)


def test_json_after_warning_lines_and_a_truncated_log() -> None:
    text = 'Warning: a module could not be loaded\n{"not": "it"}\n' + split_log(fixture("diag-r2-pass.log")).text
    assert len(parse_diag(text).tests) == 3
    cut = fixture("diag-r2-pass.log")[:2000]  # the container was killed mid-print
    out = split_log(cut)
    assert out.begun and out.exit_code is None
    with pytest.raises(DcgmiParseError, match="DCGM Diagnostic"):
        parse_diag(out.text)
    with pytest.raises(DcgmiParseError):
        find_json("no json here")


def test_health_healthy_and_failure() -> None:
    healthy = parse_health(split_log(fixture("health-healthy.log")).text)
    assert healthy.overall == "Healthy" and healthy.entities == ()
    failure = parse_health(split_log(fixture("health-failure.log")).text)
    assert failure.overall == "Failure"
    assert [(e.entity_id, e.health) for e in failure.entities] == [("2", "Warning"), ("3", "Failure")]
    [incident] = failure.entities[1].incidents
    assert incident.system == "Memory system"
    assert incident.message == "GPU 3 had uncorrectable memory errors and row remapping failed."


def test_health_without_watches() -> None:
    with pytest.raises(DcgmiParseError, match="health -s"):
        parse_health("Error: Health watches not enabled. Please enable watches. \n")
