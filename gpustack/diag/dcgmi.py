"""What ``dcgmi diag -j`` and ``dcgmi health -c -j`` print, as typed results. Pure.

``dcgmi diag -j`` (DCGM 4.x, ``dcgmi/Diag.cpp``; key names from ``nvvs/include/NvvsJsonStrings.h``)::

    {"DCGM Diagnostic": {"test_categories": [
         {"category": "Deployment" | "Hardware" | "Integration" | "Stress",
          "tests": [{"name": "software" | "memory" | "pcie" | ...,
                     "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0,
                                  "status": "Pass" | "Fail" | "Skip" | "Warn",
                                  "warnings": [{"warning": str, "error_id": int (DCGM_FR_*),
                                                "error_category": int, "error_severity": int}],
                                  "info": [str]}],
                     "test_summary": {"status": ..., "warnings": [...]}}]}]},
     "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1,
                        "entities": [{"entity_id": 0, "serial_num": str, "device_id": str}]}],
     "metadata": {"version": "4.6.0", "Driver Version Detected": "595.91.07"}}

A run that could not complete prints ``{"DCGM Diagnostic": {"version": ..., "runtime_error": "Error: ..."}}``
instead (a timeout included: ``Return: (-11) : Timeout``). A test a GPU did not run has no entry for it.

``dcgmi health -c -j`` (``dcgmi/Health.cpp`` through ``DcgmiOutputJson``: every node is ``{"value": str,
"children": {...}, "overflow": [str]}``)::

    {"header": ["Health Monitor Report"],
     "body": {"Overall Health": {"value": "Healthy" | "Warning" | "Failure"},
              "GPU": {"children": {"0": {"value": "Warning",
                                         "children": {"Errors": {"children": {
                                             "PCIe system": {"value": "Warning", "overflow": [str, ...]}}}}}}}}}

Only entities with an incident appear; a long message is split over ``overflow`` parts (joined with a
space here). Without watches dcgmi prints ``Error: Health watches not enabled. ...`` (not JSON).

The pod log carries gpustack's markers around dcgmi's output (see :mod:`gpustack.diag.job`); the
parsers find the JSON object between them, or anywhere in the text when the markers are missing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

BEGIN_MARKER = "gpustack: begin dcgmi output"
END_MARKER = "gpustack: end dcgmi output"
_END_RE = re.compile(re.escape(END_MARKER) + r" \(exit (-?\d+)\)")

#: DCGM_FR_* error codes gpustack names in its findings (dcgmlib/dcgm_errors.h, DCGM 4.6)
ERROR_NAMES: dict[int, str] = {
    3: "DCGM_FR_PCI_REPLAY_RATE",
    4: "DCGM_FR_VOLATILE_DBE_DETECTED",
    6: "DCGM_FR_PENDING_PAGE_RETIREMENTS",
    9: "DCGM_FR_CORRUPT_INFOROM",
    14: "DCGM_FR_NVLINK_DOWN",
    23: "DCGM_FR_DENYLISTED_DRIVER",
    25: "DCGM_FR_GRAPHICS_PROCESSES",
    29: "DCGM_FR_PERSISTENCE_MODE",
    30: "DCGM_FR_LOW_BANDWIDTH",
    40: "DCGM_FR_THERMAL_VIOLATIONS",
    42: "DCGM_FR_TEMP_VIOLATION",
    46: "DCGM_FR_PCIE_WIDTH",
    47: "DCGM_FR_ABORTED",
    48: "DCGM_FR_TEST_DISABLED",
    50: "DCGM_FR_STRESS_LEVEL",
    52: "DCGM_FR_FAULTY_MEMORY",
    55: "DCGM_FR_ECC_DISABLED",
    57: "DCGM_FR_CUDA_DBE",
    58: "DCGM_FR_MEMORY_MISMATCH",
    62: "DCGM_FR_MEMORY_BANDWIDTH",
    63: "DCGM_FR_TARGET_POWER",
    80: "DCGM_FR_ROW_REMAP_FAILURE",
    81: "DCGM_FR_UNCONTAINED_ERROR",
    84: "DCGM_FR_UNCORRECTABLE_ROW_REMAP",
    85: "DCGM_FR_PENDING_ROW_REMAP",
    101: "DCGM_FR_XID_ERROR",
    103: "DCGM_FR_DBE_VIOLATION",
    104: "DCGM_FR_PCIE_REPLAY_VIOLATION",
    117: "DCGM_FR_TEST_SKIPPED",
    120: "DCGM_FR_FALLEN_OFF_BUS",
}

#: error_severity (dcgmErrorSeverity_t)
SEVERITIES: dict[int, str] = {0: "none", 1: "monitor", 2: "isolate", 3: "unknown", 4: "triage", 5: "config", 6: "reset"}

#: error_category (dcgmErrorCategory_t)
CATEGORIES: dict[int, str] = {
    0: "none",
    1: "performance threshold",
    2: "performance violation",
    3: "software configuration",
    4: "software library",
    5: "software XID",
    6: "software CUDA",
    7: "software EUD",
    8: "software other",
    9: "hardware thermal",
    10: "hardware memory",
    11: "hardware NVLink",
    12: "hardware NVSwitch",
    13: "hardware PCIe",
    14: "hardware power",
    15: "hardware other",
    16: "internal",
}


class DcgmiParseError(ValueError):
    """The text holds no dcgmi JSON document of the expected shape."""


@dataclass(frozen=True)
class DiagWarning:
    """One ``warnings`` entry: the message and DCGM's code, category and severity for it."""

    message: str
    error_id: int | None = None
    category: int | None = None
    severity: int | None = None

    @property
    def code(self) -> str:
        """``DCGM_FR_FAULTY_MEMORY (52)`` or ``error 123``."""
        if self.error_id is None:
            return ""
        name = ERROR_NAMES.get(self.error_id)
        return f"{name} ({self.error_id})" if name else f"DCGM error {self.error_id}"

    def describe(self) -> str:
        parts = [self.message]
        extra = [x for x in (self.code, CATEGORIES.get(self.category or -1, ""),
                             f"severity {SEVERITIES[self.severity]}" if self.severity in SEVERITIES else "") if x]  # fmt: skip
        if extra:
            parts.append(f"[{', '.join(extra)}]")
        return " ".join(parts)


