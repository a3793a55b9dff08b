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
- the labels ``gpustack.io/quarantined=true`` and ``gpustack.io/quarantine-action`` (what the node needs:
  ``reset``, ``reboot`` or ``rma``, from the policy data) and annotations: who, when, why (the signals,
  JSON), the policy version and the node's boot ID at the quarantine.

Release requires what the action demands (:func:`release_problems`): a passing diag of level 2 or more
after the quarantine for every action; for ``reboot`` and ``rma`` also a new boot ID (the node was
restarted, or powered off for the GPU swap); and no state signal left (a row-remap failure or a pending
remap, allocatable below capacity). It removes the taint, the labels and the quarantine annotations (not
``gpustack.io/quarantine-history``, the circuit breaker's second record of every quarantine),
records ``gpustack.io/released-at``, ``-by`` and the last-XID gauge values it saw (those codes no longer
count against the node), and uncordons only a cordon gpustack made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpustack.constants import (
    ANN_CORDONED_BY_GPUSTACK,
    ANN_DIAG_RESULT,
    ANN_QUARANTINE_BOOT_ID,
    ANN_QUARANTINE_HISTORY,
    ANN_QUARANTINE_POLICY,
    ANN_QUARANTINE_REASON,
    ANN_QUARANTINED_AT,
    ANN_QUARANTINED_BY,
    ANN_RELEASED_AT,
    ANN_RELEASED_BY,
    ANN_RELEASED_LAST_XIDS,
    QUARANTINE_ACTION_LABEL,
    QUARANTINE_LABEL,
    QUARANTINE_TAINT_EFFECT,
    QUARANTINE_TAINT_KEY,
    QUARANTINE_TAINT_VALUE,
)
from gpustack.health.breaker import RETENTION, Entry
from gpustack.health.policy import POLICY_VERSION, Signal
from gpustack.health.xids import xid_policy

Obj = dict[str, Any]
QUARANTINE_ANNOTATIONS = (ANN_QUARANTINED_BY, ANN_QUARANTINED_AT, ANN_QUARANTINE_REASON, ANN_QUARANTINE_POLICY,
                          ANN_CORDONED_BY_GPUSTACK, ANN_QUARANTINE_BOOT_ID)  # fmt: skip
#: the action of a quarantine that predates the label (policy 1): release as for ``reset``
LEGACY_ACTION = "reset"
#: a node's quarantine history keeps at most this many quarantines (and none older than RETENTION)
HISTORY_MAX = 64
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


def boot_id(node: Obj) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or "")


def quarantine_action(node: Obj) -> str:
    """What a quarantined node needs (``reset``/``reboot``/``rma``), from its label."""
    value = (_meta(node).get("labels") or {}).get(QUARANTINE_ACTION_LABEL)
    return value if value in xid_policy().actions else LEGACY_ACTION


