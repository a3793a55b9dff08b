"""``gpustack doctor --fix``: the SAFE fixes, chosen by the exact id of a failing check (``FIXES``).

Each fix is planned first (what it will run, on what), shown, and applied only after confirmation
(``--yes`` for non-interactive use; without a terminal and without ``--yes`` nothing is applied).
Every other failing check prints its fix, and so does a listed check whose finding is one its fix
does not cure (the builder returns None). Kubernetes fixes are server-side applies with their own
field manager (``gpustack-doctor``), so they never drop fields gpustack's own manager applied;
host fixes re-run a stage of ``gpustack up`` (host keys verified as ``up`` does). Checks that share
a fix (the same commands) get one action, applied once.

Safe fixes:

- ``K02-control-plane-taint`` on a single-node cluster: the taint removed from the Node's ``spec.taints``;
- ``H04-firewall``, ``K06-pod-to-api`` (pods time out on the API service): the firewall stage
  (``gpustack up --only firewall``);
- ``K05-coredns`` not ready: rollout restart (pod template annotation ``kubectl.kubernetes.io/restartedAt``),
  not for a forwarding loop (the nodes' resolv.conf must change) nor for API timeouts (the firewall);
- ``M07-servicemonitor-selected``: adds the ``release`` label Prometheus selects on;
- ``H05-node-exporter-port``, ``K08-node-exporter-port``, ``M09-node-exporter-port`` (a host
  node_exporter holds 9100): the cluster stage again, which moves the cluster's node-exporter.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.console import Console, literal
from gpustack.constants import DOCTOR_FIELD_MANAGER
from gpustack.diagnose.snapshot import Obj, Snapshot
from gpustack.errors import GpustackError, StageError

CONTROL_PLANE_TAINTS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
GPU_HINTS = ("dcgm", "nvidia", "gpu")


@dataclass(frozen=True)
class FixAction:
    """One planned fix: ``shows`` is what will run, ``apply`` runs it and returns what it did.
    ``also``: further failing checks the same fix answers (it runs once for all of them);
    ``leaves``: findings of its check this fix does not answer (they are listed as fixes by hand)."""

    check_id: str
    title: str
    shows: tuple[str, ...]
    apply: Callable[[], str]
    also: tuple[str, ...] = ()
    leaves: tuple[Finding, ...] = ()

    @property
    def check_ids(self) -> tuple[str, ...]:
        return (self.check_id, *self.also)


#: re-runs one stage of ``gpustack up`` (config, the console the fixes print to, stage id, the hosts'
#: facts for the cluster stage); the CLI passes :func:`gpustack.commands.up.run_stage`, so the checks never
#: import the installer
StageRunner = Callable[[Config, Console, str, Mapping[str, Any] | None], None]


@dataclass
class FixContext:
    """What a fix may use: ``run_stage`` for the fixes that re-run a stage of ``up``. ``extra`` carries
    test seams: ``kube`` (a Kube), ``run_stage`` (stage id -> None), ``run_cluster`` (facts -> None)."""

    cfg: Config
    snap: Snapshot
    console: Console
    extra: Mapping[str, object] = field(default_factory=dict)
    _kube: Any = None
    run_stage: StageRunner | None = None

    def kube(self) -> Any:
        """The Kubernetes client of the cluster that was checked (``extra["target"]``), created on first use."""
        if self._kube is None:
            seam = self.extra.get("kube")
            if seam is not None:
                self._kube = seam
            else:
                from gpustack.runners.kubeconfig import KubeTarget, connect

                target = self.extra.get("target")
                if not isinstance(target, KubeTarget):
                    raise StageError("no kubeconfig: doctor --fix cannot reach the cluster", stage="doctor --fix",
                                     hint="pass --kubeconfig FILE (or set $KUBECONFIG), or run `gpustack up` first")  # fmt: skip
                self._kube = connect(target)
        return self._kube


FixBuilder = Callable[[FixContext, Sequence[Finding]], FixAction | None]


# ------------------------------------------------------------------------------------- Kubernetes


def server_side_patch(kube: Any, obj: Mapping[str, Any]) -> Obj:
    """Server-side apply of a partial object with the doctor's own field manager (force: take the
    fields over from whoever set them). Raises StageError with the server's message."""
    from kubernetes.client.exceptions import ApiException

    from gpustack.runners.kube import KubeError, describe

    meta = obj.get("metadata") or {}
    res = kube.resource(str(obj["apiVersion"]), str(obj["kind"]))
    if res is None:
        raise KubeError(f"the API server does not serve {obj['kind']} ({obj['apiVersion']})", status=404)
    path = res.path(str(meta.get("name")), meta.get("namespace"))
    try:
        out = kube.request("PATCH", path, body=dict(obj), query={"fieldManager": DOCTOR_FIELD_MANAGER, "force": "true"},
                           content_type="application/apply-patch+yaml")  # fmt: skip
    except ApiException as exc:
        raise KubeError(f"patching {describe(obj)} failed: {exc.status} {exc.reason}", status=exc.status) from None
    return dict(out)


