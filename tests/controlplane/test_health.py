"""``gpustack health --apply`` against the real API server: the cordon/taint patches on kwok GPU nodes, the circuit
breaker's ledger ConfigMap under real resourceVersion conflicts from concurrent evaluators, and the quarantine
CronJob's ServiceAccount, impersonated: every request the evaluation makes is allowed, the CronJob's pod is admitted
by the real PodSecurity admission in its ``restricted`` namespace, and RBAC grants nothing beyond the documented
rules (docs/operations.md, "Scheduled evaluation").

The GPU series come from the Prometheus API double (tests/fakes/prometheus_api.py), reached directly
(``prometheus_url``): what is under test here is the Kubernetes side.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.constants import (
    ANN_QUARANTINE_HISTORY,
    BREAKER_CONFIGMAP,
    HEALTH_CRONJOB,
    HEALTH_FIELD_MANAGER,
    HEALTH_SERVICE_ACCOUNT,
    MONITORING_NAMESPACE,
    PROMETHEUS_PORT,
    PROMETHEUS_SERVICE,
    QUARANTINE_LABEL,
    SYSTEM_NAMESPACE,
)
from gpustack.health import actions, ledger
from gpustack.health.manifests import health_manifests, rbac_rules
from gpustack.health.policy import Settings
from gpustack.health.runner import HealthOptions, run_health
from gpustack.runners.kube import Kube
from gpustack.runners.kubeconfig import kube_from_file
from tests.fakes.prometheus_api import FakePrometheus

from .cluster import ControlPlane, kubectl
from .nodes import gpu_node

Obj = dict[str, Any]
NODES = [f"hc-gpu-{i}" for i in range(1, 6)]
IMAGE = "registry.example.com/gpustack:0.1.0"
SA = f"system:serviceaccount:{SYSTEM_NAMESPACE}:{HEALTH_SERVICE_ACCOUNT}"


class Recording(Kube):
    """gpustack's client, recording the status of every answer (the one place requests leave: ``_send``)."""

    def __init__(self, base: Kube) -> None:
        super().__init__(base.api, request_timeout=base.request_timeout)
        self.answers: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()

    def _send(self, method: str, path: str, **kw: Any) -> Any:
        out = super()._send(method, path, **kw)
        with self._lock:
            self.answers.append((method, path, int(out[0].status)))
        return out


def client(cp: ControlPlane, *, as_user: str | None = None) -> Recording:
    kube = Recording(kube_from_file(cp.admin_kubeconfig))
    if as_user:
        kube.api.set_default_header("Impersonate-User", as_user)
    return kube


@pytest.fixture(scope="module")
def prom(control_plane: ControlPlane) -> Iterator[FakePrometheus]:
    for i, name in enumerate(NODES):
        node = gpu_node(name, index=20 + i, gpus=2)
        node["status"]["nodeInfo"]["bootID"] = f"boot-{name}"
        kubectl(control_plane, "create", "-f", "-", stdin=json.dumps(node))
    server = FakePrometheus().start()
    for name in NODES:
        server.add("kube_node_status_allocatable", {"node": name}, 2)
        for gpu in range(2):
            labels = {"node": name, "gpu": str(gpu), "UUID": f"GPU-{name}-{gpu}"}
            server.add("DCGM_FI_DEV_XID_ERRORS", {**labels, "err_code": "0"}, 0)
            server.add("DCGM_EXP_XID_ERRORS_COUNT", {**labels, "window_size_in_ms": "300000"}, 0)
    kube = kube_from_file(control_plane.admin_kubeconfig)
    # as `up` applies them: kube-prometheus-stack's release has made the monitoring namespace, then gpustack's
    # cluster layer applies the namespace, ServiceAccount, RBAC and CronJob
    kube.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MONITORING_NAMESPACE}}])
    kube.apply(health_manifests(enabled()))
    try:
        yield server
    finally:
        server.stop()
        kubectl(control_plane, "delete", "node", *NODES, "--ignore-not-found")


def enabled() -> Config:
    return Config.model_validate({"remediation": {"enabled": True, "image": IMAGE, "max_nodes_per_window": 2}})


def quiet() -> Console:
    return Console(color=False, stream=open(os.devnull, "w"))


def fail(prom: FakePrometheus, node: str, xid: int = 48) -> None:
    prom.add("DCGM_EXP_XID_ERRORS_COUNT", {"node": node, "gpu": "0", "UUID": f"GPU-{node}-0", "xid": str(xid),
                                           "window_size_in_ms": "300000"}, 1)  # fmt: skip


def heal(prom: FakePrometheus, node: str) -> None:
    rows = prom.series.get("DCGM_EXP_XID_ERRORS_COUNT", [])
    rows[:] = [(lbl, v) for lbl, v in rows if not (lbl.get("node") == node and "xid" in lbl)]


