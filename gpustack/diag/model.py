"""The typed results of dcgmi's JSON (DCGM 4.x and 3.x read into the same types), and the tolerant readers
the parsers share: a value of an unexpected type reads as absent, never as an exception. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpustack.diag.dcgm_errors import CATEGORIES, SEVERITIES, error_name
from gpustack.errors import GpustackError


class DcgmiParseError(GpustackError):
    """The text holds no dcgmi JSON document of a shape gpustack reads."""


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
        name = error_name(self.error_id)
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
    status: str  # Pass | Fail | Skip (| Warn: never in DCGM 4.x JSON, read should a writer print it)
    warnings: tuple[DiagWarning, ...] = ()
    info: tuple[str, ...] = ()


@dataclass(frozen=True)
class DiagTest:
    """One test (plugin) of the run: its overall status and the per-entity results."""

    category: str
    name: str  # the DCGM 4.x plugin name (DCGM 3.x display names are mapped to it)
    status: str
    results: tuple[EntityResult, ...] = ()
    warnings: tuple[DiagWarning, ...] = ()  # test_summary warnings (every error of the test, global ones too)
    check: str = ""  # DCGM 3.x: the deployment check ("Persistence Mode") of the software test
    iteration: int = 0  # --iterations: which run (1-based); 0 for a single run

    @property
    def label(self) -> str:
        """``software``, ``software (Persistence Mode)``, ``memory (iteration 2)``."""
        extra = [x for x in (self.check, f"iteration {self.iteration}" if self.iteration else "") if x]
        return f"{self.name} ({', '.join(extra)})" if extra else self.name


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
    shape: str = "4.x"  # the JSON shape: "4.x" ("DCGM Diagnostic") or "3.x" ("DCGM GPU Diagnostic")
    iterations: int = 0  # --iterations: how many runs the output holds (0: a single run)
    overall: str = ""  # --iterations: "Overall Result" (Pass | Fail)
    overall_warning: str = ""  # --iterations: why the loop stopped (errorString of dcgmi's return)

    def gpu(self, entity_id: int) -> GpuInfo | None:
        return next((g for g in self.gpus if g.entity_id == entity_id), None)


@dataclass(frozen=True)
class HealthIncident:
    system: str  # "Memory system", "PCIe system", "Internal error" (a devastating XID), ...
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


def as_int(value: Any) -> int | None:
    """An id or code: an int, or a string of digits (DCGM 3.x writes gpu_id as a string). Never a bool, a
    float or an out-of-range number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdecimal():
        try:
            return int(value.strip())
        except ValueError:  # digits Python's int() refuses (other scripts' digits)
            return None
    return None


def as_str(value: Any) -> str:
    """A scalar as text; "" for null, an object or an array."""
    return "" if value is None or isinstance(value, dict | list) else str(value)


def as_obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def warnings_of(raw: Any, text_keys: tuple[str, ...] = ("warning",)) -> tuple[DiagWarning, ...]:
    """A ``warnings`` array: objects (the first of ``text_keys`` present holds the message), or bare strings
    (older dcgmi). ``null`` entries (jsoncpp's holes) and empty objects are left out."""
    out = []
    for w in as_list(raw):
        if isinstance(w, dict):
            text = next((as_str(w[k]) for k in text_keys if as_str(w.get(k))), "")
            warning = DiagWarning(text, as_int(w.get("error_id")), as_int(w.get("error_category")),
                                  as_int(w.get("error_severity")))  # fmt: skip
            if text or warning.error_id is not None:
                out.append(warning)
        elif isinstance(w, str):
            out.append(DiagWarning(w))
    return tuple(out)


def info_of(raw: Any) -> tuple[str, ...]:
    """``info``: an array of strings (4.x) or one string (3.x)."""
    if isinstance(raw, str):
        return (raw,)
    return tuple(str(i) for i in as_list(raw) if isinstance(i, str | int | float) and not isinstance(i, bool))