def _meta(obj: Any) -> Mapping[str, Any]:
    m = obj.get("metadata") if isinstance(obj, Mapping) else None
    return m if isinstance(m, Mapping) else {}


def control_plane_taints(node: Mapping[str, Any]) -> list[Obj]:
    taints = ((node.get("spec") or {}).get("taints") or []) if isinstance(node.get("spec"), Mapping) else []
    return [dict(t) for t in taints if isinstance(t, Mapping) and t.get("key") in CONTROL_PLANE_TAINTS]


def untaint_plan(ctx: FixContext, findings: Sequence[Finding]) -> FixAction | None:
    """Single-node clusters only: with workers, the taint is how kubeadm wants it."""
    nodes = [n for n in ctx.snap.items("Node") if isinstance(n, Mapping)]
    if len(nodes) != 1:
        return None
    node = nodes[0]
    name = str(_meta(node).get("name") or "")
    if not name or not control_plane_taints(node):
        return None
    check_id = findings[0].id

    def apply() -> str:
        kube = ctx.kube()
        live = kube.get("v1", "Node", name) or node
        taints = ((live.get("spec") or {}).get("taints")) or []
        keep = [t for t in taints if isinstance(t, Mapping) and t.get("key") not in CONTROL_PLANE_TAINTS]
        server_side_patch(kube, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                                 "spec": {"taints": keep}})  # fmt: skip
        return f"removed the control-plane taint from node {name}"

    keys = sorted({str(t.get("key")) for t in control_plane_taints(node)})
    return FixAction(check_id, f"remove the control-plane taint from the only node, {name}",
                     tuple(f"kubectl taint nodes {name} {k}-" for k in keys), apply)  # fmt: skip


def coredns_restart_plan(ctx: FixContext, findings: Sequence[Finding]) -> FixAction | None:
    """CoreDNS not ready: a rollout restart. None (the printed fix stands) for a forwarding loop (restarted
    pods loop again until the nodes' resolv.conf changes), without a CoreDNS Deployment, and when its logs
    time out on the API service (the firewall drops pod -> API traffic: K06-pod-to-api's fix)."""
    from gpustack.diagnose.checks_kubernetes import API_TIMEOUT, COREDNS_LOOP, COREDNS_LOOP_FIX

    if any(f.fix == COREDNS_LOOP_FIX or COREDNS_LOOP.search(f.evidence) for f in findings):
        return None
    deployed = any(_meta(d).get("namespace") == "kube-system" and _meta(d).get("name") == "coredns"
                   for d in ctx.snap.items("Deployment"))  # fmt: skip
    if not deployed:
        return None
    if any(str(k).startswith("kube-system/coredns") and isinstance(t, str) and API_TIMEOUT.search(t)
           for k, t in ctx.snap.pod_logs.items()):  # fmt: skip
        return None
    check_id = findings[0].id

    def apply() -> str:
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        server_side_patch(ctx.kube(), {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "coredns", "namespace": "kube-system"},
            "spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: now}}}},
        })  # fmt: skip
        return f"restarted CoreDNS (restartedAt={now})"

    return FixAction(check_id, "restart CoreDNS", ("kubectl -n kube-system rollout restart deployment/coredns",), apply)