def _history(node: Obj) -> list[dict[str, Any]]:
    try:
        data = json.loads((_meta(node).get("annotations") or {}).get(ANN_QUARANTINE_HISTORY) or "[]")
    except ValueError:
        return []
    out = []
    for item in data if isinstance(data, list) else []:
        try:
            out.append(
                {"at": float(item["at"]), "window": int(item.get("window", 0)), "limit": int(item.get("limit", -1))}
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return out


def history(node: Obj) -> list[Entry]:
    """The quarantines ``node`` records (its history annotation, and its current ``quarantined-at`` when the
    history lacks it: a quarantine by an older gpustack), as breaker entries."""
    name = str(_meta(node).get("name"))
    out = [Entry(name, h["at"], "", (), h["window"], h["limit"]) for h in _history(node)]
    current = parse_time(str((_meta(node).get("annotations") or {}).get(ANN_QUARANTINED_AT) or ""))
    if current is not None and not any(abs(e.at - current) <= 1.5 for e in out):
        out.append(Entry(name, current, ""))
    return out


def quarantine_patch(node: Obj, signals: list[Signal], *, by: str, at: str, action: str = LEGACY_ACTION,
                     window: int = 0, limit: int = -1) -> Obj:  # fmt: skip
    """The merge patch that quarantines ``node`` for ``action`` (see the module docstring); ``window`` and
    ``limit``: the breaker's, recorded in the node's quarantine history."""
    taints = [t for t in _spec(node).get("taints") or [] if t.get("key") != QUARANTINE_TAINT_KEY] + [taint()]
    already_cordoned = bool(_spec(node).get("unschedulable"))
    when = parse_time(at) or 0.0
    kept = [h for h in _history(node) if h["at"] > when - RETENTION][-(HISTORY_MAX - 1) :]
    record = json.dumps([*kept, {"at": when, "window": window, "limit": limit}], sort_keys=True)
    spec: Obj = {"taints": taints}
    if not already_cordoned:
        spec["unschedulable"] = True
    return {
        "metadata": {
            "resourceVersion": str(_meta(node).get("resourceVersion") or ""),
            "labels": {QUARANTINE_LABEL: "true", QUARANTINE_ACTION_LABEL: action},
            "annotations": {
                ANN_QUARANTINE_BOOT_ID: boot_id(node),
                ANN_QUARANTINED_BY: by,
                ANN_QUARANTINED_AT: at,
                ANN_QUARANTINE_REASON: json.dumps([s.to_json() for s in signals], sort_keys=True),
                ANN_QUARANTINE_POLICY: POLICY_VERSION,
                ANN_CORDONED_BY_GPUSTACK: "false" if already_cordoned else "true",
                ANN_QUARANTINE_HISTORY: record,
            },
        },
        "spec": spec,
    }


def release_patch(node: Obj, *, by: str, at: str, last_xids: dict[str, int] | None = None) -> Obj:
    """The merge patch that releases ``node``: uncordons only when gpustack made the cordon. ``last_xids``:
    the last-XID gauge per GPU UUID now (None: Prometheus unread, nothing recorded)."""
    annotations = _meta(node).get("annotations") or {}
    taints = [t for t in _spec(node).get("taints") or [] if t.get("key") != QUARANTINE_TAINT_KEY]
    spec: Obj = {"taints": taints or None}
    if annotations.get(ANN_CORDONED_BY_GPUSTACK) == "true":
        spec["unschedulable"] = None
    return {
        "metadata": {
            "resourceVersion": str(_meta(node).get("resourceVersion") or ""),
            "labels": {QUARANTINE_LABEL: None, QUARANTINE_ACTION_LABEL: None},
            "annotations": {
                **dict.fromkeys(QUARANTINE_ANNOTATIONS),
                ANN_RELEASED_AT: at,
                ANN_RELEASED_BY: by,
                ANN_RELEASED_LAST_XIDS: json.dumps(last_xids, sort_keys=True) if last_xids else None,
            },
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
    """Why ``node`` may not be released yet (empty: it may): what its quarantine action demands."""
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
    action = quarantine_action(node)
    problems = []
    if action in ("reboot", "rma"):
        then, now = str(annotations.get(ANN_QUARANTINE_BOOT_ID) or ""), boot_id(node)
        what = (
            "reboot it"
            if action == "reboot"
            else "replace the GPU (the node is powered off for it) or have support clear it, then boot it"
        )
        if not then or not now:
            problems.append(f"{name} was quarantined for `{action}` and gpustack cannot tell whether it restarted since "
                            f"(boot ID {'not recorded at the quarantine' if not then else 'missing from the Node status'})")  # fmt: skip
        elif then == now:
            problems.append(f"{name} needs `{action}` ({xid_policy().actions[action].needs}) and has not restarted since "
                            f"the quarantine (boot ID {now} unchanged): {what}")  # fmt: skip
    problems += _diag_problems(node, name, str(annotations.get(ANN_QUARANTINED_AT, "")))
    for s in still_active:
        problems.append(f"still active: {s.describe()}")
    return problems


def _diag_problems(node: Obj, name: str, since: str) -> list[str]:
    """A passing diag of level RELEASE_DIAG_LEVEL or more after the quarantine (every action needs one)."""
    since_t = parse_time(since)
    record = DiagRecord.of(node)
    rerun = f"gpustack diag --node {name} --level {RELEASE_DIAG_LEVEL}"
    if record is None:
        return [f"no gpustack diag result on {name}: run `{rerun}` first"]
    at = parse_time(record.at)
    if since_t is not None and (at is None or at < since_t):
        return [
            f"the last diag on {name} ({record.result}, level {record.level}, {record.at}) is older than the quarantine ({since}): run `{rerun}`"
        ]
    if record.result != "pass":
        return [f"the last diag on {name} failed (level {record.level}, {record.at}): fix the GPU, then `{rerun}`"]
    if record.level < RELEASE_DIAG_LEVEL:
        return [
            f"the last passing diag on {name} was level {record.level}: release needs level {RELEASE_DIAG_LEVEL} or higher (`{rerun}`)"
        ]
    return []
