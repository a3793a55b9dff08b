"""``gpustack health``: evaluate the policy, and with ``--apply`` quarantine through the circuit breaker;
``gpustack health release NODE``. The I/O around the pure policy, breaker and patches.

Order of an ``--apply`` run, so that an interruption at any point leaves a state the next run finishes:
collect -> evaluate -> reserve the quarantines in the breaker's ledger (one resourceVersion-checked write,
timed by the API server's clock) -> patch each approved node (one resourceVersion-checked merge patch each;
a 409 re-reads the node and decides again). A run stopped after the ledger write is finished by the next
run (the node is already in the ledger, so no budget is spent twice); one stopped before it changed nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpustack.checks.model import Finding
from gpustack.console import Console
from gpustack.constants import (
    ANN_QUARANTINE_REASON,
    ANN_QUARANTINED_AT,
    ANN_QUARANTINED_BY,
    HEALTH_FIELD_MANAGER,
)
from gpustack.diag.runner import now_rfc3339
from gpustack.errors import GpustackError, UsageError
from gpustack.health import actions
from gpustack.health.breaker import Candidate, Decision, held_unreadable
from gpustack.health.collect import collect
from gpustack.health.findings import CHECK_IDS, NodeResult, findings
from gpustack.health.ledger import (
    ATTEMPTS,
    MERGE,
    Context,
    api_message,
    preview,
    read_ledger,
    reserve,
    server_time,
)
from gpustack.health.policy import Settings, Verdict, evaluate, state_signals
from gpustack.runners.kube import Kube

Obj = dict[str, Any]
__all__ = ["CHECK_IDS", "HealthOptions", "release_node", "run_health"]


@dataclass(frozen=True)
class HealthOptions:
    settings: Settings = field(default_factory=Settings)
    apply: bool = False
    nodes: tuple[str, ...] = ()  # only these nodes (default: every GPU node)
    prometheus_url: str | None = None
    by: str = "gpustack health"


def _node_path(name: str) -> str:
    return f"/api/v1/nodes/{name}"


def quarantine_node(kube: Kube, name: str, first: Obj, verdict: Verdict, *, by: str, at: str,
                    window: int = 0, limit: int = -1) -> tuple[str, str]:  # fmt: skip
    """Cordon + taint + label + annotate one node in one conditional patch. (action, detail)."""
    node = first
    what = verdict.action.id if verdict.action else actions.LEGACY_ACTION
    for _ in range(ATTEMPTS):
        if actions.is_quarantined(node):
            return "already", "quarantined meanwhile by another evaluator"
        patch = actions.quarantine_patch(node, list(verdict.quarantine_signals), by=by, at=at, action=what,
                                         window=window, limit=limit)  # fmt: skip
        try:
            kube.request("PATCH", _node_path(name), body=patch, query={"fieldManager": HEALTH_FIELD_MANAGER},
                         content_type=MERGE)  # fmt: skip
            cordon = "cordoned" if "unschedulable" in patch["spec"] else "already cordoned (not by gpustack)"
            return "quarantined", f"{cordon}, tainted {actions.taint_text()}, labelled {what}"
        except ApiException as exc:
            if exc.status != 409:
                return "failed", f"PATCH node {name} failed, the node is unchanged: {api_message(exc)}"
            try:
                node = kube.request("GET", _node_path(name))
            except ApiException as exc2:
                return "failed", f"re-reading node {name} failed, the node is unchanged: {api_message(exc2)}"
    return "failed", f"node {name} kept changing ({ATTEMPTS} attempts); it is unchanged"


def _reasons(annotations: Obj) -> list[Obj]:
    try:
        data = json.loads(annotations.get(ANN_QUARANTINE_REASON) or "[]")
    except ValueError:
        return []
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


def _already(r: NodeResult, obj: Obj) -> None:
    meta = (obj.get("metadata") or {}).get("annotations") or {}
    reasons = "; ".join(f"{s.get('rule')} GPU {s.get('gpu')}" for s in _reasons(meta))
    r.action, r.recorded = "already", actions.quarantine_action(obj)
    r.detail = (f"since {meta.get(ANN_QUARANTINED_AT, '?')} by {meta.get(ANN_QUARANTINED_BY, '?')}"
                + (f" ({reasons})" if reasons else ""))  # fmt: skip


def _ledger_check(kube: Kube, gpu_nodes: int, settings: Settings) -> Decision | None:
    """With nothing to quarantine: an unreadable ledger is still reported (it would hold the next quarantine),
    a readable one says nothing. A failed read is left to the run that needs the ledger."""
    try:
        read = read_ledger(kube)
    except GpustackError:
        return None
    return held_unreadable([], gpu_nodes, settings, read.problem) if read.ledger is None else None


def run_health(kube: Kube, opts: HealthOptions, console: Console, *, now: float | None = None) -> list[Finding]:
    """Evaluate (and with ``opts.apply`` quarantine); every finding of the run. ``now``: the evaluator's clock
    for the signal windows; the breaker and the annotations use the API server's."""
    now = time.time() if now is None else now
    snap, objs = collect(kube, opts.settings, prometheus_url=opts.prometheus_url, now=now)
    unknown = [n for n in opts.nodes if n not in objs]
    if unknown:
        raise UsageError(
            f"--node {', '.join(unknown)}: not a GPU node (GPU nodes: {', '.join(sorted(objs)) or 'none'})"
        )
    verdicts = [v for v in evaluate(snap) if not opts.nodes or v.node in opts.nodes]
    results = []
    for v in verdicts:
        r = NodeResult(v)
        if v.state.quarantined:
            _already(r, objs[v.node])
        results.append(r)
    candidates = [Candidate(r.verdict.node, tuple(dict.fromkeys(s.rule for s in r.verdict.quarantine_signals)),
                            r.verdict.state.released_at) for r in results if r.verdict.quarantine and not r.action]  # fmt: skip
    ctx = Context(local=now, stamps=tuple(e for o in objs.values() for e in actions.history(o)))
    decision: Decision | None = None
    gpu_nodes = len(snap.nodes)
    if opts.apply:  # every --apply run records its limit, with or without a candidate
        decision = reserve(kube, candidates, gpu_nodes, opts.settings, opts.by, ctx)
    elif not candidates:
        decision = _ledger_check(kube, gpu_nodes, opts.settings)
    else:
        decision = preview(kube, candidates, gpu_nodes, opts.settings, opts.by, ctx)
    if candidates:
        assert decision is not None
        by_node = {r.verdict.node: r for r in results}
        for name in decision.held:
            by_node[name].action = "held" if opts.apply else "would-hold"
            by_node[name].detail = decision.why_held
        at = now_rfc3339(decision.at if decision.at is not None else now)
        for name in decision.approved:
            r = by_node[name]
            if not opts.apply:
                r.action = "would"
                continue
            r.action, r.detail = quarantine_node(kube, name, objs[name], r.verdict, by=opts.by, at=at,
                                                 window=opts.settings.window, limit=decision.limit)  # fmt: skip
            console.info(f"health: {name}: {r.action}: {r.detail}")
    return findings(snap, results, decision, opts.settings, opts.apply)


