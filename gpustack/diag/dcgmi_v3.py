"""``dcgmi diag -j`` of DCGM 3.x, read into the 4.x types of :mod:`gpustack.diag.model`. Pure.

The shape (NVIDIA/DCGM ``dcgmi/Diag.cpp`` @v3.3.9, commit b0ec3c62: ``HelperJsonBuildOutput`` l.1404,
``HelperJsonAddBasicTests`` l.1212, ``HelperJsonAddResult`` l.1334; keys from ``nvvs/include/NvvsJsonStrings.h``)::

    {"DCGM GPU Diagnostic": {"test_categories": [
         {"category": "Deployment",
          "tests": [{"name": "Persistence Mode",
                     "results": [{"status": "Fail", "gpu_id": 3,
                                  "warnings": [{"warnings": str, "error_id": 29, ...}]}]}, ...]},
         {"category": "Hardware",
          "tests": [{"name": "GPU Memory",
                     "results": [{"gpu_id": "5", "status": "Fail",
                                  "warnings": [{"warning": str, "error_id": 58, ...}], "info": str}]}]}]},
     "version": "3.3.9", "Driver Version Detected": "550.127.05",
     "GPU Device IDs": ["2330", ...], "GPU Device Serials": {"0": "1654...", ...}}

- the deployment (software) checks are ten named tests with one result each and no per-GPU results: the
  result's ``gpu_id`` is a number, set only when the check recorded an error (the GPU of its last error;
  ``-1`` for an error of no GPU, ``DcgmError::GpuIdTag::Unknown``: read as the node's, not a GPU's),
  and each warning's text is under the key ``"warnings"``;
- per-GPU tests carry ``gpu_id`` as a **string**; their display names ("GPU Memory", "PCIe") map to the 4.x
  plugin names gpustack's check ids follow;
- a GPU that did not run a test leaves a ``null`` in ``results`` (jsoncpp fills skipped array indices);
- there is no ``test_summary``: a test's status is the worst of its results; status is "Pass", "Skip" or
  "Fail" only (``HelperDisplayDiagResult`` l.925: a WARN is written "Fail", as in 4.x).
"""

from __future__ import annotations

from typing import Any

from gpustack.diag.model import (
    DcgmiParseError,
    DiagRun,
    DiagTest,
    DiagWarning,
    EntityResult,
    GpuInfo,
    as_int,
    as_list,
    as_obj,
    as_str,
    info_of,
    warnings_of,
)

V3_ROOT = "DCGM GPU Diagnostic"
DEPLOYMENT = "Deployment"

#: DCGM 3.x display name -> DCGM 4.x plugin name (Diag.cpp v3.3.9 DISPLAY_*; nvvs/include/PluginStrings.h v4.6.0)
PLUGIN_NAMES: dict[str, str] = {
    "GPU Memory": "memory",
    "Context Create": "context_create",
    "SM Stress": "sm_stress",
    "Targeted Power": "targeted_power",
    "Targeted Stress": "targeted_stress",
    "Diagnostic": "diagnostic",
    "PCIe": "pcie",
    "Memory Bandwidth": "memory_bandwidth",
    "Memtest": "memtest",
    "Pulse Test": "pulse_test",
    "EUD Test": "eud",
    "CPU EUD Test": "cpu_eud",
}

#: a deployment check's warning text is under "warnings" (HelperJsonAddBasicTests); "warning" read too
_DEPLOYMENT_TEXT = ("warnings", "warning")
_ORDER = {"Fail": 3, "Warn": 2, "Skip": 1, "Pass": 0}


def _worst(statuses: list[str]) -> str:
    """The test's status from its results': Fail over Warn over Pass; Skip only when every result skipped."""
    known = [s for s in statuses if s]
    if not known:
        return ""
    if all(s == "Skip" for s in known):
        return "Skip"
    return max((s for s in known if s != "Skip"), key=lambda s: _ORDER.get(s, 4))


