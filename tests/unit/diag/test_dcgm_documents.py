"""dcgmi's JSON as DCGM writes it (tests/fixtures/dcgmi/dcgm-*/, each naming its writer in the README): DCGM
4.6.0's warnings written as "Fail", ``--iterations``, ``-i``, runtime errors, DCGM 3.3.9's shape, and what
each means for a release (``passed``: the verdict ``gpustack health release`` reads)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import jsonschema
import pytest

from gpustack.console import Console
from gpustack.constants import ANN_DIAG_RESULT
from gpustack.diag import findings as fd
from gpustack.diag.dcgm_errors import WARN_ONLY, blocks_release, error_name
from gpustack.diag.dcgmi import BEGIN_MARKER, END_MARKER, find_json, parse_diag, parse_health
from gpustack.diag.job import DiagSpec
from gpustack.diag.model import DcgmiParseError
from gpustack.diag.runner import DiagOptions, run_diag
from tests.fakes.kube_api import PodPlan

from .conftest import Cluster

DOCS = Path(__file__).resolve().parents[2] / "fixtures" / "dcgmi"
V4 = DOCS / "dcgm-4.6.0"
V3 = DOCS / "dcgm-3.3.9"
NODE = "gpu-node-1"


def doc(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def log(payload: str, exit_code: int | None) -> str:
    """The pod log gpustack's Job script prints around dcgmi's output (gpustack.diag.job.SCRIPT)."""
    end = f"{END_MARKER} (exit {exit_code})\n" if exit_code is not None else ""
    return (f"gpustack: starting nv-hostengine (DCGM 4.6.0)\ngpustack: nv-hostengine answers after 2 s\n"
            f"{BEGIN_MARKER} (dcgmi diag -r 2 -j --timeout 600)\n{payload}{end}")  # fmt: skip


def findings(payload: str, exit_code: int | None = 0, spec: DiagSpec | None = None) -> list:
    outcome = fd.NodeOutcome(node=NODE, gpus=8, job="j", phase="Succeeded", log=log(payload, exit_code), elapsed=120)
    return fd.node_findings(outcome, spec or DiagSpec(level=2))


def by_status(found: list, status: str) -> list:
    return [f for f in found if f.status == status]


def test_the_4_6_diag_documents_follow_dcgms_own_schema() -> None:
    validator = jsonschema.Draft7Validator(json.loads(doc(V4 / "dcgm_diag_schema.json")))
    checked = 0
    for path in sorted(V4.glob("diag-*.json")):
        data = json.loads(doc(path))
        for one in data.get("iterations", [data]):
            validator.validate(one)
            checked += 1
    assert checked == 10


def test_no_dcgm_4_document_says_warn() -> None:
    """Diag.cpp's JSON writer uses DDR_NO_DISPLAY_WARN: a WARN is written "Fail" (the point of the verdict rules)."""
    for path in V4.glob("diag-*.json"):
        assert '"Warn"' not in doc(path), path.name


def test_a_persistence_mode_warning_alone_cannot_clear_the_gpus_dcgm_marked_without_an_error() -> None:
    """Issue 29: DCGM 4.x writes every GPU of the software test "Fail" when one check warns (here persistence mode
    on GPU 3) -- and writes the same document when a check FAILs every GPU without an error (the denylist check on
    a readlink error, Software.cpp checkDriverPathDenylist @v4.6.0). The GPUs without an error fail closed."""
    run = parse_diag(doc(V4 / "diag-r2-warn-persistence-gpu3.json"))
    software = run.tests[0]
    assert software.name == "software" and {r.status for r in software.results} == {"Fail"}  # all 8 read "Fail"
    assert [r.entity_id for r in software.results if r.warnings] == [3]  # the error is on GPU 3 only
    found = findings(doc(V4 / "diag-r2-warn-persistence-gpu3.json"), exit_code=226)
    [warn] = by_status(found, "warn")
    assert warn.id == "D01-software" and warn.host == f"{NODE} GPU 3" and "Persistence mode for GPU 3" in warn.summary
    assert "DCGM_FR_PERSISTENCE_MODE (29)" in warn.evidence and "severity config" in warn.evidence
    failed = by_status(found, "fail")
    assert [f.host for f in failed] == [f"{NODE} GPU {g}" for g in (0, 1, 2, 4, 5, 6, 7)]
    assert all("failed closed" in f.summary and "fix the warning on GPU 3" in f.fix for f in failed)
    assert not fd.passed(found, NODE) and fd.warnings(found, NODE) == 1


