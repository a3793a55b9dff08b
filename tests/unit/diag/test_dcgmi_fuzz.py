"""Property tests: no input reaches the user as a traceback. Arbitrary JSON shapes (keys from dcgmi's own
vocabulary, so the parsers go deep), DCGM documents with one subtree replaced or deleted, and arbitrary
text: the parsers return results or raise :class:`DcgmiParseError` (a gpustack error), and a node's findings
are always built (a ``D00`` failure for output gpustack cannot read)."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpustack.diag.dcgmi import BEGIN_MARKER, END_MARKER, parse_diag, parse_health
from gpustack.diag.findings import NodeOutcome, node_findings
from gpustack.diag.job import DiagSpec
from gpustack.diag.model import DcgmiParseError
from tests.fakes.mangle import mangle

DOCS = Path(__file__).resolve().parents[2] / "fixtures" / "dcgmi"
DIAG_DOCS = [json.loads(p.read_text()) for p in sorted(DOCS.glob("dcgm-*/diag-*.json"))]
HEALTH_DOCS = [json.loads(p.read_text()) for p in sorted(DOCS.glob("dcgm-*/health-*.json"))]

KEYS = ["DCGM Diagnostic", "DCGM GPU Diagnostic", "iterations", "Overall Result", "warning", "test_categories",
        "category", "tests", "name", "results", "entity_group", "entity_group_id", "entity_id", "gpu_id", "status",
        "warnings", "error_id", "error_category", "error_severity", "info", "test_summary", "entity_groups",
        "entities", "serial_num", "device_id", "metadata", "version", "Driver Version Detected", "runtime_error",
        "GPU Device IDs", "GPU Device Serials", "body", "header", "Overall Health", "GPU", "children", "value",
        "overflow", "Errors", "0", "3"]  # fmt: skip
SCALARS = (
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
    | st.sampled_from(["Pass", "Fail", "Skip", "Warn", "Healthy", "Warning", "Failure", "5", "GPU", "Deployment",
                       "software", "memory", "GPU Memory", "Persistence Mode", "4.6.0", "\u0663"])
)  # fmt: skip
JSON = st.recursive(SCALARS, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(KEYS), c, max_size=6),
                    max_leaves=30)  # fmt: skip
SPEC_DIAG = DiagSpec(level=2)
SPEC_HEALTH = DiagSpec(mode="health")


def _log(payload: str, exit_code: int | None) -> str:
    end = f"{END_MARKER} (exit {exit_code})\n" if exit_code is not None else ""
    return f"gpustack: nv-hostengine answers after 1 s\n{BEGIN_MARKER} (dcgmi)\n{payload}\n{end}"


def _check(text: str, exit_code: int | None = 0) -> None:
    for parse in (parse_diag, parse_health):
        try:
            parse(text)
        except DcgmiParseError as exc:
            assert str(exc)
    for spec in (SPEC_DIAG, SPEC_HEALTH):
        findings = node_findings(
            NodeOutcome(node="n1", gpus=8, job="j", phase="Succeeded", log=_log(text, exit_code)), spec
        )
        assert findings and all(f.summary and f.status in ("pass", "fail", "warn", "skip") for f in findings)


def _dump(doc: Any) -> str:
    return json.dumps(doc, indent=3, allow_nan=True)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=JSON, exit_code=st.none() | st.sampled_from([0, 205, 226, -1]))
def test_arbitrary_json_shapes(doc: Any, exit_code: int | None) -> None:
    _check(_dump(doc), exit_code)
    _check(_dump({"DCGM Diagnostic": doc, "metadata": doc}), exit_code)
    _check(_dump({"DCGM GPU Diagnostic": doc, "GPU Device Serials": doc, "GPU Device IDs": doc}), exit_code)
    _check(_dump({"iterations": [doc, {"DCGM Diagnostic": doc}], "Overall Result": doc}), exit_code)
    _check(_dump({"body": {"Overall Health": doc, "GPU": {"children": doc}}}), exit_code)
    _check(_dump({"body": {"Overall Health": {"value": "Failure"}, "GPU": {"children": {"0": {"children": {
        "Errors": {"children": {"Memory system": doc}}}}}}}}), exit_code)  # fmt: skip


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, 10_000), seed=st.integers(0, 2**32), junk=st.lists(JSON, min_size=1, max_size=3))
def test_dcgm_documents_with_a_subtree_replaced(which: int, seed: int, junk: list[Any]) -> None:
    rnd = random.Random(seed)
    pool = DIAG_DOCS + HEALTH_DOCS
    doc = copy.deepcopy(pool[which % len(pool)])
    for j in junk:
        mangle(doc, rnd, j, descend=0.85, delete=0.3)
    _check(_dump(doc), rnd.choice([0, 226, None]))


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list('{}[]":, \n0123456789abcDCGM-\\')), max_size=300))
def test_arbitrary_text(text: str) -> None:
    _check(text)
    _check("{\n" + text)


def test_deep_nesting_and_huge_numbers() -> None:
    _check("{" + '"a":[' * 100_000 + "1" + "]" * 100_000 + "}")
    _check('{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "memory", "results": [{"entity_id": '
           + "9" * 5000 + ', "status": "Fail"}]}]}]}}')  # fmt: skip
    _check('{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "memory", "results": [{"entity_id": 1e400, '
           '"status": NaN, "warnings": [{"error_id": Infinity}]}]}]}]}}')  # fmt: skip
    log = f"{BEGIN_MARKER}\n{{}}\n{END_MARKER} (exit {'9' * 5000})\n"
    assert node_findings(NodeOutcome(node="n1", log=log), SPEC_DIAG)
