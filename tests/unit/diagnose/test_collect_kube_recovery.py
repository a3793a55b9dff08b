"""The ``kubernetes`` source's recovery paths, through the real ``kubernetes`` client and the fake API server:
a LIST whose continue token expires mid-pagination (410) is restarted once, a second 410 is a finding; a
CrashLoopBackOff container's log is read with ``previous=true`` and falls back to the current log when the
server answers 400 (no previous instance)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes.client.exceptions import ApiException

from gpustack.diagnose.collect_kube import LOG_TAIL_LINES, CountingKube
from gpustack.runners.kubeconfig import kube_from_file
from tests.fakes import scenarios as sc
from tests.fakes.kube_api import FakeKubeAPI

PAGE = 5
EXTRA_PODS = 23


def _pods(n: int) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"extra-{i:03d}", "namespace": "apps"},
             "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "c"}]},
             "status": {"phase": "Succeeded"}} for i in range(n)]  # fmt: skip


def _pod_lists(api: FakeKubeAPI) -> list[dict[str, str]]:
    """The queries of every all-namespace pod LIST the server received, in order."""
    out = []
    for method, raw, _ in api.requests:
        url = urlparse(raw)
        if method == "GET" and url.path == "/api/v1/pods":
            out.append({k: v[-1] for k, v in parse_qs(url.query).items()})
    return out


def _third_page_token(kubeconfig: Path) -> str:
    """The continue token the server hands out for page 3 of the pod LIST (it is deterministic)."""
    kube = CountingKube(kube_from_file(kubeconfig), request_timeout=5)
    token = ""
    for _ in range(2):
        query = {"limit": str(PAGE), **({"continue": token} if token else {})}
        token = kube.request("GET", "/api/v1/pods", query=query)["metadata"]["continue"]
    assert token
    return token


@pytest.fixture
def many_pods(fake_api: FakeKubeAPI) -> int:
    """A healthy one-node cluster plus enough pods for several pages; returns the pod count."""
    sc.healthy(1).load(fake_api)
    fake_api.seed(_pods(EXTRA_PODS))
    return sum(1 for k in fake_api.objects if k[2] == "pods")


def test_expired_continue_token_restarts_the_list_once(fake_api: FakeKubeAPI, kubeconfig: Path, many_pods: int) -> None:
    token = _third_page_token(kubeconfig)
    # the page-3 request expires once (etcd compacted the snapshot the token points into)
    fake_api.fail(r"^/api/v1/pods\?.*continue=" + re.escape(token.rstrip("=")), 410, times=1)
    fake_api.reset_requests()

    snap = sc.collect_kube(fake_api, kubeconfig, extra={"kube_page_size": PAGE})

    assert "kubernetes:Pod" not in snap.errors and "kubernetes" not in snap.errors, snap.errors
    names = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in snap.items("Pod")]
    assert [n for n, c in Counter(names).items() if c > 1] == [], "pods collected twice"
    assert len(names) == many_pods
    expected = {f"{ns}/{name}" for (_, _, plural, ns, name) in fake_api.objects if plural == "pods"}
    assert set(names) == expected
    lists = _pod_lists(fake_api)
    pages = -(-many_pods // PAGE)
    # page 1, page 2, page 3 -> 410, then the whole list again from page 1
    assert len(lists) == 3 + pages, lists
    assert ["continue" in q for q in lists[:4]] == [False, True, True, False], "restarted from the first page"
    assert all(q["limit"] == str(PAGE) for q in lists)


def test_a_second_expiry_is_a_finding_not_a_crash(fake_api: FakeKubeAPI, kubeconfig: Path, many_pods: int) -> None:
    token = _third_page_token(kubeconfig)
    fake_api.fail(r"^/api/v1/pods\?.*continue=" + re.escape(token.rstrip("=")), 410, times=2)
    fake_api.reset_requests()

    snap = sc.collect_kube(fake_api, kubeconfig, extra={"kube_page_size": PAGE})

    assert "410" in snap.errors["kubernetes:Pod"] and "Pod" not in snap.kube
    assert "kubernetes" not in snap.errors, "one kind failing is not an unreachable cluster"
    assert len(snap.items("Node")) == 1 and snap.items("DaemonSet"), "the other kinds are still collected"
    assert len(_pod_lists(fake_api)) == 6, "page 1, 2, 3 (410), then 1, 2, 3 (410): one restart only"
    findings = {f.id: f for f in sc.run_checks(snap)}
    assert findings["K07-pod-failures"].status == "skip", "no pods read: no verdict on them"
    assert findings["K00-api-unreachable"].status == "warn"
    assert "410" in findings["K00-api-unreachable"].evidence


# --- log tails of CrashLoopBackOff containers --------------------------------------------------------


def _crashlooping(api: FakeKubeAPI) -> tuple[str, str, str]:
    """A single-node cluster whose gpu-operator pod is in CrashLoopBackOff; (namespace, pod, container)."""
    s = sc.healthy(1)
    pod = s.pods("gpu-operator-6c9f7b8d5", "gpu-operator")[0]
    sc._crashloop(pod)
    s.load(api)
    return "gpu-operator", pod["metadata"]["name"], "main"


def _log_queries(api: FakeKubeAPI, pod: str) -> list[dict[str, str]]:
    out = []
    for method, raw, _ in api.requests:
        url = urlparse(raw)
        if method == "GET" and url.path.endswith(f"/pods/{pod}/log"):
            out.append({k: v[-1] for k, v in parse_qs(url.query).items()})
    return out


def test_fake_answers_previous_like_a_real_api_server(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    ns, pod, container = _crashlooping(fake_api)
    kube = CountingKube(kube_from_file(kubeconfig), request_timeout=5)
    path = f"/api/v1/namespaces/{ns}/pods/{pod}/log"
    fake_api.set_log(ns, pod, container, "current\n")
    with pytest.raises(ApiException) as exc:
        kube.text(path, {"container": container, "previous": "true"})
    assert exc.value.status == 400
    assert kube.text(path, {"container": container}) == "current\n"
    fake_api.set_log(ns, pod, container, "crashed\n", previous=True)
    assert kube.text(path, {"container": container, "previous": "true"}) == "crashed\n"
    assert kube.text(path, {"container": container, "previous": "false"}) == "current\n"


def test_crashloop_reads_the_previous_instance_log(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    ns, pod, container = _crashlooping(fake_api)
    fake_api.set_log(ns, pod, container, "starting again\n")
    crash = "".join(f"line {i}\n" for i in range(150)) + "panic: runtime error: invalid memory address\n"
    fake_api.set_log(ns, pod, container, crash, previous=True)
    fake_api.reset_requests()

    snap = sc.collect_kube(fake_api, kubeconfig)

    text = snap.pod_logs[f"{ns}/{pod}/{container}"]
    assert text.endswith("panic: runtime error: invalid memory address\n"), "the crashed instance's log"
    assert "starting again" not in text
    assert len(text.splitlines()) == LOG_TAIL_LINES
    assert _log_queries(fake_api, pod) == [{"container": container, "tailLines": str(LOG_TAIL_LINES),
                                            "previous": "true"}]  # fmt: skip
    assert "kubernetes:logs" not in snap.errors


def test_crashloop_without_previous_instance_falls_back_to_the_current_log(
    fake_api: FakeKubeAPI, kubeconfig: Path
) -> None:
    ns, pod, container = _crashlooping(fake_api)
    fake_api.set_log(ns, pod, container, "E1120 cannot reach the API server\n")
    fake_api.reset_requests()

    snap = sc.collect_kube(fake_api, kubeconfig)

    assert snap.pod_logs[f"{ns}/{pod}/{container}"] == "E1120 cannot reach the API server\n"
    queries = _log_queries(fake_api, pod)
    assert [q.get("previous") for q in queries] == ["true", None], "previous first (400), then the current log"
    assert "kubernetes:logs" not in snap.errors, "a missing previous instance is not a failure"


def test_a_failing_fallback_is_counted_not_raised(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    ns, pod, container = _crashlooping(fake_api)
    fake_api.fail(rf"/pods/{pod}/log\?(?!.*previous=true)", 500)  # no previous instance, and the current read fails
    fake_api.reset_requests()
    snap = sc.collect_kube(fake_api, kubeconfig)
    assert [q.get("previous") for q in _log_queries(fake_api, pod)] == ["true", None]
    assert f"{ns}/{pod}/{container}" not in snap.pod_logs
    assert snap.errors["kubernetes:logs"] == "1 log tail(s) could not be read"
    assert snap.items("Pod"), "the pods themselves were collected"
