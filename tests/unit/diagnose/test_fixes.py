"""doctor --fix: selection by exact check id (FIXES, held to the registered checks), each fixable check's
real findings planned or left to the printed fix, shown before applied, confirmation, the Kubernetes fixes
against the fake API server (real `kubernetes` client), host fixes through seams, re-check after fixing."""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.diagnose import fixes, registry
from gpustack.diagnose.engine import DiagnoseOptions, diagnose
from gpustack.diagnose.snapshot import Snapshot
from gpustack.runners.kube import Kube
from gpustack.runners.kubeconfig import kube_from_file
from tests.fakes import scenarios as sc
from tests.fakes.kube_api import FakeKubeAPI
from tests.unit.diagnose.test_host_checks import facts, host_specs

CFG = Config.model_validate({"nodes": [{"name": "solo", "address": "192.0.2.11", "role": "control-plane"}]})
TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "solo"},
        "spec": {"taints": [TAINT, {"key": "example.com/keep", "effect": "NoSchedule"}]}}  # fmt: skip
COREDNS: dict[str, Any] = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "coredns", "namespace": "kube-system"},
    "spec": {"selector": {"matchLabels": {"k8s-app": "kube-dns"}},
             "template": {"metadata": {"labels": {"k8s-app": "kube-dns"}},
                          "spec": {"containers": [{"name": "coredns", "image": "coredns:1.12"}]}}},
}  # fmt: skip
SM = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
      "metadata": {"name": "nvidia-dcgm-exporter", "namespace": "gpu-operator", "labels": {"app": "dcgm"}},
      "spec": {"selector": {"matchLabels": {"app": "nvidia-dcgm-exporter"}}, "endpoints": [{"port": "gpu-metrics"}]}}  # fmt: skip
OTHER_SM = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": "someone-elses", "namespace": "apps", "labels": {}}, "spec": {}}  # fmt: skip
PROM = {"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
        "metadata": {"name": "kps-prometheus", "namespace": "monitoring"},
        "spec": {"serviceMonitorSelector": {"matchLabels": {"release": "kube-prometheus-stack"}}}}  # fmt: skip


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[FakeKubeAPI, Kube]]:
    with FakeKubeAPI.running() as server:
        server.seed([NODE, COREDNS, SM, OTHER_SM, PROM])
        yield server, kube_from_file(server.write_kubeconfig(tmp_path / "kubeconfig"))


def quiet() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(stream=buf, color=False), buf


def fail(id_: str, host: str | None = None, **kw: Any) -> Finding:
    layer = "host" if id_.startswith("H") else "kubernetes"
    return Finding(id_, layer, "fail", f"{id_} failed", host=host, fix=kw.pop("fix", "by hand"), **kw)


def snap_of(*objs: dict[str, Any], hosts: dict[str, Any] | None = None) -> Snapshot:
    kube: dict[str, list[dict[str, Any]]] = {}
    for o in objs:
        kube.setdefault(o["kind"], []).append(copy.deepcopy(o))
    return Snapshot(kube=kube, hosts=hosts or {})


#: the safe fixes the product offers, by check id
WANTED = {
    "H04-firewall": fixes.firewall_plan,
    "K06-pod-to-api": fixes.pod_to_api_plan,  # pods time out on the API service: the firewall stage too
    "K02-control-plane-taint": fixes.untaint_plan,
    "K05-coredns": fixes.coredns_restart_plan,
    "M07-servicemonitor-selected": fixes.servicemonitor_label_plan,
    "H05-node-exporter-port": fixes.node_exporter_plan,
    "K08-node-exporter-port": fixes.node_exporter_plan,
    "M09-node-exporter-port": fixes.node_exporter_plan,
}


def registered() -> dict[str, registry.CheckSpec]:
    return dict(registry.load_all())


def test_fix_selection_by_exact_id() -> None:
    assert fixes.FIXES == WANTED
    for check_id, builder in WANTED.items():
        assert fixes.fix_for(check_id) is builder


def test_every_fix_names_a_registered_check() -> None:
    """A renamed check id must not silently lose its fix."""
    unknown = sorted(set(fixes.FIXES) - set(registered()))
    assert not unknown, f"FIXES names check ids no check registers: {unknown}"
    for check_id in fixes.FIXES:
        assert "doctor" in registered()[check_id].commands, f"{check_id}: --fix is a doctor option"


