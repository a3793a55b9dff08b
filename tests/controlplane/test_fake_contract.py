"""The fake API server's contract: the same requests against tests/fakes/kube_api.py and the real kube-apiserver give
the same answers, for every shape gpustack reads -- discovery, ``/version``, pagination with ``continue``, label and
field selectors, the Status bodies of 400/403/404/409/422/429, Eviction under a PodDisruptionBudget (its status
filled by the real disruption controller), server-side apply and dry runs, the ``Date`` header.

Each test runs one scenario on both servers (:func:`both`) and compares what it recorded, after
:func:`~tests.controlplane.servers.normalise` (uids, resource versions and timestamps differ by nature). A
difference is a defect of the fake: fix the fake (tests/fakes/kube_api.py, kube_semantics.py) and the upstream
facts it was written from (tests/contract/upstream/kube_apiserver.yaml), never the expectation here.
"""

from __future__ import annotations

import difflib
import itertools
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpustack.config import pins
from tests.fakes.kube_api import FakeKubeAPI, RbacAuthorizer

from .cluster import ControlPlane, kubectl
from .nodes import gpu_node
from .servers import Answer, Server, normalise

Obj = dict[str, Any]
NODE = "contract-gpu-1"
_names = itertools.count(1)


@pytest.fixture(scope="module")
def real(control_plane: ControlPlane) -> Iterator[Server]:
    kubectl(control_plane, "create", "-f", "-", stdin=json.dumps(gpu_node(NODE)))
    server = Server("real", control_plane.url, tls=control_plane.admin_tls())
    server.wait("GET", f"/api/v1/nodes/{NODE}", lambda a: _ready(a.body))

    def make_ready(ns: str, pod: str) -> None:  # kwok runs it on NODE
        server.wait("GET", f"/api/v1/namespaces/{ns}/pods/{pod}", lambda a: _ready(a.body))

    server.make_ready = make_ready
    yield server
    kubectl(control_plane, "delete", "node", NODE, "--ignore-not-found")


@pytest.fixture(scope="module")
def fake() -> Iterator[Server]:
    with FakeKubeAPI.running() as api:
        server = Server("fake", api.url, headers={"Authorization": "Bearer fake-token"})
        server.api = api  # type: ignore[attr-defined]

        def make_ready(ns: str, pod: str) -> None:  # what the kubelet reports once the pod runs
            api.set_status("v1", "Pod", pod, ns, {"phase": "Running", "conditions": [
                {"type": t, "status": "True"} for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")]})  # fmt: skip

        server.make_ready = make_ready
        yield server


def _ready(obj: Any) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or [] if isinstance(obj, dict) else []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def both(fake: Server, real: Server, scenario: Callable[[Server, str], Any]) -> None:
    """Run ``scenario(server, namespace)`` on each server, in a fresh namespace of the same name; what it returns
    must be equal."""
    ns = f"contract-{next(_names)}"
    results = {}
    for server in (fake, real):
        created = server.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                              "metadata": {"name": ns}})  # fmt: skip
        assert created.code == 201, (server.name, created.body)
        if server.name == "real":  # pods wait for the namespace's default ServiceAccount (a real cluster's race)
            server.wait("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default", lambda a: a.code == 200)
        results[server.name] = normalise(scenario(server, ns))
    assert results["fake"] == results["real"], _diff(results["fake"], results["real"])


def _diff(fake: Any, real: Any) -> str:
    """The fake's answers against the real server's, as a unified diff (- fake, + real)."""
    lines = [json.dumps(x, indent=1, sort_keys=True).splitlines() for x in (fake, real)]
    return "\n" + "\n".join(difflib.unified_diff(*lines, "fake", "real", lineterm="", n=2))


def status(answer: Answer) -> tuple[int, Any]:
    return answer.code, answer.body


def configmap(name: str, data: Obj, labels: Obj | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **({"labels": labels} if labels else {})},
            "data": data}  # fmt: skip


