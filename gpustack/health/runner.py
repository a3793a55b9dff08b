"""``gpustack health``: evaluate the policy, and with ``--apply`` quarantine through the circuit breaker;
``gpustack health release NODE``. The I/O around the pure policy, breaker and patches.

Order of an ``--apply`` run, so that an interruption at any point leaves a state the next run finishes:
collect -> evaluate -> reserve the quarantines in the breaker's ledger (one resourceVersion-checked write)
-> patch each approved node (one resourceVersion-checked merge patch each; a 409 re-reads the node and
decides again). A run stopped after the ledger write is finished by the next run (the node is already in
the ledger, so no budget is spent twice); one stopped before it changed nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpustack.checks.model import Finding, Status
from gpustack.console import Console
from gpustack.constants import (
    ANN_QUARANTINE_REASON,
    ANN_QUARANTINED_AT,
    ANN_QUARANTINED_BY,
    BREAKER_CONFIGMAP,
    HEALTH_FIELD_MANAGER,
    SYSTEM_NAMESPACE,
)
from gpustack.diag.runner import now_rfc3339
from gpustack.errors import GpustackError, UsageError
from gpustack.health import actions
from gpustack.health.breaker import LEDGER_KEY, Candidate, Decision, Ledger, decide
from gpustack.health.collect import collect
from gpustack.health.policy import Settings, Snapshot, Verdict, evaluate, state_signals
from gpustack.runners.kube import Kube

Obj = dict[str, Any]
LAYER = "quarantine"
SOURCES_ID = "Q00-signal-sources"
NODE_ID = "Q01-gpu-health"
BREAKER_ID = "Q02-circuit-breaker"
CHECK_IDS = {
    SOURCES_ID: "the Kubernetes API and Prometheus answered the policy's queries",
    NODE_ID: "a GPU node has no fatal signal (else: quarantined, or why not)",
    BREAKER_ID: "quarantines in the breaker's window stay within its limit",
}
MERGE = "application/merge-patch+json"
ATTEMPTS = 5


@dataclass(frozen=True)
class HealthOptions:
    settings: Settings = field(default_factory=Settings)
    apply: bool = False
    nodes: tuple[str, ...] = ()  # only these nodes (default: every GPU node)
    prometheus_url: str | None = None
    by: str = "gpustack health"


def _api(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


def _node_path(name: str) -> str:
    return f"/api/v1/nodes/{name}"


CM_PATH = f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/configmaps"


def read_ledger(kube: Kube) -> tuple[Ledger, str | None]:
    """The breaker's ledger and its resourceVersion (None: no ConfigMap yet)."""
    try:
        cm = kube.request("GET", f"{CM_PATH}/{BREAKER_CONFIGMAP}")
    except ApiException as exc:
        if exc.status == 404:
            return Ledger(), None
        raise GpustackError(
            f"cannot read the circuit breaker's ledger ({SYSTEM_NAMESPACE}/{BREAKER_CONFIGMAP}): {_api(exc)}"
        ) from None
    return Ledger.from_text((cm.get("data") or {}).get(LEDGER_KEY)), str(
        (cm.get("metadata") or {}).get("resourceVersion") or ""
    )


def write_ledger(kube: Kube, ledger: Ledger, resource_version: str | None) -> bool:
    """Compare-and-swap: False when someone else wrote first (re-read and decide again)."""
    try:
        if resource_version is None:
            body = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": BREAKER_CONFIGMAP, "namespace": SYSTEM_NAMESPACE,
                                 "labels": {"app.kubernetes.io/part-of": "gpustack"}},
                    "data": {LEDGER_KEY: ledger.to_text()}}  # fmt: skip
            try:
                kube.request("POST", CM_PATH, body=body, query={"fieldManager": HEALTH_FIELD_MANAGER})
            except ApiException as exc:
                if exc.status != 404:  # 404: the namespace is missing (health --apply before `up` made it)
                    raise
                kube.apply_one({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE,
                                "labels": {"app.kubernetes.io/part-of": "gpustack"}}})  # fmt: skip
                kube.request("POST", CM_PATH, body=body, query={"fieldManager": HEALTH_FIELD_MANAGER})
        else:
            patch = {"metadata": {"resourceVersion": resource_version}, "data": {LEDGER_KEY: ledger.to_text()}}
            kube.request("PATCH", f"{CM_PATH}/{BREAKER_CONFIGMAP}", body=patch,
                         query={"fieldManager": HEALTH_FIELD_MANAGER}, content_type=MERGE)  # fmt: skip
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise GpustackError(f"cannot write the circuit breaker's ledger: {_api(exc)}") from None
    return True