def test_no_other_registered_check_is_fixable() -> None:
    console, _ = quiet()
    ctx = fixes.FixContext(CFG, snap_of(NODE, COREDNS, SM, PROM), console)
    for check_id in sorted(set(registered()) - set(fixes.FIXES)):
        assert fixes.fix_for(check_id) is None, check_id
        actions, manual = fixes.plan_fixes(ctx, [fail(check_id)])
        assert not actions and [f.id for f in manual] == [check_id]


def test_no_keyword_matching() -> None:
    """Names that look like a fixable check's are not fixable: only exact ids are."""
    for lookalike in ("K05-coredns-ready", "K06-coredns-loop", "M03-servicemonitor-not-selected",
                      "M06-servicemonitor-matches", "M04-service-monitor-release-label", "X02-control-plane-taint",
                      "M07-node-exporter-port-conflict", "h04-firewall", "H04-firewall "):  # fmt: skip
        assert fixes.fix_for(lookalike) is None, lookalike


def test_reference_fix_column_matches_fixes() -> None:
    """docs/checks.md's `--fix` column (CheckSpec.fixable) says yes exactly for the checks in FIXES."""
    flagged = {i for i, spec in registered().items() if spec.fixable}
    assert flagged == set(fixes.FIXES)


def test_reference_fix_column_is_yes_for_every_fix() -> None:
    assert all(registered()[i].fixable for i in fixes.FIXES)


def test_untaint_single_node_keeps_other_taints(api: tuple[FakeKubeAPI, Kube]) -> None:
    server, kube = api
    console, _ = quiet()
    ctx = fixes.FixContext(CFG, snap_of(NODE), console, {"kube": kube})
    action = fixes.untaint_plan(ctx, [fail("K02-control-plane-taint")])
    assert action is not None
    assert action.shows == ("kubectl taint nodes solo node-role.kubernetes.io/control-plane-",)
    assert not server.mutating_requests(), "planning changes nothing"
    assert "solo" in action.apply()
    node = server.get("v1", "Node", "solo")
    assert node is not None and node["spec"]["taints"] == [{"key": "example.com/keep", "effect": "NoSchedule"}]
    patches = server.mutating_requests()
    assert patches and all(m == "PATCH" and "fieldManager=gpustack-doctor" in p for m, p, _ in patches)


def test_untaint_is_not_offered_with_workers() -> None:
    console, _ = quiet()
    worker = {**NODE, "metadata": {"name": "w1"}, "spec": {}}
    ctx = fixes.FixContext(CFG, snap_of(NODE, worker), console)
    assert fixes.untaint_plan(ctx, [fail("K02-control-plane-taint")]) is None


def test_coredns_restart_sets_the_restarted_at_annotation(api: tuple[FakeKubeAPI, Kube]) -> None:
    server, kube = api
    console, _ = quiet()
    ctx = fixes.FixContext(CFG, snap_of(COREDNS), console, {"kube": kube})
    action = fixes.coredns_restart_plan(ctx, [fail("K05-coredns")])
    assert action is not None and "rollout restart deployment/coredns" in action.shows[0]
    action.apply()
    dep = server.get("apps/v1", "Deployment", "coredns", "kube-system")
    assert dep is not None
    assert fixes.RESTARTED_AT in dep["spec"]["template"]["metadata"]["annotations"]
    # the rest of the Deployment is untouched
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "coredns:1.12"
    assert dep["spec"]["selector"] == {"matchLabels": {"k8s-app": "kube-dns"}}


def test_servicemonitor_gets_the_release_label(api: tuple[FakeKubeAPI, Kube]) -> None:
    server, kube = api
    console, _ = quiet()
    ctx = fixes.FixContext(CFG, snap_of(SM, OTHER_SM, PROM), console, {"kube": kube})
    action = fixes.servicemonitor_label_plan(ctx, [fail("M07-servicemonitor-selected")])
    assert action is not None
    assert action.shows == (
        "kubectl -n gpu-operator label servicemonitor nvidia-dcgm-exporter release=kube-prometheus-stack --overwrite",
    )
    action.apply()
    sm = server.get("monitoring.coreos.com/v1", "ServiceMonitor", "nvidia-dcgm-exporter", "gpu-operator")
    assert sm is not None and sm["metadata"]["labels"] == {"app": "dcgm", "release": "kube-prometheus-stack"}
    assert sm["spec"]["endpoints"] == [{"port": "gpu-metrics"}]
    other = server.get("monitoring.coreos.com/v1", "ServiceMonitor", "someone-elses", "apps")
    assert other is not None and "release" not in (other["metadata"].get("labels") or {})
    # a finding that names the other ServiceMonitor targets that one
    named = fixes.servicemonitors_to_label(ctx.snap, [fail("M07-x", evidence="apps/someone-elses")], "r")
    assert named == [("apps", "someone-elses")]


