"""Quarantine and release patches, and the release rules (pure)."""

from __future__ import annotations

import json

import pytest

from gpustack.constants import (
    ANN_CORDONED_BY_GPUSTACK,
    ANN_DIAG_RESULT,
    ANN_QUARANTINE_BOOT_ID,
    ANN_QUARANTINE_POLICY,
    ANN_QUARANTINE_REASON,
    ANN_QUARANTINED_AT,
    ANN_QUARANTINED_BY,
    ANN_RELEASED_AT,
    ANN_RELEASED_LAST_XIDS,
    QUARANTINE_ACTION_LABEL,
    QUARANTINE_LABEL,
)
from gpustack.health.actions import quarantine_patch, release_patch, release_problems
from gpustack.health.policy import Signal

SIG = Signal("xid-79", "3", "GPU-8c4f", "XID 79 (GPU has fallen off the bus) x1", "reboot")
OTHER_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(*, unschedulable: bool = False, labels: dict | None = None, annotations: dict | None = None,
         taints: list | None = None, boot: str = "boot-1") -> dict:  # fmt: skip
    spec: dict = {"taints": list(taints or [OTHER_TAINT])}
    if unschedulable:
        spec["unschedulable"] = True
    return {"metadata": {"name": "gpu-1", "resourceVersion": "42", "labels": labels or {}, "annotations": annotations or {}},
            "spec": spec, "status": {"nodeInfo": {"bootID": boot}}}  # fmt: skip


def test_quarantine_patch_cordons_taints_and_says_who_why_when() -> None:
    p = quarantine_patch(node(), [SIG], by="ops@host", at="2026-11-18T09:14:02Z", action="reboot")
    assert p["metadata"]["resourceVersion"] == "42"  # the precondition: a concurrent change is a 409
    assert p["spec"]["unschedulable"] is True
    assert p["spec"]["taints"] == [
        OTHER_TAINT,
        {"key": "gpustack.io/gpu-health", "value": "fatal", "effect": "NoSchedule"},
    ]
    ann = p["metadata"]["annotations"]
    assert (ann[ANN_QUARANTINED_BY], ann[ANN_QUARANTINED_AT], ann[ANN_QUARANTINE_POLICY]) == (
        "ops@host",
        "2026-11-18T09:14:02Z",
        "3",
    )
    assert json.loads(ann[ANN_QUARANTINE_REASON]) == [{"rule": "xid-79", "gpu": "3", "uuid": "GPU-8c4f", "action": "reboot",
                                                       "detail": "XID 79 (GPU has fallen off the bus) x1"}]  # fmt: skip
    assert ann[ANN_CORDONED_BY_GPUSTACK] == "true" and ann[ANN_QUARANTINE_BOOT_ID] == "boot-1"
    assert p["metadata"]["labels"] == {QUARANTINE_LABEL: "true", QUARANTINE_ACTION_LABEL: "reboot"}


def test_every_quarantine_is_kept_in_the_nodes_history_through_a_release() -> None:
    from gpustack.constants import ANN_QUARANTINE_HISTORY, ANN_QUARANTINED_AT
    from gpustack.health.actions import HISTORY_MAX, history, release_patch
    from gpustack.health.breaker import RETENTION

    t = "2026-11-18T09:14:02Z"
    at = 1_794_993_242.0  # t in epoch seconds
    old = [{"at": at - RETENTION - 1, "window": 3600, "limit": 2}, {"at": at - 600, "window": 60, "limit": 1}]
    n = node()
    n["metadata"]["annotations"] = {ANN_QUARANTINE_HISTORY: json.dumps(old)}
    p = quarantine_patch(n, [SIG], by="ops", at=t, window=3600, limit=2)
    kept = json.loads(p["metadata"]["annotations"][ANN_QUARANTINE_HISTORY])
    assert kept == [old[1], {"at": at, "window": 3600, "limit": 2}]  # the one past RETENTION is pruned
    n["metadata"]["annotations"].update(p["metadata"]["annotations"])
    assert [(e.at, e.window, e.limit) for e in history(n)] == [(at - 600, 60, 1), (at, 3600, 2)]
    released = release_patch(n, by="ops", at=t)["metadata"]["annotations"]
    assert ANN_QUARANTINE_HISTORY not in released and released[ANN_QUARANTINED_AT] is None  # the history stays
    # a node quarantined by an older gpustack: its quarantined-at counts; at most HISTORY_MAX are kept
    legacy = node()
    legacy["metadata"]["annotations"] = {ANN_QUARANTINED_AT: t}
    assert [e.at for e in history(legacy)] == [at]
    many = node()
    many["metadata"]["annotations"] = {ANN_QUARANTINE_HISTORY: json.dumps([{"at": at - i} for i in range(100, 0, -1)])}
    p = quarantine_patch(many, [SIG], by="ops", at=t)
    assert len(json.loads(p["metadata"]["annotations"][ANN_QUARANTINE_HISTORY])) == HISTORY_MAX


