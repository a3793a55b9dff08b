"""What ``dcgmi diag -j`` and ``dcgmi health -c -j`` print, as typed results. Pure.

``dcgmi diag -j`` (DCGM 4.x, ``dcgmi/Diag.cpp`` @v4.6.0 ``HelperJsonBuildOutput``; key names from
``nvvs/include/NvvsJsonStrings.h``; schema ``testing/python3/dcgm_diag_schema.json``)::

    {"DCGM Diagnostic": {"test_categories": [
         {"category": "Deployment" | "Hardware" | "Integration" | "Stress",
          "tests": [{"name": "software" | "memory" | "pcie" | ...,
                     "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0,
                                  "status": "Pass" | "Fail" | "Skip",
                                  "warnings": [{"warning": str, "error_id": int (DCGM_FR_*),
                                                "error_category": int, "error_severity": int}],
                                  "info": [str]}],
                     "test_summary": {"status": ..., "warnings": [...]}}]}]},
     "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1,
                        "entities": [{"entity_id": 0, "serial_num": str, "device_id": str}]}],
     "metadata": {"version": "4.6.0", "Driver Version Detected": "595.91.07"}}

**The JSON never says "Warn"**: ``HelperJsonAddResult`` writes a result through ``HelperDisplayDiagResult``
with its default ``DDR_NO_DISPLAY_WARN`` (``Diag.h`` l.69-75, ``Diag.cpp`` l.845-865), which turns a WARN
into ``"Fail"``; only the text table's per-test line shows "Warn". A warning is told from a failure by
the error it carries (:mod:`gpustack.diag.dcgm_errors`). A software check that warns sets **every** GPU of the
software test to WARN (``nvvs/src/PluginTest.cpp`` ``SetResult``), so every GPU reads "Fail" while the error
is attached to one GPU (and to ``test_summary``, which lists every error of the test).

``dcgmi diag --iterations N -j`` (``Diag::RunStartDiag`` l.577-626) prints ONE object at the end:
``{"iterations": [<document as above>, ...], "Overall Result": "Pass" | "Fail"[, "warning": str]}``, and
stops after the first iteration that did not pass. ``-i`` selects GPUs (``--entity-id``), still one object.

A run that could not complete prints ``{"DCGM Diagnostic": {"version": ..., "runtime_error": "Error: ..."}}``
instead (a timeout included: ``Return: (-11) : Timeout``), at once, so an ``--iterations`` run may print it
before its own object. A test a GPU did not run has no entry for it.

DCGM 3.x (``"DCGM GPU Diagnostic"``, string ``gpu_id``; ``dcgmi/Diag.cpp`` @v3.3.9) is read by
:mod:`gpustack.diag.dcgmi_v3` into the same types.

``dcgmi health -c -j`` (``dcgmi/Health.cpp`` through ``DcgmiOutputJson``: every node is ``{"value": str,
"children": {...}, "overflow": [str]}``)::

    {"header": ["Health Monitor Report"],
     "body": {"Overall Health": {"value": "Healthy" | "Warning" | "Failure"},
              "GPU": {"children": {"0": {"value": "Warning",
                                         "children": {"Errors": {"children": {
                                             "PCIe system": {"value": "Warning", "overflow": [str, ...]}}}}}}}}}

Only entities with an incident appear; a long message is split over ``overflow`` parts (joined with a
space here). DCGM's "devastating" XIDs (48, 74, 79, 94, 95, 119, 120, 140) are reported with the system
``DCGM_HEALTH_WATCH_ALL``, which ``Health::HelperSystemToString`` has no name for: the key is
``"Internal error"``. Without watches dcgmi prints ``Error: Health watches not enabled. ...`` (not JSON).

The pod log carries gpustack's markers around dcgmi's output (see :mod:`gpustack.diag.job`); the
parsers find the JSON object between them, or anywhere in the text when the markers are missing. No
input makes them raise anything but :class:`DcgmiParseError` (tests/unit/diag/test_dcgmi_fuzz.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gpustack.diag.dcgmi_v3 import V3_ROOT, parse_v3
from gpustack.diag.model import (
    DcgmiParseError,
    DiagRun,
    DiagTest,
    EntityResult,
    GpuInfo,
    HealthEntity,
    HealthIncident,
    HealthRun,
    as_int,
    as_list,
    as_obj,
    as_str,
    info_of,
    warnings_of,
)

BEGIN_MARKER = "gpustack: begin dcgmi output"
END_MARKER = "gpustack: end dcgmi output"
_END_RE = re.compile(re.escape(END_MARKER) + r" \(exit (-?[0-9]{1,9})\)")


@dataclass(frozen=True)
class Output:
    """dcgmi's part of a pod log: the text between gpustack's markers and dcgmi's exit status."""

    text: str
    exit_code: int | None  # None: the end marker is missing (the container was killed)
    begun: bool  # the begin marker was seen (nv-hostengine answered)
    preamble: str  # what the script printed before dcgmi ran (nv-hostengine start-up)