def test_a_failing_error_on_one_gpu_explains_the_others_marking() -> None:
    data = json.loads(doc(V4 / "diag-r2-fail-pending-row-remap-gpu2.json"))
    for r in data["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"]:
        r["status"] = "Fail"  # every GPU marked, the failing error (pending row remap) on GPU 2
    found = findings(json.dumps(data, indent=3) + "\n", exit_code=226)
    others = [f for f in found if f.id == "D01-software" and f.status == "pass"]
    assert others and "no error of their own" in others[0].summary and "GPU 2" in others[0].summary


def test_a_pending_row_remap_fails_the_gpu_and_blocks_the_release() -> None:
    found = findings(doc(V4 / "diag-r2-fail-pending-row-remap-gpu2.json"), exit_code=226)
    [fail] = by_status(found, "fail")
    assert (fail.id, fail.host) == ("D01-software", f"{NODE} GPU 2")
    assert "DCGM_FR_PENDING_ROW_REMAP (85)" in fail.evidence and "severity reset" in fail.evidence
    assert "nvidia-smi -r -i 2" in fail.fix
    assert not fd.passed(found, NODE)


def test_a_memory_failure_blocks() -> None:
    found = findings(doc(V4 / "diag-r2-fail-memory-gpu5.json"), exit_code=205)
    assert [(f.id, f.host) for f in by_status(found, "fail")] == [("D03-memory", f"{NODE} GPU 5")]
    assert not fd.passed(found, NODE)


def test_passing_runs_and_the_gpu_selection() -> None:
    found = findings(doc(V4 / "diag-r2-pass-8gpu.json"))
    assert fd.passed(found, NODE) and fd.warnings(found, NODE) == 0
    assert "on 8 GPU(s) in 120s (DCGM 4.6.0, driver 595.91.07)" in found[0].summary
    two = findings(doc(V4 / "diag-r2-pass-entity-id-0_1.json"))  # dcgmi diag -i 0,1: GPUs 0 and 1 only
    assert "on 2 GPU(s)" in two[0].summary and fd.passed(two, NODE)
    assert {f.summary for f in two if f.id == "D03-memory"} == {"memory: pass on 2 GPU(s) (0-1)"}


def test_iterations_are_all_read_not_just_the_first_nested_one() -> None:
    text = doc(V4 / "diag-r2-iterations-3-fail-at-2.json")
    with pytest.raises(DcgmiParseError, match="no JSON object with 'DCGM Diagnostic'"):
        find_json(text, "DCGM Diagnostic")  # the iterations are nested: never taken for the document
    run = parse_diag(text)
    assert (run.iterations, run.overall) == (2, "Fail") and "drain the GPU" in run.overall_warning
    assert [t.label for t in run.tests][3:] == ["software (iteration 2)", "memory (iteration 2)", "pcie (iteration 2)"]
    found = findings(text, exit_code=205)
    [fail] = by_status(found, "fail")
    assert fail.host == f"{NODE} GPU 5" and fail.summary.startswith("memory (iteration 2): fail on GPU 5")
    assert "2 iteration(s), overall Fail" in found[0].summary and not fd.passed(found, NODE)
    passing = findings(doc(V4 / "diag-r2-iterations-2-pass.json"))
    assert fd.passed(passing, NODE) and "2 iteration(s), overall Pass" in passing[0].summary
    assert len([f for f in passing if f.id == "D03-memory"]) == 2


def test_a_runtime_error_printed_before_the_iterations_object_wins() -> None:
    text = doc(V4 / "diag-runtime-error.json") + doc(V4 / "diag-r2-iterations-2-pass.json")
    run = parse_diag(text)
    assert run.runtime_error == "Error: Diagnostic could not be run while DCGM is paused." and run.tests == ()
    [d00] = findings(text, exit_code=226)
    assert d00.status == "fail" and "could not complete: Error: Diagnostic could not be run" in d00.summary


def test_dcgm_3_3_output_is_read() -> None:
    run = parse_diag(doc(V3 / "diag-r2-pass-8gpu.json"))
    assert (run.shape, run.version, run.driver) == ("3.x", "3.3.9", "550.127.05")
    assert [g.entity_id for g in run.gpus] == list(range(8)) and run.gpus[5].serial == "1654923000006"
    assert [(t.name, t.label) for t in run.tests] == [("software", "software (9 deployment checks)"),
                                                      ("pcie", "pcie"), ("memory", "memory")]  # fmt: skip
    found = findings(doc(V3 / "diag-r2-pass-8gpu.json"))
    assert "DCGM 3.3.9" in found[0].summary and "DCGM 3.x output" in found[0].summary and fd.passed(found, NODE)
    failed = findings(doc(V3 / "diag-r2-fail-memory-gpu5.json"), exit_code=205)
    [fail] = by_status(failed, "fail")
    assert (fail.id, fail.host) == ("D03-memory", f"{NODE} GPU 5") and "serial 1654923000006" in fail.summary
    warned = findings(doc(V3 / "diag-r2-warn-persistence-gpu3.json"), exit_code=226)
    [warn] = by_status(warned, "warn")
    assert warn.host == f"{NODE} GPU 3" and warn.summary.startswith("software (Persistence Mode): warn on GPU 3")
    assert fd.passed(warned, NODE)


