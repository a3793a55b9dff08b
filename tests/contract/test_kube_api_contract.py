"""Contract: the fake API server (tests/fakes/kube_api.py) answers what kube-apiserver 1.36 answers.

No API server runs here, so its answers are upstream facts recorded as data (tests/contract/upstream/
kube_apiserver.yaml, each with its source): field selectors per kind, LIST pagination and its errors, the
Eviction subresource with PodDisruptionBudgets, server-side apply's validation and conflicts, dry runs, the
Status objects of errors and the Date header every answer carries. Each is asked of the fake over HTTP, as a client would."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from gpustack.config import pins
from tests.contract.upstream import facts
from tests.fakes import kube_semantics
from tests.fakes.kube_api import FakeKubeAPI

K = facts("kube_apiserver")
Obj = dict[str, Any]
LIST_PATHS = {
    "pods": "/api/v1/pods",
    "nodes": "/api/v1/nodes",
    "events": "/api/v1/events",
    "namespaces": "/api/v1/namespaces",
    "secrets": "/api/v1/secrets",
    "services": "/api/v1/services",
    "jobs": "/apis/batch/v1/jobs",
    "deployments": "/apis/apps/v1/deployments",
}


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI.running() as fake:
        yield fake


def call(api: FakeKubeAPI, method: str, path: str, body: Any = None, ctype: str = "application/json",
         **query: str) -> tuple[int, Obj]:  # fmt: skip
    url = api.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def assert_status(answer: tuple[int, Obj], want: Obj, **fmt: str) -> Obj:
    code, body = answer
    assert code == want["code"] and body["code"] == want["code"], body
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body.get("reason", "") == want.get("reason", ""), body
    if "message" in want:
        assert body["message"] == want["message"].format(**fmt).strip(), body
    return body


def test_the_double_imitates_the_pinned_kubernetes() -> None:
    assert K["version"] == kube_semantics.IMITATES
    assert FakeKubeAPI().version == f"v{pins.KUBERNETES[K['version']]}"


# --- field selectors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("plural", sorted(K["field_selectors"]["supported"]))
def test_supported_field_selectors_are_accepted(api: FakeKubeAPI, plural: str) -> None:
    for label in K["field_selectors"]["supported"][plural]:
        code, body = call(api, "GET", LIST_PATHS[plural], fieldSelector=f"{label}=x")
        assert code == 200, (plural, label, body)
        code, _ = call(api, "GET", LIST_PATHS[plural], fieldSelector=f"{label}!=x")
        assert code == 200


@pytest.mark.parametrize("plural", sorted(K["field_selectors"]["unsupported"]))
def test_unsupported_field_selectors_are_400(api: FakeKubeAPI, plural: str) -> None:
    want = K["field_selectors"]["unsupported"][plural]
    assert_status(call(api, "GET", LIST_PATHS[plural], fieldSelector=f"{want['label']}=x"), want)


def test_field_selectors_select_on_the_upstream_fields(api: FakeKubeAPI) -> None:
    api.seed([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "default"},
               "spec": {"nodeName": f"n{i % 2}", "containers": [{"name": "c"}]},
               "status": {"phase": "Running" if i else "Succeeded"}} for i in range(4)]
             + [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0"}, "spec": {"unschedulable": True}},
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {}}])  # fmt: skip
    names = lambda a: [o["metadata"]["name"] for o in a[1]["items"]]  # noqa: E731
    assert names(call(api, "GET", "/api/v1/pods", fieldSelector="spec.nodeName=n0")) == ["p0", "p2"]
    assert names(call(api, "GET", "/api/v1/pods", fieldSelector="spec.host=n1")) == ["p1", "p3"]
    assert names(call(api, "GET", "/api/v1/pods", fieldSelector="status.phase!=Succeeded,spec.nodeName==n0")) == ["p2"]
    assert names(call(api, "GET", "/api/v1/nodes", fieldSelector="spec.unschedulable=false")) == ["n1"]


# --- pagination ------------------------------------------------------------------------------------------------


def _pods(api: FakeKubeAPI, n: int) -> None:
    api.seed([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i:02d}", "namespace": ns},
               "spec": {"containers": [{"name": "c"}]}} for i in range(n) for ns in ("a", "a-b")])  # fmt: skip


def test_continue_tokens_have_the_upstream_format(api: FakeKubeAPI) -> None:
    _pods(api, 3)
    code, page = call(api, "GET", "/api/v1/pods", limit="2")
    token = page["metadata"]["continue"]
    raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    assert sorted(raw) == sorted(K["pagination"]["token_fields"]) and raw["v"] == K["pagination"]["token_version"]
    assert "=" not in token, "base64.RawURLEncoding: no padding"
    assert page["metadata"]["remainingItemCount"] == 4
    # etcd's key order: "a-b/..." sorts before "a/..." ('-' < '/')
    assert [p["metadata"]["namespace"] for p in page["items"]] == ["a-b", "a-b"]
    code, rest = call(api, "GET", "/api/v1/pods", limit="10", **{"continue": token})
    assert code == 200 and len(rest["items"]) == 4 and "continue" not in rest["metadata"]


def test_remaining_item_count_is_unset_with_selectors(api: FakeKubeAPI) -> None:
    _pods(api, 3)
    _, page = call(api, "GET", "/api/v1/pods", limit="1", fieldSelector="metadata.namespace=a")
    assert page["metadata"]["continue"] and "remainingItemCount" not in page["metadata"]
    _, page = call(api, "GET", "/api/v1/pods", limit="1", labelSelector="app!=x")
    assert "remainingItemCount" not in page["metadata"]


def test_invalid_and_expired_continue_tokens(api: FakeKubeAPI) -> None:
    _pods(api, 3)
    body = assert_status(call(api, "GET", "/api/v1/pods", limit="1", **{"continue": "not-a-token"}),
                         K["pagination"]["invalid"])  # fmt: skip
    assert body["message"].startswith(K["pagination"]["invalid"]["message_prefix"])
    _, page = call(api, "GET", "/api/v1/pods", limit="1")
    api.compact()
    expired = K["pagination"]["expired"]
    body = assert_status(call(api, "GET", "/api/v1/pods", limit="1", **{"continue": page["metadata"]["continue"]}),
                         {**expired, "message": " ".join(expired["message"].split())})  # fmt: skip
    again = body["metadata"]["continue"]
    raw = json.loads(base64.urlsafe_b64decode(again + "=" * (-len(again) % 4)))
    assert raw["rv"] == expired["continue_rv"]
    code, rest = call(api, "GET", "/api/v1/pods", limit="10", **{"continue": again})
    assert code == 200 and len(rest["items"]) == 5


# --- eviction --------------------------------------------------------------------------------------------------

E = K["eviction"]


def _pod(name: str, *, phase: str = "Running", ready: bool = True) -> Obj:
    status: Obj = {"phase": phase}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
            "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}, "status": status}  # fmt: skip


def _pdb(name: str, allowed: int, *, observed: int = 1, desired: int = 2, current: int = 2) -> Obj:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "default"},
            "spec": {"minAvailable": desired, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"observedGeneration": observed, "disruptionsAllowed": allowed, "desiredHealthy": desired,
                       "currentHealthy": current, "expectedPods": current}}  # fmt: skip


def _evict(api: FakeKubeAPI, pod: str, dry: bool = False) -> tuple[int, Obj]:
    body: Obj = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": "default"}}
    if dry:
        body["deleteOptions"] = {"dryRun": ["All"]}
    return call(api, "POST", f"/api/v1/namespaces/default/pods/{pod}/eviction", body)


def _pdb_allowed(api: FakeKubeAPI) -> int:
    return int(api.get("policy/v1", "PodDisruptionBudget", "web", "default")["status"]["disruptionsAllowed"])  # type: ignore[index]


def test_eviction_allowed_uses_the_budget(api: FakeKubeAPI) -> None:
    api.seed([_pod("a"), _pod("b"), _pdb("web", 1)])
    code, body = _evict(api, "a", dry=True)
    assert (code, body["status"], body["code"]) == (E["success"]["code"], E["success"]["status"], E["success"]["code"])
    assert api.get("v1", "Pod", "a", "default") and _pdb_allowed(api) == 1, "a dry run changes nothing"
    assert _evict(api, "a")[0] == E["success"]["code"]
    assert api.get("v1", "Pod", "a", "default") is None and _pdb_allowed(api) == 0
    body = assert_status(_evict(api, "b"), E["blocked"])
    (cause,) = body["details"]["causes"]
    assert cause == {"reason": E["blocked"]["cause_reason"],
                     "message": E["blocked"]["cause_message"].format(name="web", desired=2, current=2)}  # fmt: skip


def test_eviction_budget_not_yet_observed_is_429_with_retry(api: FakeKubeAPI) -> None:
    api.seed([_pod("a"), _pdb("web", 1, observed=0)])
    body = assert_status(_evict(api, "a"), {**E["not_observed"], "reason": "TooManyRequests"})
    assert body["details"]["retryAfterSeconds"] == E["not_observed"]["retry_after_seconds"]
    assert body["details"]["causes"][0]["message"] == E["not_observed"]["cause_message"].format(name="web")


def test_eviction_negative_budget_and_two_budgets(api: FakeKubeAPI) -> None:
    api.seed([_pod("a"), _pdb("web", -1)])
    assert_status(_evict(api, "a"), E["negative"], name="web")
    api.seed([_pdb("web", 1), {**_pdb("web2", 1), "metadata": {"name": "web2", "namespace": "default"}}])
    assert_status(_evict(api, "a"), E["two_budgets"])


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Pending"])
def test_eviction_ignores_the_budget_of_pods_that_cannot_be_disrupted(api: FakeKubeAPI, phase: str) -> None:
    assert phase in E["ignores_budget_phases"]
    api.seed([_pod("a", phase=phase), _pdb("web", 0)])
    assert _evict(api, "a")[0] == E["success"]["code"] and _pdb_allowed(api) == 0


def test_eviction_of_an_unready_pod_when_the_app_is_healthy(api: FakeKubeAPI) -> None:
    api.seed([_pod("a", ready=False), _pdb("web", 0, desired=2, current=2)])
    assert _evict(api, "a")[0] == E["success"]["code"] and _pdb_allowed(api) == 0
    api.seed([_pod("b", ready=False), _pdb("web", 0, desired=2, current=1)])
    assert_status(_evict(api, "b"), E["blocked"])


# --- server-side apply, dry run, errors ------------------------------------------------------------------------

A = K["apply"]
APPLY = "application/apply-patch+yaml"


def _cm(name: str, **data: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, "data": data}


def test_apply_needs_a_field_manager(api: FakeKubeAPI) -> None:
    api.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}])
    assert_status(
        call(api, "PATCH", "/api/v1/namespaces/default/configmaps/c", _cm("c", a="1"), APPLY), A["no_manager"]
    )


def test_apply_conflicts(api: FakeKubeAPI) -> None:
    api.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}])
    path = "/api/v1/namespaces/default/configmaps/c"
    assert call(api, "PATCH", path, _cm("c", a="1", b="1"), APPLY, fieldManager="alpha")[0] == 201
    body = assert_status(call(api, "PATCH", path, _cm("c", a="2"), APPLY, fieldManager="beta"), A["conflict"])
    assert body["message"] == A["conflict"]["one"].format(manager="alpha", field=".data.a")
    assert body["details"]["causes"] == [{k: v.format(manager="alpha", field=".data.a") for k, v in A["conflict"]["cause"].items()}]  # fmt: skip
    body = assert_status(call(api, "PATCH", path, _cm("c", a="2", b="2"), APPLY, fieldManager="beta"), A["conflict"])
    assert body["message"] == A["conflict"]["many"].format(n=2, manager="alpha", field1=".data.a", field2=".data.b")
    assert call(api, "PATCH", path, _cm("c", a="2"), APPLY, fieldManager="beta", force="true")[0] == 200
    assert api.get("v1", "ConfigMap", "c", "default")["data"] == {"a": "2", "b": "1"}  # type: ignore[index]


def test_dry_run_stores_nothing(api: FakeKubeAPI) -> None:
    api.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}])
    code, body = call(api, "POST", "/api/v1/namespaces/default/configmaps", _cm("c", a="1"), dryRun="All")
    assert code == 201 and body["data"] == {"a": "1"} and api.get("v1", "ConfigMap", "c", "default") is None
    code, _ = call(api, "PATCH", "/api/v1/namespaces/default/configmaps/c", _cm("c", a="1"), APPLY,
                   fieldManager="m", dryRun="All")  # fmt: skip
    assert code == 201 and api.get("v1", "ConfigMap", "c", "default") is None
    api.seed([_cm("c", a="1")])
    code, _ = call(api, "DELETE", "/api/v1/namespaces/default/configmaps/c", dryRun="All")
    assert code == 200 and api.get("v1", "ConfigMap", "c", "default") is not None
    for value in ("Server", "true"):
        assert value not in K["dry_run"]["values"]
        code, body = call(api, "POST", "/api/v1/namespaces/default/configmaps", _cm("d"), dryRun=value)
        assert code == K["dry_run"]["invalid_code"] and body["reason"] == "Invalid"


def test_error_status_objects(api: FakeKubeAPI) -> None:
    errs = K["errors"]
    api.seed([_cm("c")])
    body = assert_status(call(api, "GET", "/api/v1/namespaces/default/pods/nope"), errs["not_found_core"], name="nope")
    assert set(errs["status_keys"]) <= set(body)
    assert_status(
        call(api, "GET", "/apis/apps/v1/namespaces/default/deployments/nope"), errs["not_found_group"], name="nope"
    )
    assert_status(
        call(api, "POST", "/api/v1/namespaces/default/configmaps", _cm("c")), errs["already_exists"], name="c"
    )


@pytest.mark.parametrize("path", ["/api/v1/namespaces", "/api/v1/namespaces/default/configmaps/nope"])
def test_every_answer_carries_the_servers_clock(api: FakeKubeAPI, path: str) -> None:
    import time

    api.clock = lambda: 1_800_000_000.4  # the server's clock, whatever the client's
    req = urllib.request.Request(api.url + path)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            date = resp.headers["Date"]
    except urllib.error.HTTPError as exc:  # a 404 Status carries it too
        date = exc.headers["Date"]
    assert date == time.strftime(K["date_header"]["format"], time.gmtime(1_800_000_000))