@dataclass(frozen=True)
class EntityResult:
    """One entity's (GPU's) result of one test."""

    entity_group: str
    entity_id: int
    status: str  # Pass | Fail | Skip | Warn
    warnings: tuple[DiagWarning, ...] = ()
    info: tuple[str, ...] = ()


@dataclass(frozen=True)
class DiagTest:
    """One test (plugin) of the run: its overall status and the per-entity results."""

    category: str
    name: str
    status: str
    results: tuple[EntityResult, ...] = ()
    warnings: tuple[DiagWarning, ...] = ()  # test_summary warnings (all entities, and global ones)


@dataclass(frozen=True)
class GpuInfo:
    entity_id: int
    serial: str = ""
    device_id: str = ""


@dataclass(frozen=True)
class DiagRun:
    """A parsed ``dcgmi diag -j``; ``runtime_error`` set when the run could not complete."""

    tests: tuple[DiagTest, ...] = ()
    gpus: tuple[GpuInfo, ...] = ()
    version: str = ""
    driver: str = ""
    runtime_error: str = ""

    def gpu(self, entity_id: int) -> GpuInfo | None:
        return next((g for g in self.gpus if g.entity_id == entity_id), None)


@dataclass(frozen=True)
class HealthIncident:
    system: str  # "Memory system", "PCIe system", ...
    health: str  # Healthy | Warning | Failure
    message: str


@dataclass(frozen=True)
class HealthEntity:
    entity_group: str  # GPU, NvSwitch, ...
    entity_id: str
    health: str
    incidents: tuple[HealthIncident, ...] = ()


@dataclass(frozen=True)
class HealthRun:
    """A parsed ``dcgmi health -c -j``."""

    overall: str
    entities: tuple[HealthEntity, ...] = field(default=())


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


