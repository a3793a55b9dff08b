"""What quarantine and release change on a Node, as JSON merge patches, and when release is allowed. Pure.

Quarantine is ONE merge patch of the Node (so it happens whole or not at all), carrying the Node's
``resourceVersion`` as a precondition (a concurrent change makes it a 409, and the caller reads and
decides again):

- ``spec.unschedulable: true`` (the cordon) unless the node is already cordoned; gpustack records whether
  the cordon is its own (``gpustack.io/cordoned-by-gpustack``);
- the taint ``gpustack.io/gpu-health=fatal:NoSchedule`` added to the existing taints (a merge patch
  replaces the list, hence the whole list with the precondition). It keeps GPU work off the node even when
  something else uncordons it (the GPU Operator's driver upgrade uncordons the nodes it cordoned);
  NoSchedule, not NoExecute: running jobs are not killed by gpustack, the operator drains when ready;
- the label ``gpustack.io/quarantined=true`` and annotations: who, when, why (the signals, JSON) and the
  policy version.

Release removes the taint, the label and the quarantine annotations, records ``gpustack.io/released-at``
and ``-by``, and uncordons only a cordon gpustack made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpustack.constants import (
    ANN_CORDONED_BY_GPUSTACK,
    ANN_DIAG_RESULT,
    ANN_QUARANTINE_POLICY,
    ANN_QUARANTINE_REASON,
    ANN_QUARANTINED_AT,
    ANN_QUARANTINED_BY,
    ANN_RELEASED_AT,
    ANN_RELEASED_BY,
    QUARANTINE_LABEL,
    QUARANTINE_TAINT_EFFECT,
    QUARANTINE_TAINT_KEY,
    QUARANTINE_TAINT_VALUE,
)
from gpustack.health.policy import POLICY_VERSION, Signal

Obj = dict[str, Any]
QUARANTINE_ANNOTATIONS = (ANN_QUARANTINED_BY, ANN_QUARANTINED_AT, ANN_QUARANTINE_REASON, ANN_QUARANTINE_POLICY,
                          ANN_CORDONED_BY_GPUSTACK)  # fmt: skip
#: release needs a passing diag of at least this level after the quarantine
RELEASE_DIAG_LEVEL = 2


def taint() -> Obj:
    return {"key": QUARANTINE_TAINT_KEY, "value": QUARANTINE_TAINT_VALUE, "effect": QUARANTINE_TAINT_EFFECT}


def taint_text() -> str:
    return f"{QUARANTINE_TAINT_KEY}={QUARANTINE_TAINT_VALUE}:{QUARANTINE_TAINT_EFFECT}"


def _meta(node: Obj) -> Obj:
    return node.get("metadata") or {}


def _spec(node: Obj) -> Obj:
    return node.get("spec") or {}


def is_quarantined(node: Obj) -> bool:
    """Quarantined by gpustack (its label: gpustack never calls a node quarantined it did not quarantine)."""
    return (_meta(node).get("labels") or {}).get(QUARANTINE_LABEL) == "true"


def quarantine_patch(node: Obj, signals: list[Signal], *, by: str, at: str) -> Obj:
    """The merge patch that quarantines ``node`` (see the module docstring)."""
    taints = [t for t in _spec(node).get("taints") or [] if t.get("key") != QUARANTINE_TAINT_KEY] + [taint()]
    already_cordoned = bool(_spec(node).get("unschedulable"))
    spec: Obj = {"taints": taints}
    if not already_cordoned:
        spec["unschedulable"] = True
    return {
        "metadata": {
            "resourceVersion": str(_meta(node).get("resourceVersion") or ""),
            "labels": {QUARANTINE_LABEL: "true"},
            "annotations": {
                ANN_QUARANTINED_BY: by,
                ANN_QUARANTINED_AT: at,
                ANN_QUARANTINE_REASON: json.dumps([s.to_json() for s in signals], sort_keys=True),
                ANN_QUARANTINE_POLICY: POLICY_VERSION,
                ANN_CORDONED_BY_GPUSTACK: "false" if already_cordoned else "true",
            },
        },
        "spec": spec,
    }


def release_patch(node: Obj, *, by: str, at: str) -> Obj:
    """The merge patch that releases ``node``: uncordons only when gpustack made the cordon."""
    annotations = _meta(node).get("annotations") or {}
    taints = [t for t in _spec(node).get("taints") or [] if t.get("key") != QUARANTINE_TAINT_KEY]
    spec: Obj = {"taints": taints or None}
    if annotations.get(ANN_CORDONED_BY_GPUSTACK) == "true":
        spec["unschedulable"] = None
    return {
        "metadata": {
            "resourceVersion": str(_meta(node).get("resourceVersion") or ""),
            "labels": {QUARANTINE_LABEL: None},
            "annotations": {**dict.fromkeys(QUARANTINE_ANNOTATIONS), ANN_RELEASED_AT: at, ANN_RELEASED_BY: by},
        },
        "spec": spec,
    }


def parse_time(text: str) -> float | None:
    """RFC 3339 (``2026-11-18T09:14:02Z``) -> epoch seconds."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


@dataclass(frozen=True)
class DiagRecord:
    level: int
    result: str
    at: str

    @classmethod
    def of(cls, node: Obj) -> DiagRecord | None:
        raw = (_meta(node).get("annotations") or {}).get(ANN_DIAG_RESULT)
        try:
            data = json.loads(raw or "")
            return cls(int(data["level"]), str(data["result"]), str(data["at"]))
        except (ValueError, KeyError, TypeError):
            return None


def release_problems(node: Obj, still_active: list[Signal]) -> list[str]:
    """Why ``node`` may not be released yet (empty: it may)."""
    name = str(_meta(node).get("name"))
    annotations = _meta(node).get("annotations") or {}
    if not is_quarantined(node):
        cordon = (
            " Its cordon is not gpustack's: `kubectl uncordon` it yourself if you mean to."
            if _spec(node).get("unschedulable")
            else ""
        )
        return [
            f"node {name} is not quarantined by gpustack (no {QUARANTINE_LABEL}=true label): nothing to release.{cordon}"
        ]
    problems = []
    since = annotations.get(ANN_QUARANTINED_AT, "")
    since_t = parse_time(since)
    record = DiagRecord.of(node)
    rerun = f"gpustack diag --node {name} --level {RELEASE_DIAG_LEVEL}"
    if record is None:
        problems.append(f"no gpustack diag result on {name}: run `{rerun}` first")
    else:
        at = parse_time(record.at)
        if since_t is not None and (at is None or at < since_t):
            problems.append(
                f"the last diag on {name} ({record.result}, level {record.level}, {record.at}) is older than the quarantine ({since}): run `{rerun}`"
            )
        elif record.result != "pass":
            problems.append(
                f"the last diag on {name} failed (level {record.level}, {record.at}): fix the GPU, then `{rerun}`"
            )
        elif record.level < RELEASE_DIAG_LEVEL:
            problems.append(
                f"the last passing diag on {name} was level {record.level}: release needs level {RELEASE_DIAG_LEVEL} or higher (`{rerun}`)"
            )
    for s in still_active:
        problems.append(f"still active: {s.describe()}")
    return problems
