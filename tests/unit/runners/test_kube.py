"""Server-side apply, discovery and waits with the real kubernetes client against tests/fakes/kube_api.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from gpustack.diagnose.collect_kube import CountingKube
from gpustack.errors import ClusterUnreachableError
from gpustack.runners.kube import (
    FIELD_MANAGER,
    ApiUnreachable,
    Kube,
    KubeError,
    WaitTimeout,
    single_try_client,
    wait_until,
)
from gpustack.runners.kube_proof import NotKubernetesAPI
from gpustack.runners.kubeconfig import kube_from_file
from tests.fakes import not_kube
from tests.fakes.kube_api import FakeKubeAPI

NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}}


def cm(data: dict[str, str], ns: str = "monitoring") -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": ns}, "data": data}


SM = {
    "apiVersion": "monitoring.coreos.com/v1",
    "kind": "ServiceMonitor",
    "metadata": {"name": "dcgm-exporter", "namespace": "monitoring"},
    "spec": {"selector": {"matchLabels": {"a": "b"}}, "endpoints": [{"port": "metrics"}]},
}
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "names": {"kind": "ServiceMonitor", "plural": "servicemonitors"},
        "scope": "Namespaced",
        "versions": [{"name": "v1", "served": True, "storage": True}],
    },
}


def test_apply_is_server_side_and_idempotent(fake_api: FakeKubeAPI, kube: Kube) -> None:
    ns, obj = kube.apply([NS, cm({"a": "1"})])
    assert ns["status"]["phase"] == "Active"
    assert obj["data"] == {"a": "1"} and obj["metadata"]["uid"]
    patches = [r for r in fake_api.requests if r[0] == "PATCH"]
    assert patches and all(r[2] == "application/apply-patch+yaml" for r in patches)
    assert all(f"fieldManager={FIELD_MANAGER}" in r[1] and "force=true" in r[1] for r in patches)
    again = kube.apply_one(cm({"a": "1"}))
    assert again["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    assert fake_api.get("v1", "ConfigMap", "x", "monitoring") == again


def test_apply_merges_and_drops_fields_it_no_longer_sets(fake_api: FakeKubeAPI, kube: Kube) -> None:
    kube.apply([NS, cm({"a": "1", "b": "2"})])
    # Another manager adds a key; gpustack's next apply keeps it and removes what gpustack dropped.
    fake_api.handle(
        "PATCH",
        "/api/v1/namespaces/monitoring/configmaps/x?fieldManager=kubectl",
        "application/apply-patch+yaml",
        b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"monitoring"},"data":{"c":"3"}}',
    )
    out = kube.apply_one(cm({"a": "10"}))
    assert out["data"] == {"a": "10", "c": "3"}


def test_apply_forces_conflicts(fake_api: FakeKubeAPI, kube: Kube) -> None:
    kube.apply([NS])
    fake_api.handle(
        "PATCH",
        "/api/v1/namespaces/monitoring/configmaps/x?fieldManager=someone",
        "application/apply-patch+yaml",
        b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"monitoring"},"data":{"a":"hand"}}',
    )
    assert kube.apply_one(cm({"a": "gpustack"}))["data"]["a"] == "gpustack"


def test_missing_namespace_is_a_clear_error(kube: Kube) -> None:
    with pytest.raises(KubeError, match=r'ConfigMap nope/x failed: namespaces "nope" not found') as info:
        kube.apply_one(cm({}, ns="nope"))
    assert info.value.status == 404


def test_custom_kind_needs_its_crd_then_is_discovered(kube: Kube, fake_api: FakeKubeAPI) -> None:
    kube.apply([NS])
    with pytest.raises(KubeError, match="does not serve ServiceMonitor"):
        kube.apply_one(SM)
    assert kube.resource("monitoring.coreos.com/v1", "ServiceMonitor") is None
    kube.apply_one(CRD)
    assert kube.crd_established("servicemonitors.monitoring.coreos.com")
    stored = kube.apply_one(SM)
    assert stored["spec"]["endpoints"] == [{"port": "metrics"}]
    assert ("GET", "/apis/monitoring.coreos.com/v1", "application/json") in fake_api.requests
    assert (
        kube.list_objects("monitoring.coreos.com/v1", "ServiceMonitor", "monitoring")[0]["metadata"]["name"]
        == "dcgm-exporter"
    )
    assert kube.get("monitoring.coreos.com/v1", "ServiceMonitor", "absent", "monitoring") is None
    assert kube.delete("monitoring.coreos.com/v1", "ServiceMonitor", "dcgm-exporter", "monitoring")
    assert not kube.delete("monitoring.coreos.com/v1", "ServiceMonitor", "dcgm-exporter", "monitoring")


def test_wait_for_crds_until_established(tmp_path: Path) -> None:
    import time

    with FakeKubeAPI.running(crd_establish_delay=0.6) as fake_api:
        kube = kube_from_file(fake_api.write_kubeconfig(tmp_path / "kc"))
        kube.apply_one(CRD)
        assert not kube.crd_established("servicemonitors.monitoring.coreos.com")
        start = time.monotonic()
        kube.wait_for_crds(["servicemonitors.monitoring.coreos.com"], start + 5, interval=0.1)
        assert 0.4 < time.monotonic() - start < 5
        with pytest.raises(WaitTimeout, match=r"prometheusrules\.monitoring\.coreos\.com"):
            kube.wait_for_crds(["prometheusrules.monitoring.coreos.com"], time.monotonic() + 0.3, interval=0.1)


def test_wait_until_deadline_with_fake_clock() -> None:
    now = [0.0]
    calls: list[float] = []

    def sleep(s: float) -> None:
        now[0] += s

    def never() -> None:
        calls.append(now[0])

    with pytest.raises(WaitTimeout, match="timed out waiting for thing"):
        wait_until(never, 5.0, what="thing", interval=2.0, clock=lambda: now[0], sleep=sleep)
    assert calls == [0.0, 2.0, 4.0, 5.0]
    assert wait_until(lambda: "ok", -1.0, what="x", clock=lambda: 0.0) == "ok"  # already true: no timeout


def test_unreachable_api(tmp_path: Path) -> None:
    with FakeKubeAPI.running() as fake_api:
        kc = fake_api.write_kubeconfig(tmp_path / "kc")
    kube = kube_from_file(kc, request_timeout=1)
    kube.api.configuration.retries = 0
    with pytest.raises(ClusterUnreachableError, match="unreachable"):
        kube.apply_one(NS)


def test_raw_reads_at_most_the_limit_and_returns_any_status(fake_api: FakeKubeAPI, kube: Kube) -> None:
    fake_api.seed([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                    "spec": {"containers": [{"name": "c"}]}}])  # fmt: skip
    fake_api.set_log("default", "p", "c", "".join(f"line {i}\n" for i in range(100)))
    path = "/api/v1/namespaces/default/pods/p/log"
    whole = kube.raw("GET", path, limit=1 << 20)
    assert whole.status == 200 and not whole.truncated and whole.body.endswith(b"line 99\n")
    cut = kube.raw("GET", path, query=[("tailLines", "3")], limit=10)
    assert cut.truncated and cut.body == b"line 97\nli"
    missing = kube.raw("GET", "/api/v1/namespaces/default/pods/nope/log", limit=4096, timeout=2)
    assert missing.status == 404 and b"not found" in missing.body  # a status, not an exception: callers decide


def test_raw_and_list_all_unreachable_is_exit_3_with_the_transport_error(tmp_path: Path) -> None:
    with FakeKubeAPI.running() as fake_api:
        kc = fake_api.write_kubeconfig(tmp_path / "kc")
    kube = kube_from_file(kc, request_timeout=1)
    kube.api.configuration.retries = 0
    with pytest.raises(ApiUnreachable) as exc:
        kube.raw("GET", "/api/v1/nodes", limit=100)
    assert exc.value.exit_code == 3 and exc.value.detail and exc.value.detail in exc.value.message
    with pytest.raises(ClusterUnreachableError, match="unreachable"):
        kube.list_all("/api/v1/nodes")


def test_single_try_client_keeps_the_credentials_and_drops_read_retries(kube: Kube) -> None:
    api = single_try_client(kube.api)
    assert api is not kube.api and api.configuration.host == kube.api.configuration.host
    assert api.configuration.retries.read == 0 and kube.api.configuration.retries != api.configuration.retries


# --- issue 26: a server that is not Kubernetes is named as such ----------------------------------------------


@pytest.mark.parametrize("kind", not_kube.KINDS)
def test_a_server_that_is_not_kubernetes_is_named_before_any_read(kind: str, tmp_path: Path) -> None:
    """A 404 on discovery or a LIST was "kind not served, empty list": against a web server every check passed."""
    with not_kube.serving(kind) as server:
        kube = kube_from_file(server.write_kubeconfig(tmp_path / "kc"), request_timeout=5)
        for read in (lambda: kube.list_objects("v1", "Node"), lambda: kube.get("v1", "Namespace", "default"),
                     lambda: kube.resource("v1", "Pod"), lambda: kube.list_all("/api/v1/pods"),
                     lambda: kube.raw("GET", "/api/v1/nodes", limit=100), kube.server_version):  # fmt: skip
            with pytest.raises(NotKubernetesAPI) as exc:
                read()
            assert exc.value.message == f"not a Kubernetes API server at {server.url}: {not_kube.REASONS[kind]}"
            assert exc.value.exit_code == 3 and isinstance(exc.value, ClusterUnreachableError)
    # asked once for the whole client: /version, and /api only when /version looked like Kubernetes
    assert server.paths == (["/version", "/api"] if kind == "api-404" else ["/version"])


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")  # the kubeconfig skips verification
def test_https_404_server_too(tmp_path: Path) -> None:
    with not_kube.serving("404", tls=True) as server:
        kube = kube_from_file(server.write_kubeconfig(tmp_path / "kc"), request_timeout=5)
        with pytest.raises(NotKubernetesAPI, match=rf"^not a Kubernetes API server at {server.url}: GET /version "):
            kube.list_objects("v1", "Node")
    assert server.url.startswith("https://")


def test_kubernetes_is_proven_once_per_connection(fake_api: FakeKubeAPI, kube: Kube) -> None:
    assert kube.prove_kubernetes() == fake_api.version
    kube.list_objects("v1", "Node")
    assert kube.server_version() == fake_api.version  # the probe's answer: not asked again
    counting = CountingKube(kube, request_timeout=2)  # shares the verdict of the client it wraps
    counting.list_all("/api/v1/pods")
    asked = [p for _, p, _ in fake_api.requests]
    assert asked.count("/version") == 1 and asked.count("/api") == 1 and asked[:2] == ["/version", "/api"]
    assert counting.count == 1


def test_a_kube_apiserver_refusing_the_token_is_not_called_something_else(tmp_path: Path) -> None:
    """401/403 come from Kubernetes: the refusal is reported as before (the request's own 401)."""
    with not_kube.serving("refusing") as server:
        kube = kube_from_file(server.write_kubeconfig(tmp_path / "kc"), request_timeout=5)
        assert kube.prove_kubernetes() == ""
        with pytest.raises(ApiException) as exc:  # discovery's own answer, as before the probe existed
            kube.list_objects("v1", "Node")
        assert exc.value.status == 401 and "Unauthorized" in str(exc.value.body)
        with pytest.raises(KubeError, match="GET /version: Unauthorized"):
            kube.server_version()
    assert server.paths == ["/version", "/api/v1", "/version"]  # the probe, discovery, server_version's own GET


def test_nothing_answering_the_probe_decides_nothing(fake_api: FakeKubeAPI, kube: Kube) -> None:
    kube = Kube(single_try_client(kube.api), request_timeout=1)
    fake_api.delay(r"^/version", 3, times=1)
    with pytest.raises(ApiUnreachable):
        kube.list_objects("v1", "Node")
    assert kube.proof.verdict is None
    assert kube.list_objects("v1", "Node") == []  # asked again, and proven
    assert kube.proof.verdict is not None and kube.proof.verdict.version == fake_api.version