def secret(name: str, labels: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": labels}, "type": "Opaque"}


def pod(name: str, labels: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10.1"}]}}  # fmt: skip


# --- what gpustack reads first -------------------------------------------------------------------------------


def test_version(fake: Server, real: Server) -> None:
    def scenario(server: Server, _: str) -> Any:
        body = server.call("GET", "/version").body
        volatile = ("gitCommit", "buildDate", "goVersion")  # of the build, not of the release
        return {k: (type(v).__name__ if k in volatile else v) for k, v in body.items()}

    both(fake, real, scenario)
    assert real.call("GET", "/version").body["gitVersion"] == f"v{pins.KUBERNETES[pins.KUBERNETES_DEFAULT]}"


@pytest.mark.parametrize("group_version", ["v1", "apps/v1", "policy/v1"])
def test_discovery_of_the_kinds_gpustack_reads(fake: Server, real: Server, group_version: str) -> None:
    """Every kind the fake serves in a group-version is served by the real server with the same plural, scope and
    short names (gpustack's client resolves kinds through discovery; kubectl through the short names)."""
    path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    fake_kinds = {r["kind"] for r in fake.call("GET", path).body["resources"] if "/" not in r["name"]}

    def scenario(server: Server, _: str) -> Any:
        listing = server.call("GET", path).body
        assert listing["kind"] == "APIResourceList" and listing["groupVersion"] == group_version
        return {r["kind"]: {"name": r["name"], "namespaced": r["namespaced"], "shortNames": r.get("shortNames", [])}
                for r in listing["resources"] if "/" not in r["name"] and r["kind"] in fake_kinds}  # fmt: skip

    both(fake, real, scenario)
    assert fake.call("GET", "/api").body["versions"] == real.call("GET", "/api").body["versions"] == ["v1"]


# --- Status bodies ---------------------------------------------------------------------------------------------


def test_not_found(fake: Server, real: Server) -> None:
    def scenario(server: Server, ns: str) -> Any:
        return [status(server.call("GET", f"/api/v1/namespaces/{ns}/pods/nope")),
                status(server.call("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/nope")),
                status(server.call("GET", "/api/v1/nodes/nope"))]  # fmt: skip

    both(fake, real, scenario)


def test_already_exists(fake: Server, real: Server) -> None:
    def scenario(server: Server, ns: str) -> Any:
        path = f"/api/v1/namespaces/{ns}/configmaps"
        first = server.call("POST", path, configmap("twice", {"a": "1"}))
        return [first.code, status(server.call("POST", path, configmap("twice", {"a": "1"})))]

    both(fake, real, scenario)


def test_forbidden(fake: Server, real: Server) -> None:
    """A ServiceAccount with no role: the real server impersonates it (admin may), the fake applies its RBAC
    double with no rules."""
    subject = "system:serviceaccount:test:subject"

    def scenario(server: Server, ns: str) -> Any:
        api = getattr(server, "api", None)
        headers = {"Impersonate-User": subject} if server.name == "real" else {}
        if api is not None:
            api.authorizer = RbacAuthorizer(cluster_rules=[])
        try:
            return [status(server.call("GET", f"/api/v1/namespaces/{ns}/pods/x", headers=headers)),
                    status(server.call("GET", f"/api/v1/namespaces/{ns}/pods", headers=headers)),
                    status(server.call("GET", "/api/v1/nodes", headers=headers)),
                    status(server.call("PATCH", "/api/v1/nodes/n1", {"spec": {"unschedulable": True}},
                                       ctype="application/merge-patch+json", headers=headers))]  # fmt: skip
        finally:
            if api is not None:
                api.authorizer = None

    both(fake, real, scenario)


# --- LIST: pagination and selectors -------------------------------------------------------------------------------


def test_pagination(fake: Server, real: Server) -> None:
    def scenario(server: Server, ns: str) -> Any:
        path = f"/api/v1/namespaces/{ns}/secrets"
        for i in range(5):
            server.call("POST", path, secret(f"s{i}", {"group": "odd" if i % 2 else "even"}))
        pages, token = [], ""
        while True:
            query = {"limit": "2", **({"continue": token} if token else {})}
            body = server.call("GET", path, query=query).body
            meta = body["metadata"]
            pages.append({"names": [i["metadata"]["name"] for i in body["items"]],
                          "remaining": meta.get("remainingItemCount"), "more": bool(meta.get("continue"))})  # fmt: skip
            token = meta.get("continue") or ""
            if not token:
                break
        selected = server.call("GET", path, query={"limit": "1", "labelSelector": "group=even"}).body["metadata"]
        bad = server.call("GET", path, query={"limit": "1", "continue": "not-a-token"})
        return {"pages": pages, "selected": {"remaining": selected.get("remainingItemCount"),
                                             "more": bool(selected.get("continue"))},
                "bad": status(bad)}  # fmt: skip

    both(fake, real, scenario)


def test_label_and_field_selectors(fake: Server, real: Server) -> None:
    def scenario(server: Server, ns: str) -> Any:
        path = f"/api/v1/namespaces/{ns}/secrets"
        for i in range(4):
            server.call("POST", path, secret(f"s{i}", {"group": "odd" if i % 2 else "even", "tier": str(i)}))
        names = {}
        for sel in ("group=even", "group!=even", "tier in (1,2)", "!tier", "group"):
            body = server.call("GET", path, query={"labelSelector": sel}).body
            names[sel] = sorted(i["metadata"]["name"] for i in body["items"])
        for sel in ("metadata.name=s1", "metadata.name!=s1", "type=Opaque"):
            body = server.call("GET", path, query={"fieldSelector": sel}).body
            names[sel] = sorted(i["metadata"]["name"] for i in body["items"])
        pods = f"/api/v1/namespaces/{ns}/pods"
        selectors = {sel: status(server.call("GET", pods, query={"fieldSelector": sel}))[0]
                     for sel in ("spec.nodeName=x", "status.phase=Running", "spec.schedulerName=x")}  # fmt: skip
        unsupported = status(server.call("GET", pods, query={"fieldSelector": "spec.containers=x"}))
        bad_label = [status(server.call("GET", path, query={"labelSelector": sel}))
                     for sel in ("a b", "a in b", "a,", "a=(b", "x in (a b)", "=a", "a!!b")]  # fmt: skip
        return {"names": names, "selectors": selectors, "unsupported": unsupported, "bad_label": bad_label}

    both(fake, real, scenario)


# --- server-side apply and dry runs ---------------------------------------------------------------------------------


def test_server_side_apply(fake: Server, real: Server) -> None:
    apply = "application/apply-patch+yaml"

    def scenario(server: Server, ns: str) -> Any:
        path = f"/api/v1/namespaces/{ns}/configmaps/applied"
        out = [server.call("PATCH", path, configmap("applied", {"a": "1"}), ctype=apply,
                           query={"fieldManager": "gpustack"}).code,
               server.call("PATCH", path, configmap("applied", {"a": "1"}), ctype=apply,
                           query={"fieldManager": "gpustack"}).code,
               status(server.call("PATCH", path, configmap("applied", {"a": "2"}), ctype=apply,
                                  query={"fieldManager": "someone-else"})),
               server.call("PATCH", path, configmap("applied", {"a": "2"}), ctype=apply,
                           query={"fieldManager": "someone-else", "force": "true"}).code,
               status(server.call("PATCH", path, configmap("applied", {"a": "3"}), ctype=apply)),
               server.call("GET", path).body["data"]]  # fmt: skip
        managers = server.call("GET", path).body["metadata"]["managedFields"]
        out.append(sorted((m["manager"], m["operation"]) for m in managers))
        return out

    both(fake, real, scenario)


def test_dry_run(fake: Server, real: Server) -> None:
    def scenario(server: Server, ns: str) -> Any:
        path = f"/api/v1/namespaces/{ns}/configmaps"
        created = server.call("POST", path, configmap("dry", {"a": "1"}), query={"dryRun": "All"})
        return [created.code, created.body["data"], status(server.call("GET", f"{path}/dry")),
                status(server.call("POST", path, configmap("dry", {"a": "1"}), query={"dryRun": "Some"}))]  # fmt: skip

    both(fake, real, scenario)


# --- Eviction ---------------------------------------------------------------------------------------------------------


def pdb(name: str, labels: Obj, **spec: Any) -> Obj:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": labels}, **spec}}  # fmt: skip


def observed(server: Server, ns: str, name: str, allowed: int) -> None:
    """Until the budget's status is what the disruption controller computes (the fake's budgets are observed at
    once; on the real server the controller-manager fills the status)."""
    path = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}"
    if server.name == "fake":  # the fake keeps what it is given: write what the controller would
        body = server.call("GET", path).body
        server.api.set_status("policy/v1", "PodDisruptionBudget", name, ns, {  # type: ignore[attr-defined]
            "observedGeneration": body["metadata"].get("generation", 1), "disruptionsAllowed": allowed,
            "currentHealthy": 2, "desiredHealthy": 2 - allowed, "expectedPods": 2})  # fmt: skip
    server.wait("GET", path, lambda a: (a.body.get("status") or {}).get("observedGeneration") == a.body["metadata"].get(
        "generation", 1) and a.body["status"].get("disruptionsAllowed") == allowed)  # fmt: skip


def test_eviction_under_a_budget(fake: Server, real: Server) -> None:
    def scenario(server: Server, ns: str) -> Any:
        for name in ("p1", "p2"):
            assert server.call("POST", f"/api/v1/namespaces/{ns}/pods", pod(name, {"app": "e"})).code == 201
            assert server.make_ready is not None
            server.make_ready(ns, name)
        server.call("POST", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", pdb("keep-two", {"app": "e"},
                                                                                          minAvailable=2))  # fmt: skip
        observed(server, ns, "keep-two", 0)

        def evict(name: str, **extra: Any) -> Answer:
            body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}, **extra}
            return server.call("POST", f"/api/v1/namespaces/{ns}/pods/{name}/eviction", body)

        blocked = status(evict("p1"))
        missing = status(evict("nope"))
        server.call("DELETE", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/keep-two")
        server.call("POST", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", pdb("one-may-go", {"app": "e"},
                                                                                          minAvailable=1))  # fmt: skip
        observed(server, ns, "one-may-go", 1)
        dry = status(evict("p1", deleteOptions={"dryRun": ["All"]}))
        allowed = status(evict("p1"))
        return {"blocked": blocked, "missing": missing, "dry": dry, "allowed": allowed}

    both(fake, real, scenario)


# --- every answer carries the server's clock ----------------------------------------------------------------------


def test_date_header(fake: Server, real: Server) -> None:
    http_date = re.compile(r"^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$")

    def scenario(server: Server, ns: str) -> Any:
        answers = [server.call("GET", "/api/v1/nodes"), server.call("GET", f"/api/v1/namespaces/{ns}/pods/nope")]
        return [bool(http_date.match(a.headers.get("Date", ""))) for a in answers]

    both(fake, real, scenario)