def test_a_dcgm_3_global_error_is_the_nodes_not_gpu_minus_1() -> None:
    """DCGM 3.3 writes gpu_id -1 for an error of no GPU (DcgmError::GpuIdTag::Unknown, e.g. the denylist's
    DCGM_FR_DENYLISTED_DRIVER): a node-level finding, never "GPU -1" (issue 29)."""
    data = json.loads(doc(V3 / "diag-r2-pass-8gpu.json"))
    deployment = data["DCGM GPU Diagnostic"]["test_categories"][0]["tests"]
    deployment[0] = {"name": "Denylist", "results": [{"gpu_id": -1, "status": "Fail", "warnings": [
        {"error_category": 3, "error_id": 23, "error_severity": 2,
         "warnings": "Found driver nouveau on the denylist. Remove it."}]}]}  # fmt: skip
    found = findings(json.dumps(data, indent=3) + "\n", exit_code=226)
    failed = by_status(found, "fail")
    assert [f.host for f in failed] == [NODE] and "nouveau" in failed[0].summary
    assert not any("GPU -1" in (f.host or "") + f.summary for f in found) and not fd.passed(found, NODE)


def test_output_that_is_no_dcgmi_diag_json_says_what_it_found() -> None:
    with pytest.raises(DcgmiParseError, match=r"no dcgmi diag JSON .*found an object with 'body'"):
        parse_diag(doc(V4 / "health-c-healthy.json"))
    [d00] = findings('{\n   "something" : 1\n}\n')
    assert d00.status == "fail" and "printed no result" in d00.summary and "no a JSON" not in d00.summary


def test_a_fail_without_any_error_and_an_unexplained_exit_status_fail_closed() -> None:
    data = json.loads(doc(V4 / "diag-r2-pass-8gpu.json"))
    data["DCGM Diagnostic"]["test_categories"][1]["tests"][0]["results"][4]["status"] = "Fail"
    found = findings(json.dumps(data, indent=3) + "\n", exit_code=226)
    [fail] = by_status(found, "fail")
    assert fail.host == f"{NODE} GPU 4" and "DCGM names no error" in fail.summary
    unexplained = findings(doc(V4 / "diag-r2-pass-8gpu.json"), exit_code=226)
    assert [f.summary for f in by_status(unexplained, "fail")] == [
        "dcgmi diag -r 2 (medium): dcgmi exited 226 but its JSON names no error"]  # fmt: skip
    data["DCGM Diagnostic"]["test_categories"][1]["tests"][0]["results"][4]["status"] = "Warn"  # a writer that says so
    assert [f.status for f in findings(json.dumps(data, indent=3) + "\n", 0) if f.host.endswith("GPU 4")] == ["warn"]