def reserve(
    kube: Kube, candidates: list[Candidate], gpu_nodes: int, settings: Settings, now: float, by: str
) -> Decision:
    """Decide and record the decision atomically (read, decide, conditional write; again on a conflict)."""
    for _ in range(ATTEMPTS):
        ledger, rv = read_ledger(kube)
        decision = decide(ledger, candidates, gpu_nodes, settings, now, by)
        nothing_new = len(decision.ledger.entries) == len(ledger.recent(now, settings.window))
        if nothing_new or write_ledger(kube, decision.ledger, rv):
            return decision
    raise GpustackError(f"the circuit breaker's ledger kept changing under this run ({ATTEMPTS} attempts): try again")


@dataclass
class NodeResult:
    verdict: Verdict
    action: str = ""  # quarantined | already | held | failed | would | would-hold | released
    detail: str = ""


def quarantine_node(kube: Kube, name: str, first: Obj, verdict: Verdict, *, by: str, at: str) -> tuple[str, str]:
    """Cordon + taint + annotate one node in one conditional patch. (action, detail)."""
    node = first
    for _ in range(ATTEMPTS):
        if actions.is_quarantined(node):
            return "already", "quarantined meanwhile by another evaluator"
        patch = actions.quarantine_patch(node, list(verdict.signals), by=by, at=at)
        try:
            kube.request("PATCH", _node_path(name), body=patch, query={"fieldManager": HEALTH_FIELD_MANAGER},
                         content_type=MERGE)  # fmt: skip
            cordon = "cordoned" if "unschedulable" in patch["spec"] else "already cordoned (not by gpustack)"
            return "quarantined", f"{cordon}, tainted {actions.taint_text()}"
        except ApiException as exc:
            if exc.status != 409:
                return "failed", f"PATCH node {name} failed, the node is unchanged: {_api(exc)}"
            try:
                node = kube.request("GET", _node_path(name))
            except ApiException as exc2:
                return "failed", f"re-reading node {name} failed, the node is unchanged: {_api(exc2)}"
    return "failed", f"node {name} kept changing ({ATTEMPTS} attempts); it is unchanged"


def _findings(
    snap: Snapshot, results: list[NodeResult], decision: Decision | None, settings: Settings, apply: bool
) -> list[Finding]:
    out: list[Finding] = []
    if snap.errors:
        out.append(Finding(SOURCES_ID, LAYER, "fail", "Prometheus could not be read: the XID and row-remap rules were not evaluated",
                           evidence="\n".join(snap.errors.values()),
                           fix="gpustack doctor --layer monitoring (is kube-prometheus-stack running?)"))  # fmt: skip
    else:
        out.append(
            Finding(SOURCES_ID, LAYER, "pass", f"Kubernetes API and Prometheus read ({len(snap.nodes)} GPU node(s))")
        )
    for r in results:
        v, name = r.verdict, r.verdict.node
        signals = "; ".join(s.describe() for s in v.signals)
        notes = "\n".join(v.notes)
        # the signals are in the summary where it names them; elsewhere they are the evidence
        evidence = "\n".join(x for x in (signals.replace("; ", "\n") if r.action == "already" else "", notes) if x)
        release = f"gpustack diag --node {name} --level 2, then gpustack health release {name}"
        if r.action == "already":
            out.append(
                Finding(NODE_ID, LAYER, "warn", f"quarantined {r.detail}", host=name, evidence=evidence, fix=release)
            )
        elif r.action == "quarantined":
            out.append(Finding(NODE_ID, LAYER, "warn", f"quarantined now ({r.detail}): {signals}", host=name,
                               evidence=evidence, fix=f"drain it when convenient (kubectl drain {name} --ignore-daemonsets "
                               f"--delete-emptydir-data), fix the GPU, then {release}"))  # fmt: skip
        elif r.action == "would":
            out.append(Finding(NODE_ID, LAYER, "fail", f"would cordon and taint {actions.taint_text()}: {signals}", host=name,
                               evidence=evidence, fix="gpustack health --apply"))  # fmt: skip
        elif r.action in ("held", "would-hold"):
            verb = "not quarantined" if r.action == "held" else "would not be quarantined"
            out.append(Finding(NODE_ID, LAYER, "fail", f"{verb}: the circuit breaker is open ({r.detail}): {signals}",
                               host=name, evidence=evidence,
                               fix=f"kubectl cordon {name} by hand if you are sure, or raise remediation.max_nodes_per_window"))  # fmt: skip
        elif r.action == "failed":
            out.append(Finding(NODE_ID, LAYER, "fail", f"quarantine failed: {r.detail}", host=name, evidence=evidence,
                               fix="gpustack health --apply again (it finishes what this run started)"))  # fmt: skip
        else:
            out.append(Finding(NODE_ID, LAYER, "pass", "no fatal GPU signal", host=name, evidence=notes))
    if decision is not None:
        status: Status = "warn" if decision.held else "pass"
        what = "used" if apply else "would be used"
        out.append(Finding(BREAKER_ID, LAYER, status,
                           f"{decision.used} of {decision.limit} quarantine(s) per {settings.window // 60} min {what}"
                           + (f"; held: {', '.join(decision.held)}" if decision.held else ""),
                           evidence=f"limit = min({settings.max_nodes} nodes, {settings.max_percent:g}% of {len(snap.nodes)} GPU nodes, rounded up)"))  # fmt: skip
    return out