def release_node(kube: Kube, name: str, opts: HealthOptions, console: Console, *,
                 confirm: Callable[[str], bool], now: float | None = None) -> list[str]:  # fmt: skip
    """Release ``name`` when what its quarantine action demands is done; returns what was done. Raises
    :class:`GpustackError` when refused."""
    now = time.time() if now is None else now
    try:
        node, headers = kube.request_with_headers("GET", _node_path(name))
    except ApiException as exc:
        if exc.status == 404:
            raise UsageError(f"no node {name!r}") from None
        raise
    server_now = server_time(headers)
    at = server_now or now
    snap, _ = collect(kube, opts.settings, prometheus_url=opts.prometheus_url, now=now, nodes=[node],
                      server_now=server_now)  # fmt: skip
    verdict = evaluate(snap)[0] if snap.nodes else None
    still = state_signals(verdict) if verdict else []
    problems = actions.release_problems(node, still)
    if problems:
        raise GpustackError(f"release of {name} refused: " + "; ".join(problems),
                            hint="gpustack health shows why each node is quarantined")  # fmt: skip
    last_xids = None
    if snap.errors:
        console.warn(
            f"Prometheus could not be read, row-remap failures were not re-checked: {'; '.join(snap.errors.values())}"
        )
    else:
        last_xids = {s.uuid: int(s.value) for s in snap.xid_last if s.node == name and s.uuid and s.value > 0}
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    uncordon = annotations.get("gpustack.io/cordoned-by-gpustack") == "true"
    plan = [f"remove the taint {actions.taint_text()} and the quarantine labels/annotations"]
    plan.append(
        "uncordon it (gpustack cordoned it)" if uncordon else "leave it cordoned (the cordon is not gpustack's)"
    )
    if not confirm(f"release {name}: " + "; ".join(plan) + "?"):
        raise GpustackError(f"release of {name} not confirmed: nothing changed", hint="--yes to release without asking")
    for _ in range(ATTEMPTS):
        patch = actions.release_patch(node, by=opts.by, at=now_rfc3339(at), last_xids=last_xids)
        try:
            kube.request("PATCH", _node_path(name), body=patch, query={"fieldManager": HEALTH_FIELD_MANAGER},
                         content_type=MERGE)  # fmt: skip
            console.info(f"health: {name} released: " + "; ".join(plan))
            return plan
        except ApiException as exc:
            if exc.status != 409:
                raise GpustackError(f"releasing {name} failed, the node is unchanged: {api_message(exc)}") from None
            node = kube.request("GET", _node_path(name))
            if not actions.is_quarantined(node):
                return ["already released by someone else"]
    raise GpustackError(f"node {name} kept changing ({ATTEMPTS} attempts); it is unchanged, try again")