def test_host_fixes_run_the_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    console, _ = quiet()
    ran: list[Any] = []
    hosts = {"solo": facts(node_exporter_on_9100=True)}
    ctx = fixes.FixContext(CFG, snap_of(hosts=hosts), console,
                           {"run_stage": ran.append, "run_cluster": lambda f: ran.append(sorted(f))})  # fmt: skip
    fw = fixes.firewall_plan(ctx, [fail("H04-firewall", "solo")])
    ne = fixes.node_exporter_plan(ctx, [fail("H05-node-exporter-port", "solo")])
    assert fw is not None and ne is not None
    assert fw.shows[0].startswith("gpustack up --only firewall") and "9101" in ne.shows[0]
    fw.apply()
    ne.apply()
    assert ran == ["firewall", ["solo"]]


def test_firewall_fix_runs_only_the_firewall_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpustack.commands.up

    seen: list[Any] = []
    monkeypatch.setattr(gpustack.commands.up, "up", lambda cfg, opts, console: seen.append(opts))
    console, _ = quiet()
    # the stage runner the CLI hands doctor --fix (diagnose never imports the installer)
    ctx = fixes.FixContext(CFG, Snapshot(), console, run_stage=gpustack.commands.up.run_stage)
    action = fixes.firewall_plan(ctx, [fail("H04-firewall", "solo")])
    assert action is not None
    action.apply()
    assert [s.id for s in seen[0].stages] == ["firewall"] and not seen[0].accept_new_host_keys


def test_without_terminal_and_without_yes_nothing_is_applied(api: tuple[FakeKubeAPI, Kube]) -> None:
    server, kube = api
    console, buf = quiet()
    findings = [fail("K02-control-plane-taint"), fail("H01-swap", "solo", fix="sudo swapoff -a")]
    outcome = fixes.offer_and_apply(CFG, snap_of(NODE), findings, console, assume_yes=False, extra={"kube": kube})
    out = buf.getvalue()
    assert not outcome.ran and "--yes" in out
    assert "kubectl taint nodes solo" in out, "the fix is shown"
    assert "sudo swapoff -a" in out, "manual fixes are printed"
    assert not server.mutating_requests()
    node = server.get("v1", "Node", "solo")
    assert node is not None and TAINT in node["spec"]["taints"]


def test_a_failing_fix_is_reported_not_raised(api: tuple[FakeKubeAPI, Kube]) -> None:
    server, kube = api
    server.fail(r"/nodes/solo", 500, method="PATCH")
    console, buf = quiet()
    outcome = fixes.offer_and_apply(CFG, snap_of(NODE), [fail("K02-control-plane-taint")], console,
                                    assume_yes=True, extra={"kube": kube})  # fmt: skip
    assert outcome.failed and not outcome.applied and "K02-control-plane-taint" in buf.getvalue()