def run_health(kube: Kube, opts: HealthOptions, console: Console, *, now: float | None = None) -> list[Finding]:
    """Evaluate (and with ``opts.apply`` quarantine); every finding of the run."""
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
            meta = (objs[v.node].get("metadata") or {}).get("annotations") or {}
            reasons = "; ".join(f"{s.get('rule')} GPU {s.get('gpu')}" for s in _reasons(meta))
            r.action, r.detail = "already", (f"since {meta.get(ANN_QUARANTINED_AT, '?')} by {meta.get(ANN_QUARANTINED_BY, '?')}"
                                             + (f" ({reasons})" if reasons else ""))  # fmt: skip
        results.append(r)
    candidates = [Candidate(r.verdict.node, tuple(dict.fromkeys(s.rule for s in r.verdict.signals)))
                  for r in results if r.verdict.fatal and not r.action]  # fmt: skip
    decision = None
    if candidates:
        if opts.apply:
            decision = reserve(kube, candidates, len(snap.nodes), opts.settings, now, opts.by)
        else:
            try:
                ledger, _ = read_ledger(kube)
            except GpustackError:
                ledger = Ledger()
            decision = decide(ledger, candidates, len(snap.nodes), opts.settings, now, opts.by)
        by_node = {r.verdict.node: r for r in results}
        at = now_rfc3339(now)
        for name in decision.held:
            by_node[name].action = "held" if opts.apply else "would-hold"
            by_node[name].detail = f"{decision.limit} per {opts.settings.window // 60} min, all used"
        for name in decision.approved:
            r = by_node[name]
            if not opts.apply:
                r.action = "would"
                continue
            r.action, r.detail = quarantine_node(kube, name, objs[name], r.verdict, by=opts.by, at=at)
            console.info(f"health: {name}: {r.action}: {r.detail}")
    return _findings(snap, results, decision, opts.settings, opts.apply)


def _reasons(annotations: Obj) -> list[Obj]:
    try:
        data = json.loads(annotations.get(ANN_QUARANTINE_REASON) or "[]")
    except ValueError:
        return []
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


def release_node(kube: Kube, name: str, opts: HealthOptions, console: Console, *,
                 confirm: Callable[[str], bool], now: float | None = None) -> list[str]:  # fmt: skip
    """Release ``name`` when allowed; returns what was done. Raises :class:`GpustackError` when refused."""
    now = time.time() if now is None else now
    try:
        node = kube.request("GET", _node_path(name))
    except ApiException as exc:
        if exc.status == 404:
            raise UsageError(f"no node {name!r}") from None
        raise
    snap, _ = collect(kube, opts.settings, prometheus_url=opts.prometheus_url, now=now, nodes=[node])
    verdict = evaluate(snap)[0] if snap.nodes else None
    still = state_signals(verdict) if verdict else []
    problems = actions.release_problems(node, still)
    if problems:
        raise GpustackError(f"release of {name} refused: " + "; ".join(problems),
                            hint="gpustack health shows why each node is quarantined")  # fmt: skip
    if snap.errors:
        console.warn(
            f"Prometheus could not be read, row-remap failures were not re-checked: {'; '.join(snap.errors.values())}"
        )
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    uncordon = annotations.get("gpustack.io/cordoned-by-gpustack") == "true"
    plan = [f"remove the taint {actions.taint_text()} and the quarantine label/annotations"]
    plan.append(
        "uncordon it (gpustack cordoned it)" if uncordon else "leave it cordoned (the cordon is not gpustack's)"
    )
    if not confirm(f"release {name}: " + "; ".join(plan) + "?"):
        raise GpustackError(f"release of {name} not confirmed: nothing changed", hint="--yes to release without asking")
    for _ in range(ATTEMPTS):
        patch = actions.release_patch(node, by=opts.by, at=now_rfc3339(now))
        try:
            kube.request("PATCH", _node_path(name), body=patch, query={"fieldManager": HEALTH_FIELD_MANAGER},
                         content_type=MERGE)  # fmt: skip
            console.info(f"health: {name} released: " + "; ".join(plan))
            return plan
        except ApiException as exc:
            if exc.status != 409:
                raise GpustackError(f"releasing {name} failed, the node is unchanged: {_api(exc)}") from None
            node = kube.request("GET", _node_path(name))
            if not actions.is_quarantined(node):
                return ["already released by someone else"]
    raise GpustackError(f"node {name} kept changing ({ATTEMPTS} attempts); it is unchanged, try again")
