"""doctor --fix: selection by check id, shown before applied, confirmation, the Kubernetes fixes against
the fake API server (real `kubernetes` client), host fixes through seams, re-check after fixing."""

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
        yield server, Kube.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))


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


def test_fix_selection_by_id() -> None:
    assert fixes.fix_for("H04-firewall") is fixes.firewall_plan
    assert fixes.fix_for("H05-node-exporter-port") is fixes.node_exporter_plan
    assert fixes.fix_for("K02-control-plane-taint") is fixes.untaint_plan
    assert fixes.fix_for("K05-coredns-ready") is fixes.coredns_restart_plan
    assert fixes.fix_for("K06-coredns-loop") is None  # a loop needs a resolv.conf fix, not a restart
    assert fixes.fix_for("M03-servicemonitor-not-selected") is fixes.servicemonitor_label_plan
    assert fixes.fix_for("M04-service-monitor-release-label") is fixes.servicemonitor_label_plan
    assert fixes.fix_for("M07-node-exporter-port-conflict") is fixes.node_exporter_plan
    for other in ("H01-swap", "C02-cri", "G01-driver", "K01-nodes-ready"):
        assert fixes.fix_for(other) is None


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
    action = fixes.coredns_restart_plan(ctx, [fail("K05-coredns-ready")])
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
    action = fixes.servicemonitor_label_plan(ctx, [fail("M03-servicemonitor-not-selected")])
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
    named = fixes.servicemonitors_to_label(ctx.snap, [fail("M03-x", evidence="apps/someone-elses")], "r")
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
    import gpustack.up

    seen: list[Any] = []
    monkeypatch.setattr(gpustack.up, "up", lambda cfg, opts, console: seen.append(opts))
    console, _ = quiet()
    action = fixes.firewall_plan(fixes.FixContext(CFG, Snapshot(), console), [fail("H04-firewall", "solo")])
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