def test_a_whole_test_error_of_a_warning_kind_is_a_warning() -> None:
    """A CUDA environment variable (GpuIdTag::Unknown: in test_summary only, on no GPU): every GPU reads Fail."""
    data = json.loads(doc(V4 / "diag-r2-warn-persistence-gpu3.json"))
    software = data["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    del software["results"][3]["warnings"]
    software["test_summary"]["warnings"] = [{"error_category": 6, "error_id": 28, "error_severity": 5,
                                             "warning": "Found CUDA performance-limiting environment variable 'CUDA_LAUNCH_BLOCKING'."}]  # fmt: skip
    found = findings(json.dumps(data, indent=3) + "\n", exit_code=226)
    [warn] = by_status(found, "warn")
    assert warn.host == NODE and "CUDA_LAUNCH_BLOCKING" in warn.summary and "GPU(s) 0-7 'Fail'" in warn.summary
    assert fd.passed(found, NODE)
    software["test_summary"]["warnings"][0]["error_id"] = 22  # cannot open a library: FAIL for NVML, so it blocks
    assert not fd.passed(findings(json.dumps(data, indent=3) + "\n", exit_code=226), NODE)


def test_which_errors_block_a_release() -> None:
    assert {error_name(c) for c in WARN_ONLY} == {"DCGM_FR_NO_ACCESS_TO_FILE", "DCGM_FR_DEVICE_COUNT_MISMATCH",
                                                  "DCGM_FR_GRAPHICS_PROCESSES", "DCGM_FR_BAD_CUDA_ENV",
                                                  "DCGM_FR_PERSISTENCE_MODE"}  # fmt: skip
    for code in (22, 52, 58, 80, 84, 85, 118, None):  # CUDA/NVML library, memory, row remap, SRAM, no code
        assert blocks_release(code), code
    assert error_name(118) == "DCGM_FR_SRAM_THRESHOLD" and error_name(132) == "DCGM_FR_UNCORRECTABLE_ROW_REMAP_LIMIT"
    assert error_name(133) == "" and error_name(None) == ""


@pytest.mark.parametrize(
    ("name", "status", "system"),
    [("health-c-healthy.json", "pass", None), ("health-c-fail-xid95-gpu3.json", "fail", "Internal error"),
     ("health-c-fail-xid48-gpu6.json", "fail", "Internal error"), ("health-c-warn-xid94-gpu1.json", "warn", "Internal error"),
     ("health-c-fail-recovery-action-reset-gpu4.json", "fail", "Driver")],
)  # fmt: skip
def test_health_documents(name: str, status: str, system: str | None) -> None:
    run = parse_health(doc(V4 / name))
    found = findings(doc(V4 / name), spec=DiagSpec(mode="health"))
    assert found[0].status == status
    if system is None:
        assert run.entities == () and len(found) == 1
        return
    [entity] = run.entities
    [incident] = entity.incidents
    assert incident.system == system and incident.message and not incident.message.endswith(" ")
    assert found[1].status == status
    if system == "Internal error":
        assert "devastating XID" in found[1].evidence and "(triggered by XID" in incident.message


def test_a_run_with_only_warnings_is_recorded_as_a_pass_for_the_release(cluster: Cluster) -> None:
    """dcgmi exits 226 and the pod fails (any error, warnings too), yet the verdict the release reads is a pass.
    (The warning marks no other GPU here: one that does fails them closed, see the persistence-mode test.)"""
    data = json.loads(doc(V4 / "diag-r2-warn-persistence-gpu3.json"))
    for r in data["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"]:
        r["status"] = "Fail" if r.get("warnings") else "Pass"
    payload = log(json.dumps(data, indent=3) + "\n", 226)
    cluster.jobs.plans = {NODE: PodPlan(log=payload, phase="Failed", exit_code=226, run_seconds=100)}
    opts = DiagOptions(spec=DiagSpec(level=2), nodes=(NODE,))
    found = run_diag(cluster.kube, opts, Console(color=False, stream=io.StringIO()), by="t@h", clock=cluster.clock,
                     sleep=cluster.clock.sleep)  # fmt: skip
    assert [f.host for f in found if f.status == "warn"] == [f"{NODE} GPU 3"]
    record = json.loads(cluster.api.get("v1", "Node", NODE)["metadata"]["annotations"][ANN_DIAG_RESULT])
    assert (record["result"], record["warnings"], record["level"]) == ("pass", 1, 2)


def test_skips_stay_skips_and_errors_on_skipped_gpus_explain_no_failure() -> None:
    data = json.loads(doc(V4 / "diag-r2-pass-8gpu.json"))
    memory = data["DCGM Diagnostic"]["test_categories"][1]["tests"][0]
    for r in memory["results"]:
        r["status"] = "Skip"
    memory["test_summary"] = {"status": "Skip", "warnings": [{"error_category": 3, "error_id": 117, "error_severity": 5,
                                                              "warning": "Test memory was skipped."}]}  # fmt: skip
    skipped = [f for f in findings(json.dumps(data, indent=3) + "\n", exit_code=0) if f.id == "D03-memory"]
    assert {f.status for f in skipped} == {"skip"} and len(skipped) == 9  # one per GPU, one for the test's reason
    assert skipped[-1].host == NODE and "Test memory was skipped." in skipped[-1].summary
    # GPU 2 skipped with its reason, GPU 4 "Fail" without one: nothing explains GPU 4's failure
    memory["results"][2]["warnings"] = memory["test_summary"]["warnings"]
    memory["results"][4]["status"] = "Fail"
    memory["test_summary"]["status"] = "Fail"
    found = findings(json.dumps(data, indent=3) + "\n", exit_code=226)
    assert [f.host for f in by_status(found, "fail")] == [f"{NODE} GPU 4"] and not fd.passed(found, NODE)
