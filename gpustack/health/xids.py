"""The XID policy as data: ``templates/health/xid-policy.yaml`` (NVIDIA's XID catalogue mapped to gpustack's
four actions, with the sources and the reason for every decision). Pure: load, look up, render.

An XID's action: its ``decisions`` entry, else its catalogue bucket's action (``buckets``), else ``unknown``.
A decision may name a ``recovery_action``: the XID's action on a GPU that reports the driver's recovery action
(DCGM_FI_DEV_GPU_RECOVERY_ACTION), whose verdict then decides (XIDs graded by a subcode gpustack cannot read).
Actions, mildest first: ``alert`` (no quarantine), ``reset`` (quarantine until GPU reset + passing diag),
``reboot`` (quarantine until reboot), ``rma`` (drain and RMA / contact support). A node with several signals
takes the most severe.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import yaml

from gpustack.errors import GpustackError
from gpustack.paths import resource_file

POLICY_FILE = resource_file("templates", "health", "xid-policy.yaml")
ACTION_IDS = ("alert", "reset", "reboot", "rma")


@dataclass(frozen=True)
class Action:
    id: str
    title: str
    needs: str  # what the node needs, in a few words ("a GPU reset")
    how: str  # how to give it that
    quarantine: bool
    release: str  # what `health release` requires

    @property
    def rank(self) -> int:
        return ACTION_IDS.index(self.id)


@dataclass(frozen=True)
class XidRow:
    xid: int
    mnemonic: str
    description: str
    bucket: str  # the catalogue's immediate-action bucket ("" none; "?" not in the catalogue)
    legacy: str  # the legacy CSV's action and FATAL/NONFATAL ("" no row)
    action: str
    reason: str
    decided: bool  # an explicit decision (else the bucket's mapping)
    recovery: str = ""  # the action where the GPU reports the driver's recovery action ("" the same)

    def to_json(self) -> dict[str, Any]:
        return {"xid": self.xid, "mnemonic": self.mnemonic, "description": self.description,
                "catalogue": self.bucket, "legacy": self.legacy, "action": self.action, "reason": self.reason,
                "with_recovery_action": self.recovery or self.action}  # fmt: skip


@dataclass(frozen=True)
class SignalRule:
    id: str
    signal: str
    source: str
    condition: str
    action: str
    reason: str


@dataclass(frozen=True)
class XidPolicy:
    version: str
    sources: dict[str, dict[str, str]]
    actions: dict[str, Action]
    rows: dict[int, XidRow]
    decisions: tuple[tuple[tuple[int, ...], str, str], ...]  # (xids, action, reason), as listed
    unknown: tuple[str, str]  # (action, reason) of a code the catalogue does not list
    device_plugin_ignores: frozenset[int]
    signals: tuple[SignalRule, ...]
    #: DCGM_FI_DEV_GPU_RECOVERY_ACTION value -> (NVML name, action, reason)
    recovery_actions: dict[int, tuple[str, str, str]] = field(default_factory=dict)
    recovery_decides: dict[tuple[int, ...], str] = field(default_factory=dict)  # decision xids -> action

    def recovery_action(self, value: int) -> tuple[str, str, str]:
        """(NVML name, gpustack action, why) of a recovery-action value; a value the policy does not know alerts."""
        return self.recovery_actions.get(value, (f"unknown value {value}", "alert", "not an NVML recovery action "
                                                 "this policy knows (DCGM ignores it too)"))  # fmt: skip

    def row(self, xid: int) -> XidRow:
        found = self.rows.get(xid)
        if found is not None:
            return found
        return XidRow(xid, "", "not in the catalogue", "?", "", self.unknown[0], self.unknown[1], False)

    def action_of(self, xid: int) -> Action:
        return self.actions[self.row(xid).action]

    def xids_for(self, action: str) -> list[int]:
        return [x for x, r in sorted(self.rows.items()) if r.action == action]

    def signal(self, rule_id: str) -> SignalRule:
        return next(s for s in self.signals if s.id == rule_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "sources": self.sources,
            "actions": [vars(a) for a in sorted(self.actions.values(), key=lambda a: a.rank)],
            "unknown_xid": {"action": self.unknown[0], "reason": self.unknown[1]},
            "device_plugin_ignores": sorted(self.device_plugin_ignores),
            "signals": [vars(s) for s in self.signals],
            "recovery_actions": {
                str(k): {"name": v[0], "action": v[1], "reason": v[2]} for k, v in sorted(self.recovery_actions.items())
            },
            "xids": [r.to_json() for _, r in sorted(self.rows.items())],
        }


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise GpustackError(f"{POLICY_FILE.name}: {where} must be text, not {value!r}")
    return value


def parse(data: Any) -> XidPolicy:
    """Build and check the policy from the YAML document (errors name the entry)."""
    if not isinstance(data, dict):
        raise GpustackError(f"{POLICY_FILE.name}: not a mapping")
    actions = {}
    for a in data.get("actions") or []:
        act = Action(_text(a.get("id"), "actions[].id"), _text(a.get("title"), "title"), _text(a.get("needs"), "needs"),
                     _text(a.get("how"), "how"), bool(a.get("quarantine")), _text(a.get("release"), "release"))  # fmt: skip
        actions[act.id] = act
    if tuple(actions) != ACTION_IDS:
        raise GpustackError(f"{POLICY_FILE.name}: actions must be {', '.join(ACTION_IDS)} in that order")

    def known(action: Any, where: str) -> str:
        if action not in actions:
            raise GpustackError(f"{POLICY_FILE.name}: {where}: unknown action {action!r}")
        return str(action)

    buckets = {str(b): (known(v[0], f"bucket {b}"), _text(v[1], f"bucket {b}")) for b, v in data["buckets"].items()}
    decided: dict[int, tuple[str, str]] = {}
    recovery: dict[int, str] = {}
    decides: dict[tuple[int, ...], str] = {}
    decisions = []
    for d in data.get("decisions") or []:
        codes = tuple(int(x) for x in d["xids"])
        entry = (known(d["action"], f"decision {codes}"), _text(d["reason"], f"decision {codes}"))
        for code in codes:
            if code in decided:
                raise GpustackError(f"{POLICY_FILE.name}: XID {code} is decided twice")
            decided[code] = entry
            if d.get("recovery_action") is not None:
                recovery[code] = decides[codes] = known(d["recovery_action"], f"decision {codes} recovery_action")
        decisions.append((codes, *entry))
    rows = {}
    for code, facts in data["xids"].items():
        mnemonic, description, bucket, legacy = (str(f) for f in facts)
        if bucket not in buckets:
            raise GpustackError(f"{POLICY_FILE.name}: XID {code}: bucket {bucket!r} has no action under buckets")
        action, reason = decided.get(int(code), buckets[bucket])
        rows[int(code)] = XidRow(int(code), mnemonic, description, bucket, legacy, action, reason, int(code) in decided,
                                 recovery.get(int(code), ""))  # fmt: skip
    missing = sorted(set(decided) - set(rows))
    if missing:
        raise GpustackError(f"{POLICY_FILE.name}: decisions for XIDs not listed under xids: {missing}")
    signals = tuple(SignalRule(**{k: _text(v, f"signal {s.get('id')}") for k, v in s.items()}) for s in data["signals"])
    unknown = (known(data["unknown"][0], "unknown"), _text(data["unknown"][1], "unknown"))
    recovery_actions = {}
    for value, row in (data.get("recovery_actions") or {}).items():
        name, action, why = row
        recovery_actions[int(value)] = (_text(name, f"recovery_actions {value}"),
                                        known(action, f"recovery_actions {value}"), _text(why, f"recovery_actions {value}"))  # fmt: skip
    return XidPolicy(str(data["version"]), data["sources"], actions, rows, tuple(decisions), unknown,
                     frozenset(int(x) for x in data.get("device_plugin_ignores") or []), signals, recovery_actions,
                     decides)  # fmt: skip


@cache
def xid_policy() -> XidPolicy:
    """The shipped policy (read once)."""
    return parse(yaml.safe_load(POLICY_FILE.read_text(encoding="utf-8")))


def ranges(codes: Iterable[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``1-3, 5``."""
    out: list[str] = []
    run: list[int] = []
    for code in sorted(set(codes)):
        if run and code != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(code)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def grouped(policy: XidPolicy) -> list[tuple[str, str, str, str]]:
    """The table as people read it: ``(XIDs, action, catalogue buckets, why)``, one row per decision and per
    bucket of the undecided XIDs, most severe action first."""
    rows: list[tuple[int, int, str, str, str, str]] = []
    for codes, action, reason in policy.decisions:
        buckets = ", ".join(dict.fromkeys(policy.rows[c].bucket or "(none)" for c in codes))
        shown = action
        if codes in policy.recovery_decides:
            shown = f"{action} ({policy.recovery_decides[codes]} where the GPU reports the driver's recovery action)"
        rows.append((-policy.actions[action].rank, min(codes), ranges(codes), shown, buckets, reason))
    by_bucket: dict[str, list[int]] = {}
    for code, row in sorted(policy.rows.items()):
        if not row.decided:
            by_bucket.setdefault(row.bucket, []).append(code)
    for bucket, listed in by_bucket.items():
        row = policy.rows[listed[0]]
        rows.append(
            (-policy.actions[row.action].rank, listed[0], ranges(listed), row.action, bucket or "(none)", row.reason)
        )
    rows.append(
        (-policy.actions[policy.unknown[0]].rank, 10**6, "any other", policy.unknown[0], "-", policy.unknown[1])
    )
    return [r[2:] for r in sorted(rows)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(policy: XidPolicy) -> str:
    """The policy as docs/operations.md shows it (scripts/gen_health_policy.py writes it there)."""
    lines = ["| action | what the node needs | how | release needs |", "|---|---|---|---|"]
    for a in sorted(policy.actions.values(), key=lambda a: a.rank):
        lines.append(f"| `{a.id}`: {a.title} | {_cell(a.needs)} | {_cell(a.how)} | {_cell(a.release) or '-'} |")
    lines += ["", "| XID | action | catalogue bucket | why |", "|---|---|---|---|"]
    for xids, action, buckets, reason in grouped(policy):
        head, _, rest = action.partition(" ")
        lines.append(f"| {xids} | `{head}`{' ' + rest if rest else ''} | {_cell(buckets)} | {_cell(reason)} |")
    lines += ["", "| recovery action | name | action | why |", "|---|---|---|---|"]
    for value, (name, action, why) in sorted(policy.recovery_actions.items()):
        lines.append(f"| {value} | {name} | `{action}` | {_cell(why)} |")
    lines += ["", "| rule | signal | source | condition | action | why |", "|---|---|---|---|---|---|"]
    for s in policy.signals:
        lines.append(
            f"| `{s.id}` | {_cell(s.signal)} | {_cell(s.source)} | {_cell(s.condition)} | {_cell(s.action)} | {_cell(s.reason)} |"
        )
    return "\n".join(lines) + "\n"