def test_a_foreign_cordon_is_recorded_as_foreign() -> None:
    p = quarantine_patch(node(unschedulable=True), [SIG], by="x", at="t")
    assert "unschedulable" not in p["spec"] and p["metadata"]["annotations"][ANN_CORDONED_BY_GPUSTACK] == "false"


def quarantined(
    *, ours: bool = True, diag: dict | None = None, action: str | None = None, boot: str = "boot-1"
) -> dict:
    ann = {ANN_QUARANTINED_AT: "2026-11-18T09:00:00Z", ANN_CORDONED_BY_GPUSTACK: "true" if ours else "false",
           ANN_QUARANTINED_BY: "x", ANN_QUARANTINE_REASON: "[]", ANN_QUARANTINE_POLICY: "1",
           ANN_QUARANTINE_BOOT_ID: "boot-1"}  # fmt: skip
    if diag is not None:
        ann[ANN_DIAG_RESULT] = json.dumps(diag)
    taint = {"key": "gpustack.io/gpu-health", "value": "fatal", "effect": "NoSchedule"}
    labels = {QUARANTINE_LABEL: "true", **({QUARANTINE_ACTION_LABEL: action} if action else {})}
    return node(unschedulable=True, labels=labels, annotations=ann, taints=[OTHER_TAINT, taint], boot=boot)


def test_release_patch_uncordons_only_its_own_cordon() -> None:
    p = release_patch(quarantined(ours=True), by="ops", at="2026-11-18T10:00:00Z", last_xids={"GPU-8c4f": 48})
    assert p["spec"] == {"taints": [OTHER_TAINT], "unschedulable": None}
    assert p["metadata"]["labels"] == {QUARANTINE_LABEL: None, QUARANTINE_ACTION_LABEL: None}
    ann = p["metadata"]["annotations"]
    assert ann[ANN_QUARANTINED_AT] is None and ann[ANN_QUARANTINE_BOOT_ID] is None and ann[ANN_RELEASED_AT]
    assert json.loads(ann[ANN_RELEASED_LAST_XIDS]) == {"GPU-8c4f": 48}
    foreign = release_patch(quarantined(ours=False), by="ops", at="t")
    assert "unschedulable" not in foreign["spec"]


def test_release_rules() -> None:
    assert "not quarantined by gpustack" in release_problems(node(unschedulable=True), [])[0]
    assert "kubectl uncordon" in release_problems(node(unschedulable=True), [])[0]
    assert "no gpustack diag result" in release_problems(quarantined(), [])[0]
    before = {"level": 2, "result": "pass", "at": "2026-11-18T08:00:00Z"}
    assert "older than the quarantine" in release_problems(quarantined(diag=before), [])[0]
    failed = {"level": 3, "result": "fail", "at": "2026-11-18T09:30:00Z"}
    assert "failed" in release_problems(quarantined(diag=failed), [])[0]
    level1 = {"level": 1, "result": "pass", "at": "2026-11-18T09:30:00Z"}
    assert "needs level 2" in release_problems(quarantined(diag=level1), [])[0]
    passed = {"level": 2, "result": "pass", "at": "2026-11-18T09:30:00Z"}
    assert release_problems(quarantined(diag=passed), []) == []
    still = Signal("row-remap-failure", "3", "u", "DCGM_FI_DEV_ROW_REMAP_FAILURE = 1")
    assert "still active: row-remap-failure on GPU 3" in release_problems(quarantined(diag=passed), [still])[0]


@pytest.mark.parametrize(
    ("action", "boot", "problem"),
    [
        (None, "boot-1", None),  # a policy-1 quarantine (no action label): as reset
        ("reset", "boot-1", None),
        ("reboot", "boot-1", "needs `reboot` (a node reboot) and has not restarted since the quarantine"),
        ("reboot", "boot-2", None),
        ("rma", "boot-1", "replace the GPU"),
        ("rma", "boot-2", None),
        ("reboot", "", "cannot tell whether it restarted"),
    ],
)
def test_release_requires_what_the_action_demands(action: str | None, boot: str, problem: str | None) -> None:
    passed = {"level": 2, "result": "pass", "at": "2026-11-18T09:30:00Z"}
    problems = release_problems(quarantined(diag=passed, action=action, boot=boot), [])
    assert (problems == []) if problem is None else (problem in problems[0] and len(problems) == 1)
    # a passing diag is needed whatever the action
    assert "no gpustack diag result" in release_problems(quarantined(action=action, boot="boot-9"), [])[-1]