def find_json(text: str, key: str | None = None) -> dict[str, Any]:
    """The first JSON object in ``text`` that starts a line (and has ``key``, when given).

    dcgmi may print warnings before its JSON (e.g. about a module it could not load), so the object is
    searched for rather than expected at the start."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"(?m)^[ \t]*\{", text):
        try:
            obj, _ = decoder.raw_decode(text, match.end() - 1)
        except ValueError:
            continue
        if isinstance(obj, dict) and (key is None or key in obj):
            return obj
    what = f"a JSON object with {key!r}" if key else "a JSON object"
    raise DcgmiParseError(f"no {what} in the output: {text.strip()[:300]!r}")


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _warnings(raw: Any) -> tuple[DiagWarning, ...]:
    out = []
    for w in raw if isinstance(raw, list) else []:
        if isinstance(w, dict):
            out.append(DiagWarning(str(w.get("warning") or ""), _int(w.get("error_id")),
                                   _int(w.get("error_category")), _int(w.get("error_severity"))))  # fmt: skip
        elif isinstance(w, str):  # older dcgmi printed bare strings
            out.append(DiagWarning(w))
    return tuple(out)


def _results(raw: Any) -> tuple[EntityResult, ...]:
    out = []
    for r in raw if isinstance(raw, list) else []:
        if not isinstance(r, dict):
            continue
        entity_id = _int(r.get("entity_id"))
        if entity_id is None:
            continue
        info = tuple(str(i) for i in r.get("info") or [] if isinstance(i, str | int | float))
        out.append(EntityResult(str(r.get("entity_group") or "GPU"), entity_id, str(r.get("status") or ""),
                                _warnings(r.get("warnings")), info))  # fmt: skip
    return tuple(out)


def parse_diag(text: str) -> DiagRun:
    """Parse ``dcgmi diag -j`` output (the JSON may be surrounded by other lines)."""
    doc = find_json(text, "DCGM Diagnostic")
    body = doc.get("DCGM Diagnostic")
    if not isinstance(body, dict):
        raise DcgmiParseError('"DCGM Diagnostic" is not an object')
    meta_raw = doc.get("metadata")
    meta: dict[str, Any] = meta_raw if isinstance(meta_raw, dict) else {}
    version = str(meta.get("version") or body.get("version") or "")
    if body.get("runtime_error"):
        return DiagRun(version=version, runtime_error=str(body["runtime_error"]).strip())
    tests: list[DiagTest] = []
    for cat in body.get("test_categories") or []:
        if not isinstance(cat, dict):
            continue
        for t in cat.get("tests") or []:
            if not isinstance(t, dict) or not t.get("name"):
                continue
            summary_raw = t.get("test_summary")
            summary: dict[str, Any] = summary_raw if isinstance(summary_raw, dict) else {}
            tests.append(DiagTest(str(cat.get("category") or ""), str(t["name"]), str(summary.get("status") or ""),
                                  _results(t.get("results")), _warnings(summary.get("warnings"))))  # fmt: skip
    if not tests:
        raise DcgmiParseError("the dcgmi diag output lists no test")
    gpus: list[GpuInfo] = []
    for group in doc.get("entity_groups") or []:
        if isinstance(group, dict) and group.get("entity_group") == "GPU":
            for e in group.get("entities") or []:
                if isinstance(e, dict) and _int(e.get("entity_id")) is not None:
                    gpus.append(GpuInfo(int(e["entity_id"]), str(e.get("serial_num") or ""), str(e.get("device_id") or "")))  # fmt: skip
    return DiagRun(tuple(tests), tuple(gpus), version, str(meta.get("Driver Version Detected") or ""))


def _children(node: Any) -> dict[str, Any]:
    kids = node.get("children") if isinstance(node, dict) else None
    return kids if isinstance(kids, dict) else {}


def _value(node: Any) -> str:
    return str(node.get("value") or "") if isinstance(node, dict) else ""


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
            incidents = []
            for system, sys_node in _children(_children(entity).get("Errors")).items():
                parts = [str(p) for p in (sys_node.get("overflow") or []) if isinstance(sys_node, dict)]
                incidents.append(HealthIncident(system, _value(sys_node), " ".join(p.strip() for p in parts)))
            entities.append(HealthEntity(group, str(entity_id), _value(entity), tuple(incidents)))
    entities.sort(key=lambda e: (e.entity_group, _int(e.entity_id) if _int(e.entity_id) is not None else 1 << 30))
    return HealthRun(_value(body["Overall Health"]), tuple(entities))