def _selector_release(snap: Snapshot) -> str | None:
    """The ``release`` label a Prometheus selects ServiceMonitors on, or None (no Prometheus, or none that
    selects on ``release``: the label would not make it select anything)."""
    for prom in snap.items("Prometheus"):
        sel = ((prom.get("spec") or {}).get("serviceMonitorSelector") or {}) if isinstance(prom, Mapping) else {}
        release = (sel.get("matchLabels") or {}).get("release") if isinstance(sel, Mapping) else None
        if isinstance(release, str) and release:
            return release
    return None


def servicemonitors_to_label(snap: Snapshot, findings: Sequence[Finding], release: str) -> list[tuple[str, str]]:
    """(namespace, name) of ServiceMonitors without ``release: <release>``: of those the findings name
    (none when they name only labelled ones: the label is not what is missing), else the GPU ones
    (dcgm/nvidia/gpu in the name or a label)."""
    monitors = []
    for sm in snap.items("ServiceMonitor"):
        meta = _meta(sm)
        labels = meta.get("labels") or {}
        if not isinstance(labels, Mapping) or not meta.get("name"):
            continue
        monitors.append((str(meta.get("namespace") or "default"), str(meta["name"]), labels))
    text = " ".join(f"{f.summary} {f.evidence}" for f in findings)
    named = [(ns, n, labels) for ns, n, labels in monitors if f"{ns}/{n}" in text or n in text]
    if not named:
        named = [(ns, n, labels) for ns, n, labels in monitors
                 if any(h in (n + " " + " ".join(str(v) for v in labels.values())).lower() for h in GPU_HINTS)]  # fmt: skip
    return [(ns, n) for ns, n, labels in named if labels.get("release") != release]


