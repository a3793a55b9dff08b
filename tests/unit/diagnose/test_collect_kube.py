"""The FakeKubeAPI additions (pagination, selectors, seed, logs, hooks, proxy, faults, counter) through the
real ``kubernetes`` client, and the ``kubernetes`` source's request budget and failure handling."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from gpustack.diagnose.collect_kube import CountingKube
from gpustack.errors import ClusterUnreachableError
from gpustack.runners.kubeconfig import kube_from_file
from tests.fakes import scenarios as sc
from tests.fakes.kube_api import FakeKubeAPI


@pytest.fixture
def kube(kubeconfig: Path) -> CountingKube:
    return CountingKube(kube_from_file(kubeconfig), request_timeout=2.0)


def _pods(n: int, ns: str = "default") -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i:03d}", "namespace": ns},
             "spec": {"nodeName": f"n{i % 3}", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}}
            for i in range(n)]  # fmt: skip


# --- fake API --------------------------------------------------------------------------------------


def test_pagination_all_namespaces_and_namespaced(fake_api: FakeKubeAPI, kube: CountingKube) -> None:
    fake_api.seed(_pods(7, "a") + _pods(5, "b"))
    first = kube.request("GET", "/api/v1/pods", query={"limit": "5"})
    assert len(first["items"]) == 5 and first["metadata"]["remainingItemCount"] == 7
    assert first["metadata"]["continue"]
    assert len(kube.list_all("/api/v1/pods", page=5)) == 12
    assert len(kube.list_all("/api/v1/namespaces/a/pods", page=2)) == 7
    names = [p["metadata"]["name"] for p in kube.list_all("/api/v1/namespaces/b/pods", page=2)]
    assert names == [f"p{i:03d}" for i in range(5)]


def test_bad_continue_token(fake_api: FakeKubeAPI, kube: CountingKube) -> None:
    """A token that does not decode is a 400; one from before an etcd compaction a 410 whose Status carries a
    token that continues at the latest version (as kube-apiserver answers: tests/contract)."""
    with pytest.raises(ApiException) as exc:
        kube.request("GET", "/api/v1/pods", query={"limit": "1", "continue": "garbage"})
    assert exc.value.status == 400
    fake_api.seed(_pods(3) + sc.healthy(1).nodes())
    token = kube.request("GET", "/api/v1/pods", query={"limit": "1"})["metadata"]["continue"]
    fake_api.compact()
    with pytest.raises(ApiException) as exc:
        kube.request("GET", "/api/v1/pods", query={"limit": "1", "continue": token})
    assert exc.value.status == 410
    again = json.loads(exc.value.body)["metadata"]["continue"]
    rest = kube.request("GET", "/api/v1/pods", query={"limit": "5", "continue": again})
    assert [p["metadata"]["name"] for p in rest["items"]] == ["p001", "p002"]


def test_pagination_on_crd_and_cluster_scoped_kinds(fake_api: FakeKubeAPI, kube: CountingKube) -> None:
    fake_api.seed(sc.healthy(3).objects)
    assert len(kube.list_all("/api/v1/nodes", page=1)) == 3
    assert len(kube.list_all("/apis/nvidia.com/v1/clusterpolicies", page=1)) == 1
    assert len(kube.list_all("/apis/monitoring.coreos.com/v1/prometheuses", page=1)) == 1
    assert len(kube.list_all("/apis/apps/v1/namespaces/gpu-operator/daemonsets", page=2)) == 7


def test_event_field_selectors(fake_api: FakeKubeAPI, kube: CountingKube) -> None:
    ev = [{"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"e{i}", "namespace": "default"},
           "involvedObject": {"kind": "Pod", "name": f"p{i % 2}", "namespace": "default"},
           "type": "Warning" if i % 3 else "Normal", "message": "m"} for i in range(6)]  # fmt: skip
    fake_api.seed(ev)
    assert len(kube.list_all("/api/v1/events", {"fieldSelector": "type!=Normal"}, page=2)) == 4
    assert len(kube.list_all("/api/v1/events", {"fieldSelector": "type=Warning"}, page=10)) == 4
    got = kube.list_all(
        "/api/v1/namespaces/default/events", {"fieldSelector": "involvedObject.name=p1,type=Warning"}, page=10
    )
    assert {e["metadata"]["name"] for e in got} == {"e1", "e5"}


def test_label_selector(fake_api: FakeKubeAPI, kube: CountingKube) -> None:
    fake_api.seed(sc.healthy(2).objects)
    got = kube.request(
        "GET", "/api/v1/pods", query={"labelSelector": "app in (nvidia-operator-validator,gpu-operator)"}
    )
    assert len(got["items"]) == 3
    assert not kube.request("GET", "/api/v1/pods", query={"labelSelector": "k8s-app=kube-dns,!k8s-app"})["items"]


def test_seed_keeps_status_and_creates_namespaces(fake_api: FakeKubeAPI) -> None:
    fake_api.seed(sc.healthy(1).objects)
    assert fake_api.get("nvidia.com/v1", "ClusterPolicy", "cluster-policy")["status"]["state"] == "ready"  # type: ignore[index]
    assert fake_api.get("v1", "Namespace", "gpu-operator") is not None
    node = fake_api.get("v1", "Node", "gpu-node-1")
    assert node is not None and node["status"]["allocatable"]["nvidia.com/gpu"] == "8"


def test_pod_create_hooks_logs_delete(fake_api: FakeKubeAPI, kube: CountingKube) -> None:
    fake_api.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpustack-verify"}}])

    def lifecycle(obj: dict[str, Any]) -> None:
        if obj["kind"] == "Pod":
            obj["status"] = {"phase": "Succeeded"}
            fake_api.set_log("gpustack-verify", obj["metadata"]["name"], "cuda", "line1\nTest PASSED\n")

    fake_api.on_create.append(lifecycle)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "cuda-vectoradd-"},
            "spec": {"containers": [{"name": "cuda", "image": "x"}]}}  # fmt: skip
    created = kube.request("POST", "/api/v1/namespaces/gpustack-verify/pods", body=body)
    name = created["metadata"]["name"]
    assert name.startswith("cuda-vectoradd-")
    assert kube.request("GET", f"/api/v1/namespaces/gpustack-verify/pods/{name}")["status"]["phase"] == "Succeeded"
    path = f"/api/v1/namespaces/gpustack-verify/pods/{name}/log"
    assert kube.text(path, {"container": "cuda"}) == "line1\nTest PASSED\n"
    assert kube.text(path, {"tailLines": "1"}) == "Test PASSED\n"
    kube.request("DELETE", f"/api/v1/namespaces/gpustack-verify/pods/{name}")
    with pytest.raises(ApiException) as exc:
        kube.text(path, {})
    assert exc.value.status == 404


@pytest.fixture
def upstream() -> Iterator[str]:
    class H(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            body = json.dumps({"path": self.path}).encode()
            self.send_response(200 if "missing" not in self.path else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_service_proxy(fake_api: FakeKubeAPI, kube: CountingKube, upstream: str) -> None:
    fake_api.seed(sc.healthy(1).objects)
    fake_api.proxy_upstreams[("monitoring", "kube-prometheus-stack-prometheus", "9090")] = upstream
    base = "/api/v1/namespaces/monitoring/services/kube-prometheus-stack-prometheus:9090/proxy"
    got = kube.request("GET", f"{base}/api/v1/query", query={"query": "up"})
    assert got == {"path": "/api/v1/query?query=up"}
    with pytest.raises(ApiException) as exc:
        kube.request("GET", f"{base}/missing")
    assert exc.value.status == 404
    with pytest.raises(ApiException) as exc:  # Service exists, no upstream registered
        kube.request("GET", "/api/v1/namespaces/monitoring/services/kube-prometheus-stack-grafana:80/proxy/api/health")
    assert exc.value.status == 503
    with pytest.raises(ApiException) as exc:
        kube.request("GET", "/api/v1/namespaces/monitoring/services/nope:80/proxy/")
    assert exc.value.status == 404


def test_fault_injection_and_counter(fake_api: FakeKubeAPI, kube: CountingKube) -> None:
    fake_api.seed(_pods(2))
    before = fake_api.request_count
    fake_api.fail(r"/api/v1/pods", 500, times=1)
    with pytest.raises(ApiException) as exc:
        kube.request("GET", "/api/v1/pods")
    assert exc.value.status == 500
    assert len(kube.request("GET", "/api/v1/pods")["items"]) == 2  # times=1 used up
    fake_api.fail(r"/nodes", 403)
    with pytest.raises(ApiException) as exc:
        kube.request("GET", "/api/v1/nodes")
    assert exc.value.status == 403
    fake_api.delay(r"/api/v1/namespaces/default/pods", 5)
    with pytest.raises(ClusterUnreachableError):  # the client's 2 s timeout
        kube.request("GET", "/api/v1/namespaces/default/pods")
    # and 2 more: the first request proved the server is Kubernetes (GET /version, GET /api), once
    assert fake_api.request_count == before + 6 and kube.count == 6


# --- the kubernetes source -------------------------------------------------------------------------


def _requests_for(nodes: int, tmp_path: Path, page: int = 50) -> tuple[int, int]:
    with FakeKubeAPI.running() as api:
        sc.healthy(nodes).load(api)
        snap = sc.collect_kube(api, api.write_kubeconfig(tmp_path / f"kc{nodes}"), extra={"kube_page_size": page})
        assert not snap.errors
        pages = sum(-(-len(v) // page) or 1 for v in snap.kube.values())
        return snap.requests, pages


def test_requests_do_not_grow_with_nodes(tmp_path: Path) -> None:
    small, small_pages = _requests_for(1, tmp_path)
    big, big_pages = _requests_for(30, tmp_path)
    assert big - big_pages == small - small_pages  # only the number of pages differs
    # 2 of them prove the server is Kubernetes (GET /version, GET /api); 1 is the certificates.k8s.io/v1 discovery
    # (K12's CertificateSigningRequests: the fake serves none, a real server adds their one LIST)
    assert small <= 19


def test_missing_crd_is_an_empty_list(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    fake_api.seed([o for o in sc.healthy(1).objects if o["kind"] != "ClusterPolicy"])
    fake_api.objects = {k: v for k, v in fake_api.objects.items() if k[4] != "clusterpolicies.nvidia.com"}
    fake_api.resources = {k: v for k, v in fake_api.resources.items() if k[0] != "nvidia.com"}
    snap = sc.collect_kube(fake_api, kubeconfig)
    assert snap.kube["ClusterPolicy"] == [] and not snap.errors


def test_forbidden_kind_is_recorded_and_its_checks_skip(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    sc.healthy(1).load(fake_api)
    fake_api.fail(r"^/api/v1/pods\?", 403)
    snap = sc.collect_kube(fake_api, kubeconfig)
    assert "403" in snap.errors["kubernetes:Pod"] and "Pod" not in snap.kube and snap.kube["Node"]
    findings = {f.id: f for f in sc.run_checks(snap)}
    assert findings["K00-api-unreachable"].status == "warn"
    assert findings["K07-pod-failures"].status == "skip"
    assert findings["K01-nodes-ready"].status == "pass"


def test_api_timeout_is_unreachable(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    fake_api.delay(r"^/api/v1", 10)
    snap = sc.collect_kube(fake_api, kubeconfig, timeout=2)
    assert "kubernetes" in snap.errors and not snap.kube


def test_events_only_for_failing_objects_and_logs_bounded(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    s = sc.healthy(30)
    for p in s.pods("nvidia-device-plugin-daemonset-"):
        sc._crashloop(p)
        s.logs[("gpu-operator", p["metadata"]["name"], "nvidia-device-plugin-ctr")] = "\n".join(map(str, range(500)))
    healthy_pod = s.pods("kube-proxy-")[0]
    s.objects.append(sc._event(healthy_pod, "Unhealthy", "probe failed once"))
    s.objects.append(sc._event(s.pods("nvidia-device-plugin-daemonset-")[0], "BackOff", "Back-off restarting"))
    s.load(fake_api)
    snap = sc.collect_kube(fake_api, kubeconfig)
    assert [e["reason"] for e in snap.events] == ["BackOff"]
    assert len(snap.pod_logs) == 20
    assert all(len(t.splitlines()) == 100 for t in snap.pod_logs.values())
    log_requests = [r for r in fake_api.requests if r[1].split("?")[0].endswith("/log")]
    assert len(log_requests) <= 40