def options(prom: FakePrometheus, *, max_nodes: int = 2, nodes: tuple[str, ...] = ()) -> HealthOptions:
    return HealthOptions(settings=Settings(max_nodes=max_nodes, max_percent=100), apply=True, nodes=nodes,
                         prometheus_url=prom.url)  # fmt: skip


def reset(cp: ControlPlane, kube: Kube) -> None:
    """No ledger, no quarantine left by an earlier test, and no node's quarantine history (the breaker's second
    record, which outlives a release and a deleted ledger): a cluster that never quarantined."""
    kubectl(cp, "delete", "configmap", BREAKER_CONFIGMAP, f"--namespace={SYSTEM_NAMESPACE}", "--ignore-not-found")
    for name in NODES:
        node = kube.get("v1", "Node", name) or {}
        if actions.is_quarantined(node):
            kube.request("PATCH", f"/api/v1/nodes/{name}", body=actions.release_patch(node, by="test", at="now"),
                         content_type=ledger.MERGE)  # fmt: skip
        kube.request("PATCH", f"/api/v1/nodes/{name}", body={"metadata": {"annotations": {ANN_QUARANTINE_HISTORY: None}}},
                     content_type=ledger.MERGE)  # fmt: skip


def quarantined(kube: Kube) -> list[str]:
    return [n for n in NODES if actions.is_quarantined(kube.get("v1", "Node", n) or {})]


def test_a_quarantine_is_a_real_patch_of_a_real_node(control_plane: ControlPlane, prom: FakePrometheus) -> None:
    kube = client(control_plane)
    reset(control_plane, kube)
    fail(prom, "hc-gpu-1")
    try:
        run_health(kube, options(prom, nodes=("hc-gpu-1",)), quiet(), now=time.time())
    finally:
        heal(prom, "hc-gpu-1")
    node = kube.get("v1", "Node", "hc-gpu-1") or {}
    assert node["spec"]["unschedulable"] is True
    assert actions.taint() in [{k: t.get(k) for k in actions.taint()} for t in node["spec"]["taints"]]
    assert node["metadata"]["labels"][QUARANTINE_LABEL] == "true"
    managers = {m["manager"] for m in node["metadata"]["managedFields"]}
    assert HEALTH_FIELD_MANAGER in managers
    # the ledger: one entry, timed by the API server's clock, in its ConfigMap
    cm = kube.get("v1", "ConfigMap", BREAKER_CONFIGMAP, SYSTEM_NAMESPACE) or {}
    assert [e["node"] for e in json.loads(cm["data"]["ledger.json"])["entries"]] == ["hc-gpu-1"]
    # every request succeeded but the first read of the ledger, which did not exist yet
    ledger_path = f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/configmaps/{BREAKER_CONFIGMAP}"
    assert [a for a in kube.answers if a[2] >= 400] == [("GET", ledger_path, 404)], kube.answers


def test_concurrent_evaluators_conflict_on_the_ledger_and_never_pass_the_limit(
    control_plane: ControlPlane, prom: FakePrometheus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight evaluators read the ledger at the same resourceVersion before any writes (a barrier), so seven of
    their writes meet the real server's 409; the breaker still approves exactly its limit (2) of 5 failing nodes."""
    admin = client(control_plane)
    reset(control_plane, admin)
    runs = 8
    barrier = threading.Barrier(runs, timeout=60)
    first_read: set[int] = set()
    real_read = ledger.read_ledger

    def read_then_wait(kube: Kube) -> ledger.LedgerRead:
        out = real_read(kube)
        me = threading.get_ident()
        if me not in first_read:
            first_read.add(me)
            barrier.wait()
        return out

    monkeypatch.setattr(ledger, "read_ledger", read_then_wait)
    for name in NODES:
        fail(prom, name)
    clients = [client(control_plane) for _ in range(runs)]
    errors: list[BaseException] = []

    def evaluate(kube: Recording) -> None:
        try:
            run_health(kube, options(prom), quiet(), now=time.time())
        except BaseException as exc:  # reported below, with the thread's client
            errors.append(exc)

    threads = [threading.Thread(target=evaluate, args=(c,)) for c in clients]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        for name in NODES:
            heal(prom, name)
    assert not errors, errors
    conflicts = [a for c in clients for a in c.answers if a[2] == 409 and BREAKER_CONFIGMAP in a[1]]
    creates = [a for c in clients for a in c.answers if a[0] == "POST" and a[2] == 409]
    assert len(conflicts) + len(creates) >= runs - 1, [a for c in clients for a in c.answers if a[2] >= 400]
    assert len(quarantined(admin)) == 2
    cm = admin.get("v1", "ConfigMap", BREAKER_CONFIGMAP, SYSTEM_NAMESPACE) or {}
    assert sorted(e["node"] for e in json.loads(cm["data"]["ledger.json"])["entries"]) == quarantined(admin)


def test_the_cronjobs_service_account_may_do_what_the_evaluation_does(
    control_plane: ControlPlane, prom: FakePrometheus
) -> None:
    admin = client(control_plane)
    reset(control_plane, admin)
    as_sa = client(control_plane, as_user=SA)
    fail(prom, "hc-gpu-2")
    try:
        run_health(as_sa, options(prom, nodes=("hc-gpu-2",)), quiet(), now=time.time())
    finally:
        heal(prom, "hc-gpu-2")
    assert quarantined(admin) == ["hc-gpu-2"]
    assert not [a for a in as_sa.answers if a[2] == 403], as_sa.answers  # everything the evaluation asked: allowed
    # Prometheus through the service proxy: allowed for that Service and port only. RBAC answers before the proxy
    # looks for the Service's endpoints: 404 (no Endpoints object) and 503 (no addresses) both mean "allowed".
    admin.apply([{"apiVersion": "v1", "kind": "Service", "metadata": {"name": PROMETHEUS_SERVICE,
                                                                      "namespace": MONITORING_NAMESPACE},
                  "spec": {"ports": [{"name": PROMETHEUS_PORT, "port": 9090}]}}])  # fmt: skip
    base = f"/api/v1/namespaces/{MONITORING_NAMESPACE}/services"
    proxy = f"{base}/{PROMETHEUS_SERVICE}:{PROMETHEUS_PORT}/proxy/api/v1/query"
    answer = as_sa.raw("GET", proxy, query={"query": "up"}, limit=4096)
    assert answer.status == 404 and b'services \\"kube-prometheus-stack-prometheus\\" not found' in answer.body
    admin.apply([{"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": PROMETHEUS_SERVICE,
                                                                        "namespace": MONITORING_NAMESPACE}}])  # fmt: skip
    answer = as_sa.raw("GET", proxy, query={"query": "up"}, limit=4096)
    assert answer.status == 503 and b"no endpoints available for service" in answer.body, answer.body
    for other in (f"{base}/{PROMETHEUS_SERVICE}:9090/proxy/api/v1/query", f"{base}/grafana:http/proxy/"):
        assert as_sa.raw("GET", other, limit=4096).status == 403, other