def split_log(log: str) -> Output:
    """Cut a pod log into the script's preamble, dcgmi's output and its exit code."""
    begin = log.find(BEGIN_MARKER)
    if begin < 0:
        return Output(text=log, exit_code=None, begun=False, preamble=log)
    preamble = log[:begin]
    rest = log[begin + len(BEGIN_MARKER) :]
    end = _END_RE.search(rest)
    if end is None:
        return Output(text=rest, exit_code=None, begun=True, preamble=preamble)
    return Output(text=rest[: end.start()], exit_code=int(end.group(1)), begun=True, preamble=preamble)


def json_objects(text: str) -> list[dict[str, Any]]:
    """Every top-level JSON object in ``text``: one whose ``{`` starts a line (dcgmi prints with jsoncpp's
    ``toStyledString``: the document's braces at column 0, every nested object indented), scanning on after
    the end of each object found, so an object nested in another one is never taken for a document.

    dcgmi may print other lines before its JSON (a module it could not load), and an ``--iterations`` run
    may print a runtime error's object before its own."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    pos = 0
    for match in re.finditer(r"(?m)^\{", text):
        if match.start() < pos:
            continue
        try:
            obj, end = decoder.raw_decode(text, match.start())
        except (ValueError, RecursionError):  # not JSON, cut off (a killed container), or nested too deep
            continue
        if isinstance(obj, dict):
            found.append(obj)
            pos = end
    return found


def find_json(text: str, key: str | None = None) -> dict[str, Any]:
    """The first top-level JSON object in ``text`` (that has ``key``, when given)."""
    for obj in json_objects(text):
        if key is None or key in obj:
            return obj
    what = f"JSON object with {key!r}" if key else "JSON object"
    raise DcgmiParseError(f"no {what} in the output: {text.strip()[:300]!r}")


def _results(raw: Any) -> tuple[EntityResult, ...]:
    out = []
    for r in as_list(raw):
        if not isinstance(r, dict):
            continue
        entity_id = as_int(r.get("entity_id"))
        if entity_id is None:
            continue
        out.append(EntityResult(as_str(r.get("entity_group")) or "GPU", entity_id, as_str(r.get("status")),
                                warnings_of(r.get("warnings")), info_of(r.get("info"))))  # fmt: skip
    return tuple(out)


V4_ROOT = "DCGM Diagnostic"


def _parse_v4(doc: dict[str, Any], iteration: int = 0) -> DiagRun:
    """One DCGM 4.x document (a single run, or one element of ``iterations``)."""
    body = doc.get(V4_ROOT)
    if not isinstance(body, dict):
        raise DcgmiParseError(f"{V4_ROOT!r} is not an object")
    meta = as_obj(doc.get("metadata"))
    version = as_str(meta.get("version")) or as_str(body.get("version"))
    if body.get("runtime_error"):
        return DiagRun(version=version, runtime_error=as_str(body["runtime_error"]).strip() or "runtime error")
    tests: list[DiagTest] = []
    for cat in as_list(body.get("test_categories")):
        if not isinstance(cat, dict):
            continue
        for t in as_list(cat.get("tests")):
            if not isinstance(t, dict) or not as_str(t.get("name")):
                continue
            summary = as_obj(t.get("test_summary"))
            tests.append(DiagTest(as_str(cat.get("category")), as_str(t["name"]), as_str(summary.get("status")),
                                  _results(t.get("results")), warnings_of(summary.get("warnings")),
                                  iteration=iteration))  # fmt: skip
    if not tests:
        raise DcgmiParseError("the dcgmi diag output lists no test")
    gpus: list[GpuInfo] = []
    for group in as_list(doc.get("entity_groups")):
        if isinstance(group, dict) and group.get("entity_group") == "GPU":
            for e in as_list(group.get("entities")):
                entity_id = as_int(e.get("entity_id")) if isinstance(e, dict) else None
                if isinstance(e, dict) and entity_id is not None:
                    gpus.append(GpuInfo(entity_id, as_str(e.get("serial_num")), as_str(e.get("device_id"))))
    return DiagRun(tuple(tests), tuple(gpus), version, as_str(meta.get("Driver Version Detected")))


def _runtime_error(doc: dict[str, Any]) -> DiagRun | None:
    for root, shape in ((V4_ROOT, "4.x"), (V3_ROOT, "3.x")):
        body = doc.get(root)
        if isinstance(body, dict) and body.get("runtime_error"):
            error = as_str(body["runtime_error"]).strip() or "runtime error"
            return DiagRun(version=as_str(body.get("version")) or as_str(doc.get("version")), runtime_error=error,
                           shape=shape)  # fmt: skip
    return None


def _parse_doc(doc: dict[str, Any], iteration: int = 0) -> DiagRun:
    if V4_ROOT in doc:
        return _parse_v4(doc, iteration)
    return parse_v3(doc, iteration)


def _parse_iterations(doc: dict[str, Any]) -> DiagRun:
    runs = [_parse_doc(item, i + 1) for i, item in enumerate(as_list(doc.get("iterations")))
            if isinstance(item, dict) and (V4_ROOT in item or V3_ROOT in item)]  # fmt: skip
    if not runs:
        raise DcgmiParseError(f"the dcgmi diag --iterations output holds no run (Overall Result: "
                              f"{as_str(doc.get('Overall Result')) or 'none'})")  # fmt: skip
    failed = next((r for r in runs if r.runtime_error), None)
    if failed is not None:
        return failed
    first = runs[0]
    return DiagRun(tuple(t for r in runs for t in r.tests), first.gpus, first.version, first.driver,
                   shape=first.shape, iterations=len(runs), overall=as_str(doc.get("Overall Result")),
                   overall_warning=as_str(doc.get("warning")))  # fmt: skip


def parse_diag(text: str) -> DiagRun:
    """Parse ``dcgmi diag -j`` output (the JSON may be surrounded by other lines): DCGM 4.x, DCGM 3.x, a
    single run or ``--iterations``. A runtime error printed anywhere wins: the run did not complete."""
    docs = json_objects(text)
    for doc in docs:
        failed = _runtime_error(doc)
        if failed is not None:
            return failed
    for doc in docs:
        if "iterations" in doc:
            return _parse_iterations(doc)
        if V4_ROOT in doc or V3_ROOT in doc:
            return _parse_doc(doc)
    seen = "; ".join(f"an object with {', '.join(repr(k) for k in list(d)[:5])}" for d in docs[:3])
    raise DcgmiParseError(
        f"no dcgmi diag JSON in the output (a {V4_ROOT!r} object, DCGM 4.x; {V3_ROOT!r}, DCGM 3.x; or "
        f'"iterations")' + (f": found {seen}" if seen else f": {text.strip()[:300]!r}")
    )


def _children(node: Any) -> dict[str, Any]:
    kids = node.get("children") if isinstance(node, dict) else None
    return kids if isinstance(kids, dict) else {}


def _value(node: Any) -> str:
    return as_str(node.get("value")) if isinstance(node, dict) else as_str(node)


def _overflow(node: Any) -> str:
    parts = node.get("overflow") if isinstance(node, dict) else None
    return " ".join(as_str(p).strip() for p in as_list(parts) if as_str(p).strip())


def parse_health(text: str) -> HealthRun:
    """Parse ``dcgmi health -c -j`` output."""
    if "Health watches not enabled" in text and "{" not in text:
        raise DcgmiParseError("dcgmi health: no health watches were set (dcgmi health -s a must run first)")
    doc = find_json(text, "body")
    body = doc.get("body")
    if not isinstance(body, dict) or "Overall Health" not in body:
        raise DcgmiParseError('dcgmi health output has no "Overall Health"')
    entities: list[HealthEntity] = []
    for group, group_node in body.items():
        if group == "Overall Health":
            continue
        for entity_id, entity in _children(group_node).items():
            incidents = tuple(HealthIncident(str(system), _value(node), _overflow(node))
                              for system, node in _children(_children(entity).get("Errors")).items())  # fmt: skip
            entities.append(HealthEntity(str(group), str(entity_id), _value(entity), incidents))
    entities.sort(key=lambda e: (e.entity_group, as_int(e.entity_id) if as_int(e.entity_id) is not None else 1 << 62,
                                 e.entity_id))  # fmt: skip
    return HealthRun(_value(body["Overall Health"]), tuple(entities))