def test_doctor_fix_rechecks_and_reports(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Engine end to end (host layer, seams): fail -> fix -> collect again -> pass."""
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(registry, "load_all", lambda: registry.REGISTRY)  # host checks only
    monkeypatch.setattr("gpustack.diagnose.collect.load_sources", lambda: _only_hosts())
    host_facts = {"solo": facts(firewall={"drops_before_jump": True, "drop_rules": ["-A INPUT -j DROP"]})}

    def run_stage(stage: str) -> None:
        assert stage == "firewall"
        host_facts["solo"] = facts()

    console, buf = quiet()
    opts = DiagnoseOptions(command="doctor", layers=("host", "runtime"), checks=("H04",), output="json",
                           fix=True, assume_yes=True, save=tmp_path / "after.json",
                           extra={"host_facts": host_facts, "run_stage": run_stage})  # fmt: skip
    code, findings, _ = diagnose(CFG, opts, console)
    assert code == 0
    assert [(f.id, f.status) for f in findings] == [("H04-firewall", "pass")]
    out = buf.getvalue()
    assert json.loads(out)["summary"]["fail"] == 0, "stdout holds exactly one JSON report: the one after the fix"
    assert json.loads((tmp_path / "after.json").read_text())["checks"][0]["status"] == "pass"


def _only_hosts() -> dict[str, Any]:
    from gpustack.diagnose import collect, collect_hosts  # noqa: F401 - registers the "hosts" source

    return {"hosts": collect.SOURCES["hosts"]}


def test_host_specs_registered_fixable() -> None:
    fixable = {s.id for s in host_specs() if s.fixable}
    assert fixable == {"H04-firewall", "H05-node-exporter-port"}
    assert all(fixes.fix_for(i) is not None for i in fixable)


# --- each fixable check's own findings: planned, or left to the printed fix -------------------------


def check_findings(snap: Snapshot, check_id: str) -> list[Finding]:
    return [f for f in registry.run([registered()[check_id]], snap) if f.status == "fail"]


def scenario_snapshot(api: FakeKubeAPI, kubeconfig: Path, name: str) -> Snapshot:
    scenario, _ = sc.failure(name)
    scenario.load(api)
    snap: Snapshot = sc.collect_kube(api, kubeconfig, hosts=scenario.hosts)
    return snap


def plan(snap: Snapshot, findings: list[Finding], **extra: Any) -> tuple[list[fixes.FixAction], list[Finding]]:
    console, _ = quiet()
    return fixes.plan_fixes(fixes.FixContext(CFG, snap, console, extra), findings)


def test_coredns_not_ready_is_restarted(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    snap = scenario_snapshot(fake_api, kubeconfig, "coredns-not-ready")
    found = check_findings(snap, "K05-coredns")
    assert found
    [action], manual = plan(snap, found)
    assert action.check_id == "K05-coredns" and "rollout restart deployment/coredns" in action.shows[0]
    assert not manual


def test_coredns_loop_is_not_restarted(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    """A restart does not cure a forwarding loop: the loop's fix (resolv.conf) is printed instead."""
    snap = scenario_snapshot(fake_api, kubeconfig, "coredns-loop")
    found = check_findings(snap, "K05-coredns")
    assert [f.summary for f in found] == ["CoreDNS detected a forwarding loop and exits"]
    assert fixes.coredns_restart_plan(fixes.FixContext(CFG, snap, quiet()[0]), found) is None
    actions, manual = plan(snap, found)
    assert not actions and manual == found and "resolvConf" in manual[0].fix


def test_coredns_without_deployment_is_not_restarted() -> None:
    snap = Snapshot(kube={"Deployment": [], "Pod": []})
    found = check_findings(snap, "K05-coredns")
    assert [f.summary for f in found] == ["no CoreDNS Deployment in kube-system"]
    assert plan(snap, found)[0] == []


def test_pod_to_api_timeouts_run_the_firewall_stage_once(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    """The firewall drops pod -> API traffic: K06 (and H04 on the host) get the firewall stage, applied
    once; CoreDNS, not ready for the same reason, is not restarted (its printed fix is the firewall's)."""
    snap = scenario_snapshot(fake_api, kubeconfig, "pod-to-api-timeout")
    snap.hosts = {"solo": facts(firewall={"drops_before_jump": True, "drop_rules": ["-A INPUT -j DROP"]})}
    found = [*check_findings(snap, "H04-firewall"), *check_findings(snap, "K05-coredns"),
             *check_findings(snap, "K06-pod-to-api")]  # fmt: skip
    assert {f.id for f in found} == {"H04-firewall", "K05-coredns", "K06-pod-to-api"}
    ran: list[str] = []
    [action], manual = plan(snap, found, run_stage=ran.append)
    assert action.check_ids == ("H04-firewall", "K06-pod-to-api")
    assert action.shows[0].startswith("gpustack up --only firewall")
    assert [f.id for f in manual] == ["K05-coredns"] and "gpustack up --only firewall" in manual[0].fix
    action.apply()
    assert ran == ["firewall"]


def test_pod_to_api_without_endpoints_is_not_the_firewall() -> None:
    snap = Snapshot(kube={"Endpoints": [{"kind": "Endpoints", "metadata": {"name": "kubernetes", "namespace": "default"},
                                         "subsets": []}], "Pod": []})  # fmt: skip
    found = check_findings(snap, "K06-pod-to-api")
    assert [f.summary for f in found] == ["the default/kubernetes Service has no endpoints"]
    assert plan(snap, found)[0] == []


def test_pod_to_api_timeouts_and_no_endpoints_split_between_fix_and_by_hand(
    fake_api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """Both K06 findings at once: the timeouts get the firewall stage, the Service without endpoints
    (the API server's problem) stays in the by-hand list."""
    snap = scenario_snapshot(fake_api, kubeconfig, "pod-to-api-timeout")
    for ep in snap.kube["Endpoints"]:
        if ep["metadata"]["name"] == "kubernetes" and ep["metadata"]["namespace"] == "default":
            ep["subsets"] = []
    found = check_findings(snap, "K06-pod-to-api")
    assert len(found) == 2
    [action], manual = plan(snap, found, run_stage=lambda _stage: None)
    assert action.check_ids == ("K06-pod-to-api",)
    assert [f.summary for f in manual] == ["the default/kubernetes Service has no endpoints"]


def test_node_exporter_port_checks_share_one_cluster_stage(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    snap = scenario_snapshot(fake_api, kubeconfig, "node-exporter-port")
    found = check_findings(snap, "K08-node-exporter-port") + check_findings(snap, "M09-node-exporter-port")
    assert {f.id for f in found} == {"K08-node-exporter-port", "M09-node-exporter-port"}
    snap.hosts = {"solo": facts(node_exporter_on_9100=True)}
    ran: list[Any] = []
    [action], manual = plan(snap, found, run_cluster=lambda f: ran.append(sorted(f)))
    assert action.check_ids == ("K08-node-exporter-port", "M09-node-exporter-port") and not manual
    assert "gpustack up --only cluster" in action.shows[0]
    action.apply()
    assert ran == [["solo"]]


def test_control_plane_taint_is_planned_from_its_finding(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    snap = scenario_snapshot(fake_api, kubeconfig, "control-plane-taint")
    found = check_findings(snap, "K02-control-plane-taint")
    [action], _ = plan(snap, found)
    assert action.shows == (f"kubectl taint nodes {found[0].host} node-role.kubernetes.io/control-plane-",)


def test_servicemonitor_selected_gets_the_release_label_only_when_that_is_missing() -> None:
    prom = {**PROM, "spec": {**PROM["spec"], "serviceMonitorNamespaceSelector": {}}}
    snap = snap_of(SM, OTHER_SM, prom)
    found = check_findings(snap, "M07-servicemonitor-selected")
    assert [f.summary for f in found] == [
        "ServiceMonitor gpu-operator/nvidia-dcgm-exporter is not selected by any Prometheus"
    ]
    [action], _ = plan(snap, found)
    assert action.shows == (
        "kubectl -n gpu-operator label servicemonitor nvidia-dcgm-exporter release=kube-prometheus-stack --overwrite",
    )
    # a Prometheus without a serviceMonitorSelector selects nothing: a label would not help
    nil = {**PROM, "spec": {"serviceMonitorNamespaceSelector": {}}}
    found = check_findings(snap_of(SM, nil), "M07-servicemonitor-selected")
    assert found and "selects nothing" in found[0].evidence
    assert plan(snap_of(SM, nil), found)[0] == []
    # the monitor has the label; its namespace is what is excluded
    labelled = {**SM, "metadata": {**SM["metadata"], "labels": {"release": "kube-prometheus-stack"}}}
    excluding = {**PROM, "spec": {**PROM["spec"], "serviceMonitorNamespaceSelector": {"matchLabels": {"team": "ml"}}}}
    gpu_ns = {"kind": "Namespace", "metadata": {"name": "gpu-operator", "labels": {}}}
    snap = snap_of(labelled, excluding, gpu_ns)
    found = check_findings(snap, "M07-servicemonitor-selected")
    assert found and "excludes gpu-operator" in found[0].evidence
    assert plan(snap, found)[0] == []


def test_report_after_names_every_check_a_shared_fix_answered() -> None:
    console, buf = quiet()
    action = fixes.FixAction("H04-firewall", "t", ("x",), lambda: "done", also=("K06-pod-to-api",))
    after = [Finding("H04-firewall", "host", "pass", "ok"), Finding("K06-pod-to-api", "kubernetes", "fail", "no")]
    fixes.report_after(fixes.FixOutcome(applied=[(action, "done")]), after, console)
    out = buf.getvalue()
    assert "H04-firewall after the fix: pass" in out and "K06-pod-to-api after the fix: fail" in out