def rules_review(kube: Kube, namespace: str) -> list[Obj]:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace},
    }
    out = kube.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", body=review)
    return list(out["status"]["resourceRules"])


#: what every authenticated user holds in a kubeadm cluster (the bootstrap ClusterRoles system:basic-user,
#: system:discovery, system:public-info-viewer: plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go)
EVERYONE = [{"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
             "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
            {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]}]  # fmt: skip


def _flat(rules: list[Obj]) -> set[tuple[str, str, str, str]]:
    return {(g, r, v, n) for rule in rules for g in rule.get("apiGroups", [""]) for r in rule["resources"]
            for v in rule["verbs"] for n in (rule.get("resourceNames") or ["*"])}  # fmt: skip


@pytest.mark.parametrize("namespace", [SYSTEM_NAMESPACE, MONITORING_NAMESPACE, "default"])
def test_rbac_grants_nothing_beyond_the_documented_rules(control_plane: ControlPlane, prom: FakePrometheus,
                                                         namespace: str) -> None:  # fmt: skip
    as_sa = client(control_plane, as_user=SA)
    cluster, roles = rbac_rules(health_manifests(enabled()))
    want = _flat(cluster) | _flat(roles.get(namespace, [])) | _flat(EVERYONE)
    assert _flat(rules_review(as_sa, namespace)) == want


def test_the_cronjobs_pod_is_admitted_under_restricted_pod_security(control_plane: ControlPlane,
                                                                    prom: FakePrometheus) -> None:  # fmt: skip
    """A Job made from the CronJob (as ``kubectl create job --from=cronjob/...``): the real Job controller creates its
    pod, the real PodSecurity admission (the namespace enforces ``restricted``) admits it, kwok runs it."""
    admin = client(control_plane)
    ns = admin.get("v1", "Namespace", SYSTEM_NAMESPACE) or {}
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    cron = admin.get("batch/v1", "CronJob", HEALTH_CRONJOB, SYSTEM_NAMESPACE) or {}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "health-manual", "namespace": SYSTEM_NAMESPACE},
           "spec": cron["spec"]["jobTemplate"]["spec"]}  # fmt: skip
    admin.request("POST", f"/apis/batch/v1/namespaces/{SYSTEM_NAMESPACE}/jobs", body=job)
    deadline = time.monotonic() + 60
    while True:
        pods = admin.list_objects("v1", "Pod", SYSTEM_NAMESPACE, label_selector="job-name=health-manual")
        if pods and pods[0].get("spec", {}).get("nodeName"):
            break
        events = admin.list_objects("v1", "Event", SYSTEM_NAMESPACE, field_selector="reason=FailedCreate")
        assert not events, [e["message"] for e in events]
        assert time.monotonic() < deadline, "the Job's pod was neither created nor refused"
        time.sleep(0.3)
    kubectl(control_plane, "delete", "job", "health-manual", f"--namespace={SYSTEM_NAMESPACE}", "--cascade=foreground",
            "--wait=false")  # fmt: skip
