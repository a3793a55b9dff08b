"""The findings of a ``gpustack health`` run (layer ``quarantine``): the signal sources (per node where one is
missing), one verdict per GPU node saying what it needs, and the circuit breaker. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from gpustack.checks.model import Finding, Status
from gpustack.constants import GPU_NAMESPACE
from gpustack.health import actions
from gpustack.health.breaker import MARGIN, MAX_SKEW, Decision
from gpustack.health.ledger import REPAIR
from gpustack.health.policy import SOURCE_LAST, SOURCE_NONE, SOURCE_UNKNOWN, Settings, Snapshot, Verdict
from gpustack.health.xids import xid_policy

LAYER = "quarantine"
SOURCES_ID = "Q00-signal-sources"
NODE_ID = "Q01-gpu-health"
BREAKER_ID = "Q02-circuit-breaker"
CHECK_IDS = {
    SOURCES_ID: "the Kubernetes API and Prometheus answered the policy's queries, and every GPU node has an XID source",
    NODE_ID: "what a GPU node needs (nothing, an alert, or a quarantine: reset, reboot, rma) and what was done",
    BREAKER_ID: "quarantines in the breaker's window stay within its limits, and its ledger is readable",
}
CLOCK_FIX = (
    "compare the clocks (date -u on this machine and on each control-plane host; chronyc tracking or "
    "timedatectl timesync-status) and fix the one that is off; a ledger time in the future ages out by itself, "
    "or repair the ledger: " + REPAIR
)
COUNTS_FIX = (
    "enable DCGM_EXP_XID_ERRORS_COUNT in dcgm-exporter's counters list (gpustack's values/dcgm-counters.csv "
    "does: gpustack up renders it; both lists dcgm-exporter ships leave it off; exporters before 3.4 lack it)"
)


@dataclass
class NodeResult:
    verdict: Verdict
    action: str = ""  # quarantined | already | held | failed | would | would-hold | released
    detail: str = ""
    recorded: str = ""  # the action an existing quarantine was made for (its label)


def _needs(v: Verdict) -> str:
    return f"needs {v.action.needs}" if v.action else ""


def _alert_fix(v: Verdict) -> str:
    """What to do about alert-only signals, by kind."""
    fixes = []
    rules = {s.rule for s in v.alerts}
    if "gpu-allocatable-below-capacity" in rules:
        fixes.append(f"check the GPU (on {v.node}: nvidia-smi -q -d ECC,ROW_REMAPPER), then restart the device plugin "
                     f"there so it offers the GPU again: kubectl -n {GPU_NAMESPACE} delete pod -l "
                     f"app=nvidia-device-plugin-daemonset --field-selector spec.nodeName={v.node}")  # fmt: skip
    if rules & {"row-remap-pending", "uncorrectable-remapped-rows-growth"}:
        fixes.append("when the node is drained, reset the GPU (nvidia-smi -r -i GPU) so the pending row remap applies "
                     "(gpustack diag fails until then); several remaps a week: plan an RMA")  # fmt: skip
    if any(r.startswith("xid-") for r in rules):
        fixes.append("restart the application that hit the XID; reset the GPU when convenient after XID 94 "
                     "(gpustack health policy: each XID's action and why)")  # fmt: skip
    return "; ".join(fixes)


def _sources(snap: Snapshot, verdicts: list[Verdict]) -> list[Finding]:
    if snap.errors:
        return [Finding(SOURCES_ID, LAYER, "fail", "Prometheus could not be read: the XID and row-remap rules were not evaluated",
                        evidence="\n".join(snap.errors.values()),
                        fix="gpustack doctor --layer monitoring (is kube-prometheus-stack running?)")]  # fmt: skip
    out = [Finding(SOURCES_ID, LAYER, "pass", f"Kubernetes API and Prometheus read ({len(snap.nodes)} GPU node(s))")]
    for v in verdicts:
        if v.source == SOURCE_LAST:
            out.append(Finding(SOURCES_ID, LAYER, "warn", "no DCGM_EXP_XID_ERRORS_COUNT from this node: its XIDs come "
                               "from the last-XID gauge DCGM_FI_DEV_XID_ERRORS only (a later XID hides an earlier one)",
                               host=v.node, fix=COUNTS_FIX))  # fmt: skip
        elif v.source == SOURCE_NONE:
            out.append(Finding(SOURCES_ID, LAYER, "fail", "no dcgm-exporter series from this node (neither "
                               "DCGM_EXP_XID_ERRORS_COUNT nor DCGM_FI_DEV_XID_ERRORS): its XIDs and row remapping "
                               "were not evaluated", host=v.node,
                               fix=f"gpustack doctor --layer monitoring (is dcgm-exporter running on {v.node} and scraped?)"))  # fmt: skip
    return out


def _quiet_node(v: Verdict, notes: str) -> Finding:
    """A node with no quarantine signal: alerts, or nothing (never a pass where nothing was read)."""
    if v.alerts:
        text = "; ".join(s.describe() for s in v.alerts)
        return Finding(NODE_ID, LAYER, "warn", f"alert only, no quarantine: {text}", host=v.node, evidence=notes,
                       fix=_alert_fix(v))  # fmt: skip
    if v.source == SOURCE_NONE:
        return Finding(NODE_ID, LAYER, "skip", "XIDs and row remapping not evaluated: no dcgm-exporter series (Q00)",
                       host=v.node, evidence=notes)  # fmt: skip
    if v.source == SOURCE_UNKNOWN:
        return Finding(NODE_ID, LAYER, "skip", "only the Node object was read (Prometheus unread: Q00)", host=v.node,
                       evidence=notes)  # fmt: skip
    where = " in the last-XID gauge (no XID counts: Q00)" if v.source == SOURCE_LAST else ""
    return Finding(NODE_ID, LAYER, "pass", f"no quarantine signal{where}", host=v.node, evidence=notes)


def node_finding(r: NodeResult) -> Finding:
    v, name = r.verdict, r.verdict.node
    signals = "; ".join(s.describe() for s in v.quarantine_signals)
    alerts = "; ".join(s.describe() for s in v.alerts)
    notes = "\n".join(x for x in (f"also (alert only): {alerts}" if alerts and r.action else "", *v.notes) if x)
    act = v.action
    needs = _needs(v)
    pol = xid_policy()
    if r.action == "already":
        recorded = pol.actions.get(r.recorded) or act or pol.actions[actions.LEGACY_ACTION]
        more = (f"; now {needs} (more than it was quarantined for)"
                if act is not None and act.quarantine and act.rank > recorded.rank else "")  # fmt: skip
        evidence = "\n".join(x for x in (signals.replace("; ", "\n"), notes) if x)
        return Finding(NODE_ID, LAYER, "warn", f"quarantined for `{recorded.id}` {r.detail}{more}", host=name,
                       evidence=evidence, fix=f"{recorded.how}; release needs {recorded.release}: gpustack health release {name}")  # fmt: skip
    if r.action == "quarantined" and act is not None:
        return Finding(NODE_ID, LAYER, "warn", f"quarantined now, {needs} ({r.detail}): {signals}", host=name,
                       evidence=notes, fix=f"drain it when convenient (kubectl drain {name} --ignore-daemonsets "
                       f"--delete-emptydir-data), then {act.how}; release needs {act.release}: gpustack health release {name}")  # fmt: skip
    if r.action == "would" and act is not None:
        return Finding(NODE_ID, LAYER, "fail", f"{needs}: would quarantine (cordon, taint {actions.taint_text()}, "
                       f"label {act.id}): {signals}", host=name, evidence=notes, fix="gpustack health --apply")  # fmt: skip
    if r.action in ("held", "would-hold"):
        verb = "not quarantined" if r.action == "held" else "would not be quarantined"
        fix = (REPAIR if "unreadable" in r.detail else CLOCK_FIX if "clock" in r.detail else
               f"kubectl cordon {name} by hand if you are sure, or raise remediation.max_nodes_per_window")  # fmt: skip
        return Finding(NODE_ID, LAYER, "fail", f"{needs}, {verb}: the circuit breaker is holding ({r.detail}): {signals}",
                       host=name, evidence=notes, fix=fix)  # fmt: skip
    if r.action == "failed":
        return Finding(NODE_ID, LAYER, "fail", f"{needs}, quarantine failed: {r.detail}", host=name, evidence=notes,
                       fix="gpustack health --apply again (it finishes what this run started)")  # fmt: skip
    return _quiet_node(v, notes)


def breaker_finding(snap: Snapshot, decision: Decision, settings: Settings, apply: bool) -> Finding:
    if decision.unreadable or decision.clock:  # an unreadable ledger or untrusted clocks hold every new quarantine
        held = (
            f"held: {', '.join(decision.held)}"
            if decision.held
            else "nothing to quarantine now; the next would be held"
        )
        return Finding(BREAKER_ID, LAYER, "fail", f"every new quarantine is held: {decision.why_held}", evidence=held,
                       fix=REPAIR if decision.unreadable else CLOCK_FIX)  # fmt: skip
    trace = []
    if decision.created:
        trace.append(f"a new ledger was started ({decision.created}); recorded in it as `created`")
    if decision.restored:
        trace.append(f"the ledger lacked {len(decision.restored)} quarantine(s) the nodes record (emptied, edited "
                     f"or deleted?): {', '.join(decision.restored)}; restored into it, and they count")  # fmt: skip
    status: Status = "warn" if decision.held or decision.restored else "pass"
    what = "used" if apply else "would be used"
    held = f"; held: {', '.join(decision.held)} ({decision.why_held})" if decision.held else ""
    return Finding(BREAKER_ID, LAYER, status,
                   f"{decision.used} of {decision.limit} quarantine(s) per {settings.window // 60} min {what}{held}",
                   evidence="\n".join([*trace, f"limit = min({settings.max_nodes} nodes, {settings.max_percent:g}% of "
                   f"{len(snap.nodes)} GPU nodes, rounded up); times are the API server's clock (checked against this "
                   f"evaluator's within {MAX_SKEW} s; each window counted {MARGIN} s longer for it)"]))  # fmt: skip


def findings(
    snap: Snapshot, results: list[NodeResult], decision: Decision | None, settings: Settings, apply: bool
) -> list[Finding]:
    out = _sources(snap, [r.verdict for r in results])
    out += [node_finding(r) for r in results]
    if decision is not None:
        out.append(breaker_finding(snap, decision, settings, apply))
    return out