def _deployment(tests: list[Any], iteration: int) -> list[DiagTest]:
    """The named deployment checks -> one passing ``software`` test for the clean ones, one per other check."""
    out: list[DiagTest] = []
    clean: list[str] = []
    for t in tests:
        if not isinstance(t, dict):
            continue
        name = as_str(t.get("name"))
        results = [r for r in as_list(t.get("results")) if isinstance(r, dict)]
        statuses = [as_str(r.get("status")) for r in results]
        warnings = tuple(w for r in results for w in warnings_of(r.get("warnings"), _DEPLOYMENT_TEXT))
        status = _worst(statuses)
        if status in ("Pass", "") and not warnings:
            if name:
                clean.append(name)
            continue
        # gpu_id -1: an error of no GPU (a global one, e.g. the driver denylist): the node's, left in the
        # test's warnings (reported for the node), never "GPU -1"
        entities = tuple(EntityResult("GPU", gpu, status, warnings_of(r.get("warnings"), _DEPLOYMENT_TEXT))
                         for r in results for gpu in (as_int(r.get("gpu_id")),) if gpu is not None and gpu >= 0)  # fmt: skip
        out.append(DiagTest(DEPLOYMENT, "software", status or "Fail", entities, warnings, check=name or "unnamed check",
                            iteration=iteration))  # fmt: skip
    if clean:
        out.insert(0, DiagTest(DEPLOYMENT, "software", "Pass", (), (), check=f"{len(clean)} deployment checks",
                               iteration=iteration))  # fmt: skip
    return out


def _per_gpu(category: str, t: dict[str, Any], iteration: int) -> DiagTest | None:
    display = as_str(t.get("name"))
    if not display:
        return None
    name = PLUGIN_NAMES.get(display, display.lower().replace(" ", "_"))
    results: list[EntityResult] = []
    loose: list[DiagWarning] = []  # results without a GPU (none in 3.3's writer; read, not dropped)
    statuses: list[str] = []
    for r in as_list(t.get("results")):
        if not isinstance(r, dict):  # null: a GPU that did not run the test
            continue
        status = as_str(r.get("status"))
        statuses.append(status)
        warnings = warnings_of(r.get("warnings"))
        gpu = as_int(r.get("gpu_id"))
        if gpu is None or gpu < 0:  # no GPU, or -1 (a global error): the node's
            loose.extend(warnings)
            continue
        results.append(EntityResult("GPU", gpu, status, warnings, info_of(r.get("info"))))
    summary = tuple(w for r in results for w in r.warnings) + tuple(loose)
    return DiagTest(category, name, _worst(statuses), tuple(results), summary, iteration=iteration)


def parse_v3(doc: dict[str, Any], iteration: int = 0) -> DiagRun:
    """One DCGM 3.x document (``"DCGM GPU Diagnostic"`` at the root)."""
    body = doc.get(V3_ROOT)
    if not isinstance(body, dict):
        raise DcgmiParseError(f"{V3_ROOT!r} is not an object (DCGM 3.x shape)")
    version = as_str(doc.get("version")) or as_str(body.get("version"))
    if body.get("runtime_error"):
        return DiagRun(version=version, runtime_error=as_str(body["runtime_error"]).strip() or "runtime error",
                       shape="3.x")  # fmt: skip
    tests: list[DiagTest] = []
    for cat in as_list(body.get("test_categories")):
        if not isinstance(cat, dict):
            continue
        category = as_str(cat.get("category"))
        if category == DEPLOYMENT:
            tests += _deployment(as_list(cat.get("tests")), iteration)
            continue
        for t in as_list(cat.get("tests")):
            test = _per_gpu(category, t, iteration) if isinstance(t, dict) else None
            if test is not None:
                tests.append(test)
    if not tests:
        raise DcgmiParseError(f"the dcgmi diag output (DCGM {version or '3.x'}) lists no test")
    serials = as_obj(doc.get("GPU Device Serials"))
    ids = as_list(doc.get("GPU Device IDs"))
    numbers = sorted({n for n in (as_int(k) for k in serials) if n is not None} | set(range(len(ids))))
    gpus = tuple(GpuInfo(n, as_str(serials.get(str(n))), as_str(ids[n]) if n < len(ids) else "") for n in numbers)
    return DiagRun(tuple(tests), gpus, version, as_str(doc.get("Driver Version Detected")), shape="3.x")