def servicemonitor_label_plan(ctx: FixContext, findings: Sequence[Finding]) -> FixAction | None:
    release = _selector_release(ctx.snap)
    if release is None:
        return None
    targets = servicemonitors_to_label(ctx.snap, findings, release)
    if not targets:
        return None

    def apply() -> str:
        for ns, name in targets:
            server_side_patch(ctx.kube(), {
                "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                "metadata": {"name": name, "namespace": ns, "labels": {"release": release}},
            })  # fmt: skip
        return f"labelled {', '.join(f'{ns}/{n}' for ns, n in targets)} release={release}"

    return FixAction(
        findings[0].id, f"add the label release={release} so Prometheus selects the ServiceMonitor",
        tuple(f"kubectl -n {ns} label servicemonitor {n} release={release} --overwrite" for ns, n in targets), apply,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------- hosts


def _run_stage(ctx: FixContext, stage_id: str, facts: Mapping[str, Any] | None = None) -> None:
    seam = ctx.extra.get("run_cluster" if stage_id == "cluster" else "run_stage")
    if callable(seam):
        seam(facts if stage_id == "cluster" else stage_id)
        return
    if ctx.run_stage is None:
        raise StageError(f"doctor --fix was given no way to run the {stage_id} stage",
                         stage=stage_id, hint=f"run `gpustack up --only {stage_id}`")  # fmt: skip
    ctx.run_stage(ctx.cfg, ctx.console, stage_id, facts)


def firewall_plan(ctx: FixContext, findings: Sequence[Finding]) -> FixAction | None:
    hosts = sorted({f.host for f in findings if f.host})

    def apply() -> str:
        _run_stage(ctx, "firewall")
        return f"firewall stage applied on {len(ctx.cfg.nodes)} node(s)"

    return FixAction(
        findings[0].id, f"re-apply gpustack's firewall chain (failing on {', '.join(hosts) or 'some nodes'})",
        ("gpustack up --only firewall --yes   (GPUSTACK-INPUT rules, its jump first in INPUT; nothing else touched)",),
        apply,
    )  # fmt: skip


def pod_to_api_plan(ctx: FixContext, findings: Sequence[Finding]) -> FixAction | None:
    """K06: pods time out on the API service because the host firewall drops pod -> API traffic: the
    firewall stage. Not for a ``default/kubernetes`` Service without endpoints (the API server's)."""
    from gpustack.diagnose.checks_kubernetes import API_TIMEOUT

    dropped = [f for f in findings if API_TIMEOUT.search(f.evidence)]
    action = firewall_plan(ctx, dropped) if dropped else None
    if action is None:
        return None
    return replace(action, leaves=tuple(f for f in findings if f not in dropped))


def node_exporter_plan(ctx: FixContext, findings: Sequence[Finding]) -> FixAction | None:
    from gpustack.constants import NODE_EXPORTER_ALT_PORT

    def apply() -> str:
        facts: dict[str, Any] = dict(ctx.snap.hosts)
        if not any(isinstance(f, Mapping) and f.get("node_exporter_on_9100") for f in facts.values()):
            from gpustack.diagnose.collect import CollectContext
            from gpustack.diagnose.collect_hosts import gather_host_facts

            got, _errors = gather_host_facts(CollectContext(cfg=ctx.cfg, command="doctor", kubeconfig=None,
                                                            extra=dict(ctx.extra)))  # fmt: skip
            facts.update(got)
        _run_stage(ctx, "cluster", facts)
        return f"cluster stage re-run: node-exporter on {NODE_EXPORTER_ALT_PORT} where a host node_exporter holds 9100"

    return FixAction(
        findings[0].id, f"move the cluster's node-exporter to port {NODE_EXPORTER_ALT_PORT}",
        ("gpustack up --only cluster --yes   (kube-prometheus-stack values: node-exporter port "
         f"{NODE_EXPORTER_ALT_PORT}, firewall unchanged)",),
        apply,
    )  # fmt: skip


# --------------------------------------------------------------------------------------- selection

#: every check ``doctor --fix`` can repair -> the builder that plans its fix, by exact id (no other check
#: is fixable; tests/unit/diagnose/test_fixes.py holds this table to the registered checks). A builder
#: returns None for a finding its fix does not cure; that finding's printed fix stands.
FIXES: dict[str, FixBuilder] = {
    "H04-firewall": firewall_plan,
    "H05-node-exporter-port": node_exporter_plan,
    "K02-control-plane-taint": untaint_plan,
    "K05-coredns": coredns_restart_plan,
    "K06-pod-to-api": pod_to_api_plan,
    "K08-node-exporter-port": node_exporter_plan,
    "M07-servicemonitor-selected": servicemonitor_label_plan,
    "M09-node-exporter-port": node_exporter_plan,
}


def fix_for(check_id: str) -> FixBuilder | None:
    """The fix builder of a check id, or None: it prints its fix."""
    return FIXES.get(check_id)


def plan_fixes(ctx: FixContext, findings: Iterable[Finding]) -> tuple[list[FixAction], list[Finding]]:
    """(fixes to apply, failing findings only fixable by hand) for the failing findings."""
    by_id: dict[str, list[Finding]] = {}
    for f in findings:
        if f.status == "fail":
            by_id.setdefault(f.id, []).append(f)
    actions: list[FixAction] = []
    manual: list[Finding] = []
    for check_id, group in by_id.items():
        builder = fix_for(check_id)
        try:
            action = builder(ctx, group) if builder is not None else None
        except Exception:  # odd snapshot data: no automatic fix, the printed one still applies
            action = None
        if action is None:
            manual += group
            continue
        manual += action.leaves
        same = next((i for i, a in enumerate(actions) if a.shows == action.shows), None)
        if same is None:
            actions.append(action)
        else:  # e.g. H04 and K06 both want the firewall stage: run it once
            actions[same] = replace(actions[same], also=(*actions[same].also, action.check_id))
    return actions, manual


@dataclass
class FixOutcome:
    applied: list[tuple[FixAction, str]] = field(default_factory=list)  # (fix, result)
    failed: list[tuple[FixAction, str]] = field(default_factory=list)  # (fix, error)
    planned: list[FixAction] = field(default_factory=list)

    @property
    def ran(self) -> bool:
        return bool(self.applied or self.failed)


def fix_console(console: Console, output: str) -> Console:
    """Fix plans and stage progress go to stdout with the table, to stderr with json/junit output."""
    if output == "table":
        return console
    return Console(verbosity=console.verbosity, stream=sys.stderr)


def target_text(snap: Snapshot) -> str:
    """The cluster the fixes change, for the confirmation: server, context and where the kubeconfig came from."""
    from gpustack.diagnose.report import cluster_line

    return cluster_line(snap.target) if snap.target else "none (only the hosts in gpustack.yaml are changed)"


def offer_and_apply(
    cfg: Config, snap: Snapshot, findings: Sequence[Finding], console: Console, *, assume_yes: bool,
    extra: Mapping[str, object] | None = None, run_stage: StageRunner | None = None,
) -> FixOutcome:  # fmt: skip
    """Show every safe fix for the failing findings, ask, apply. Never raises for a failed fix."""
    ctx = FixContext(cfg, snap, console, dict(extra or {}), run_stage=run_stage)
    actions, manual = plan_fixes(ctx, findings)
    outcome = FixOutcome(planned=actions)
    if manual:
        rows = [[literal(f.id), literal(f.host or ""), literal(f.fix or "(no automatic fix)")] for f in manual]
        console.table("fix by hand", ["check", "host", "fix"], rows)
    if not actions:
        console.print("[skip]--fix: no safe automatic fix applies to the failures found[/skip]")
        return outcome
    console.table("doctor --fix will run", ["check", "fix", "runs"],
                  [[literal("\n".join(a.check_ids)), literal(a.title), literal("\n".join(a.shows))] for a in actions])  # fmt: skip
    where = target_text(snap)
    console.print(f"on cluster {literal(where)}")
    if not assume_yes:
        if not (console.interactive and sys.stdin.isatty()):
            console.print("[warn]not applied: no terminal to confirm on; pass --yes to apply these fixes[/warn]")
            return outcome
        context = snap.target.get("context") if snap.target else None
        question = f"Apply {len(actions)} fix(es)" + (f" to context {context}" if context else "") + "?"
        if not console.confirm(question, assume_yes=False):
            console.print("[skip]not applied[/skip]")
            return outcome
    for action in actions:
        try:
            result = action.apply()
        except (GpustackError, OSError, ValueError, RuntimeError) as exc:
            outcome.failed.append((action, f"{type(exc).__name__}: {exc}"))
            console.print(f"[fail]✗ {literal(', '.join(action.check_ids))}: {literal(exc)}[/fail]")
            continue
        outcome.applied.append((action, result))
        console.print(f"[ok]✓ {literal(', '.join(action.check_ids))}: {literal(result)}[/ok]")
    return outcome


def report_after(outcome: FixOutcome, after: Sequence[Finding], console: Console) -> None:
    """One line per applied fix: the status of its check after the re-run."""
    for action, _ in outcome.applied + outcome.failed:
        for check_id in action.check_ids:
            statuses: list[str] = sorted({f.status for f in after if f.id == check_id}) or ["not re-checked"]
            style = "ok" if statuses == ["pass"] else "fail" if "fail" in statuses else "warn"
            console.print(f"[{style}]{literal(check_id)} after the fix: {', '.join(statuses)}[/{style}]")
