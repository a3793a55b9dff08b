"""Issue 28's control-plane hardening, proven on a real kube-apiserver 1.36.5 and etcd.

A control plane of this module's own (:func:`tests.controlplane.cluster.gpustack_config` ``hardened=True``: gpustack's
default ``security:``) started from gpustack's kubeadm configuration, its EncryptionConfiguration, audit policy and
AdmissionConfiguration rendered by gpustack (gpustack/render/security.py) with a key from gpustack's key store:

- a Secret created through the API server is stored in etcd encrypted (``k8s:enc:secretbox:v1:<key name>:``), read
  back from etcd itself through its v3 API (the JSON gateway etcd serves on its client port, with kubeadm's etcd
  client certificate), and the API server still returns it in clear;
- the audit log has a line for that request, at ``Metadata`` (no request or response body);
- a privileged pod is refused in an unlabelled namespace (``baseline`` enforced) and admitted in the GPU Operator's
  namespace as gpustack creates it (labelled ``privileged``); a pod shaped like node-exporter's likewise in the
  monitoring namespace;
- the API server runs with the flags gpustack sets (profiling off, the CIS cipher suites);
- doctor's ``security`` layer (CIS items from the control plane's mirror pods) finds no failure in the static pods
  the real kubeadm writes from gpustack's default configuration, mirrored into the real API server, and exactly the
  relaxed checks of a relaxed configuration;
- ``gpustack secrets rotate-key``'s steps leave every Secret readable (last: it restarts the API server).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack.constants import GPU_NAMESPACE, MONITORING_NAMESPACE
from gpustack.diagnose.checks_security_files import RULES as FILE_RULES
from gpustack.diagnose.cis_kubelet import RULES as KUBELET_RULES
from gpustack.render import security
from gpustack.render.manifests import render_manifests
from tests.controlplane import kubeadm_phases as kp
from tests.controlplane.cluster import NODE, ControlPlane, gpustack_config, running
from tests.controlplane.servers import Server

#: the security layer's checks that read host facts (judged in tests/unit/diagnose/test_security_files.py, and
#: test_security_kubelet.py with the real kubeadm's kubelet config: test_kubelet_config.py)
HOST_FACT_CHECKS = {r.check_id for r in FILE_RULES} | {r.check_id for r in KUBELET_RULES}


@pytest.fixture(scope="module")
def hardened(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with running(tmp_path_factory.mktemp("controlplane-hardened"), gpustack_config(hardened=True)) as cp:
        yield cp


def api(cp: ControlPlane) -> Server:
    return Server("real", cp.url, tls=cp.admin_tls())


def etcd_value(cp: ControlPlane, key: str) -> bytes:
    """The raw value etcd holds under ``key``, through etcd's own v3 API (``POST /v3/kv/range``)."""
    ctx = ssl.create_default_context(cafile=str(cp.pki / "etcd/ca.crt"))
    ctx.load_cert_chain(str(cp.pki / "etcd/healthcheck-client.crt"), str(cp.pki / "etcd/healthcheck-client.key"))
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
    req = urllib.request.Request(f"https://{kp.LOOPBACK}:{cp.ports.etcd_client}/v3/kv/range", data=body,
                                 method="POST", headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        answer = json.loads(resp.read())
    kvs = answer.get("kvs") or []
    assert len(kvs) == 1, f"etcd has no key {key}: {answer}"
    return base64.b64decode(kvs[0]["value"])


def audit_events(cp: ControlPlane) -> list[dict[str, Any]]:
    path = kp.host_path(security.AUDIT_LOG, cp.pki)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def namespace(server: Server, name: str, labels: dict[str, str] | None = None) -> None:
    obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
    answer = server.call("POST", "/api/v1/namespaces", obj)
    assert answer.code == 201, answer.body


def privileged_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "securityContext": {"privileged": True}}]}}  # fmt: skip


def test_api_server_runs_with_gpustacks_flags(hardened: ControlPlane) -> None:
    args = [str(a) for a in hardened.processes["kube-apiserver"].args]  # type: ignore[union-attr]
    flags = dict(a.removeprefix("--").partition("=")[::2] for a in args[1:])
    assert flags["profiling"] == "false"
    assert flags["service-account-extend-token-expiration"] == "false"
    assert flags["tls-cipher-suites"].split(",") == list(gpustack_config(hardened=True).security.tls_cipher_suites)
    assert Path(flags["encryption-provider-config"]) == kp.host_path(security.ENCRYPTION_CONFIG, hardened.pki)
    assert Path(flags["encryption-provider-config"]).stat().st_mode & 0o777 == 0o600
    for component in ("kube-controller-manager", "kube-scheduler"):
        assert "--profiling=false" in [str(a) for a in hardened.processes[component].args]  # type: ignore[union-attr]


def test_a_secret_is_stored_encrypted_in_etcd(hardened: ControlPlane) -> None:
    server = api(hardened)
    namespace(server, "enc-test")
    plain = "gpustack-plain-text-marker-7c1e"
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"}, "stringData": {"password": plain}}
    assert server.call("POST", "/api/v1/namespaces/enc-test/secrets", secret).code == 201

    stored = etcd_value(hardened, "/registry/secrets/enc-test/s1")
    keys = json.loads((hardened.workdir / "state/clusters/gpustack/encryption-keys.json").read_text())["keys"]
    assert stored.startswith(f"{security.SECRETBOX_PREFIX}{keys[0]['name']}:".encode()), stored[:60]
    assert plain.encode() not in stored
    # the API server decrypts it
    answer = server.call("GET", "/api/v1/namespaces/enc-test/secrets/s1")
    assert base64.b64decode(answer.body["data"]["password"]).decode() == plain
    # a ConfigMap is not a Secret: stored as the API server's protobuf, unencrypted (the configuration names secrets)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1"}, "data": {"k": plain}}
    assert server.call("POST", "/api/v1/namespaces/enc-test/configmaps", cm).code == 201
    assert plain.encode() in etcd_value(hardened, "/registry/configmaps/enc-test/c1")


def test_the_audit_log_has_the_request_without_its_body(hardened: ControlPlane) -> None:
    server = api(hardened)
    namespace(server, "audit-test")
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "audited"}, "stringData": {"k": "v"}}
    assert server.call("POST", "/api/v1/namespaces/audit-test/secrets", secret).code == 201
    deadline = time.monotonic() + 30  # the audit backend writes in batches
    while True:
        found = [e for e in audit_events(hardened)
                 if (e.get("objectRef") or {}).get("name") == "audited" and e.get("verb") == "create"]  # fmt: skip
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert found, "no audit event for the Secret's create"
    event = found[0]
    assert event["level"] == "Metadata" and event["stage"] == "ResponseComplete"
    assert event["objectRef"]["resource"] == "secrets" and event["responseStatus"]["code"] == 201
    assert "requestObject" not in event and "responseObject" not in event
    # the health endpoints the fixture polls are left out (level None)
    assert not [e for e in audit_events(hardened) if str(e.get("requestURI", "")).startswith("/readyz")]


def test_pod_security_baseline_is_enforced_and_a_privileged_namespace_admits(hardened: ControlPlane) -> None:
    server = api(hardened)
    namespace(server, "psa-plain")
    refused = server.call("POST", "/api/v1/namespaces/psa-plain/pods", privileged_pod("p"))
    assert refused.code == 403, refused.body
    assert 'violates PodSecurity "baseline:latest"' in refused.body["message"]
    assert "privileged" in refused.body["message"]

    # the GPU Operator's namespace as gpustack creates it (gpustack/templates/manifests/namespaces.yaml.j2)
    cfg = gpustack_config(hardened=True)
    ns = next(o for o in render_manifests(cfg)["namespaces.yaml"] if o["metadata"]["name"] == GPU_NAMESPACE)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert server.call("POST", "/api/v1/namespaces", ns).code == 201
    admitted = server.call("POST", f"/api/v1/namespaces/{GPU_NAMESPACE}/pods", privileged_pod("p"))
    assert admitted.code == 201, admitted.body
    # warn: restricted -- the admitted pod still carries the warning header of the restricted level
    assert "restricted:latest" in admitted.headers.get("Warning", ""), admitted.headers
    assert server.call("DELETE", f"/api/v1/namespaces/{GPU_NAMESPACE}/pods/p").code == 200


def node_exporter_pod(name: str) -> dict[str, Any]:
    """What prometheus-node-exporter's DaemonSet makes: host network and PID namespace, the host's root mounted."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"hostNetwork": True, "hostPID": True,
                     "containers": [{"name": "node-exporter", "image": "quay.io/prometheus/node-exporter:v1.12.1",
                                     "volumeMounts": [{"name": "root", "mountPath": "/host/root", "readOnly": True}]}],
                     "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}  # fmt: skip


def test_node_exporter_runs_in_the_monitoring_namespace_gpustack_creates(hardened: ControlPlane) -> None:
    server = api(hardened)
    namespace(server, "psa-plain-2")
    refused = server.call("POST", "/api/v1/namespaces/psa-plain-2/pods", node_exporter_pod("ne"))
    assert refused.code == 403 and "host namespaces" in refused.body["message"], refused.body
    ns = next(o for o in render_manifests(gpustack_config(hardened=True))["namespaces.yaml"]
              if o["metadata"]["name"] == MONITORING_NAMESPACE)  # fmt: skip
    assert server.call("POST", "/api/v1/namespaces", ns).code == 201
    admitted = server.call("POST", f"/api/v1/namespaces/{MONITORING_NAMESPACE}/pods", node_exporter_pod("ne"))
    assert admitted.code == 201, admitted.body


def etcd_put(cp: ControlPlane, key: str, value: bytes) -> None:
    """Write ``value`` under ``key`` in etcd itself (``POST /v3/kv/put``), past the API server."""
    ctx = ssl.create_default_context(cafile=str(cp.pki / "etcd/ca.crt"))
    ctx.load_cert_chain(str(cp.pki / "etcd/healthcheck-client.crt"), str(cp.pki / "etcd/healthcheck-client.key"))
    body = json.dumps({"key": base64.b64encode(key.encode()).decode(), "value": base64.b64encode(value).decode()})
    req = urllib.request.Request(f"https://{kp.LOOPBACK}:{cp.ports.etcd_client}/v3/kv/put", data=body.encode(),
                                 method="POST", headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        assert resp.status == 200


def test_rewriting_every_secret_encrypts_those_stored_in_clear(hardened: ControlPlane) -> None:
    """A Secret stored before encryption was turned on (in clear: written into etcd directly, as the API server
    wrote it with no EncryptionConfiguration) is read through ``identity``; gpustack's rewrite stores it encrypted."""
    from gpustack.cluster.secrets import rewrite_secrets
    from gpustack.runners.kubeconfig import kube_from_file

    server = api(hardened)
    namespace(server, "legacy")
    old = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
           "metadata": {"name": "old", "namespace": "legacy", "uid": "8d0a5f7e-6f1c-4a55-9d43-3c6f1a0e0b01",
                        "creationTimestamp": "2026-01-01T00:00:00Z"},
           "data": {"token": base64.b64encode(b"written-before-encryption").decode()}}  # fmt: skip
    etcd_put(hardened, "/registry/secrets/legacy/old", json.dumps(old).encode())
    assert etcd_value(hardened, "/registry/secrets/legacy/old").startswith(b"{")  # in clear
    got = server.call("GET", "/api/v1/namespaces/legacy/secrets/old")
    assert got.code == 200 and base64.b64decode(got.body["data"]["token"]) == b"written-before-encryption"

    result = rewrite_secrets(kube_from_file(hardened.admin_kubeconfig, request_timeout=30))
    assert result.rewritten >= 1 and result.raced == []
    stored = etcd_value(hardened, "/registry/secrets/legacy/old")
    assert stored.startswith(security.SECRETBOX_PREFIX.encode()) and b"written-before-encryption" not in stored
    got = server.call("GET", "/api/v1/namespaces/legacy/secrets/old")
    assert base64.b64decode(got.body["data"]["token"]) == b"written-before-encryption"
    assert got.body["metadata"]["uid"] == old["metadata"]["uid"]  # the same object, not a new one


#: the CIS checks gpustack leaves on every cluster (docs/configuration.md): doctor's only warnings on a default one
LEFT = {"S1.2.1-apiserver-anonymous-auth"}


def mirror_pods(pki: Path) -> list[dict[str, Any]]:
    """The static pods the real kubeadm wrote for the fixture (``kubeadm init phase control-plane``/``etcd local``
    from gpustack's configuration), as the kubelet mirrors them into kube-system: the manifest's labels and spec,
    bound to the node."""
    pods = []
    for component in kp.COMPONENTS:
        manifest = yaml.safe_load((pki / f"{component}.yaml").read_text())
        pods.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"{component}-{NODE}", "namespace": "kube-system",
                                  "labels": manifest["metadata"]["labels"]},
                     "spec": {**manifest["spec"], "nodeName": NODE}})  # fmt: skip
    return pods


def doctor_security(kubeconfig: Path, workdir: Path) -> dict[str, Any]:
    """``gpustack doctor --layer security -o json`` in its own process, as a user runs it (no gpustack.yaml)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_") and k != "KUBECONFIG"}
    env.update(GPUSTACK_STATE_DIR=str(workdir / "state"), HOME=str(workdir), NO_COLOR="1")
    proc = subprocess.run([sys.executable, "-m", "gpustack", "doctor", "--kubeconfig", str(kubeconfig), "--layer",
                           "security", "--output", "json"], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    report = json.loads(proc.stdout)
    report["exit"] = proc.returncode
    return report


def test_doctor_security_layer_judges_the_real_kubeadm_manifests(hardened: ControlPlane, tmp_path: Path) -> None:
    """The real kubeadm 1.36.5's static pods from gpustack's default configuration, mirrored into the real API
    server's kube-system: doctor's security layer reads them through the API and finds no CIS failure; the only
    warnings are the checks gpustack leaves (docs/configuration.md)."""
    server = api(hardened)
    pods = mirror_pods(hardened.pki)
    for pod in pods:
        answer = server.call("POST", "/api/v1/namespaces/kube-system/pods", pod)
        assert answer.code == 201, answer.body
    try:
        report = doctor_security(hardened.admin_kubeconfig, tmp_path)
    finally:
        for pod in pods:
            name = pod["metadata"]["name"]
            server.call("DELETE", f"/api/v1/namespaces/kube-system/pods/{name}?gracePeriodSeconds=0")
    # the file and kubelet checks read host facts, which `--layer security` alone does not collect (no SSH): each skips
    files = HOST_FACT_CHECKS
    assert {(c["id"], c["status"]) for c in report["checks"] if c["id"] in files} == {(c, "skip") for c in files}
    checks = [c for c in report["checks"] if c["id"] not in files]
    assert report["exit"] == 0 and report["summary"]["fail"] == 0, checks
    assert {(c["id"], c["status"]) for c in checks if c["status"] != "pass"} == {(c, "warn") for c in LEFT}
    passed = {c["id"]: c["summary"] for c in checks if c["status"] == "pass"}
    assert len(passed) == 39  # 1.2.5 too: the kubelets serve CA-signed certificates (serverTLSBootstrap)
    assert passed["S1.2.15-apiserver-profiling"] == "CIS 1.2.15: --profiling=false"
    assert passed["S1.2.27-apiserver-encryption-provider-config"] == (
        "CIS 1.2.27: --encryption-provider-config=/etc/kubernetes/enc/encryption-config.yaml"
    )
    assert passed["S2.2-etcd-client-cert-auth"] == "CIS 2.2: --client-cert-auth=true"


def test_the_relaxed_configurations_manifests_warn_exactly_their_checks(tmp_path: Path) -> None:
    """The real kubeadm's manifests from the shared fixture's configuration (``cluster.RELAXED``: no encryption, no
    audit log): judged with that configuration, exactly the checks its settings relax warn (naming the setting);
    judged with gpustack's defaults, the same checks fail."""
    from gpustack.config.model import Config
    from gpustack.diagnose import registry
    from gpustack.diagnose.snapshot import Snapshot
    from tests.controlplane.cluster import free_ports, kubeadm_phases

    cfg = gpustack_config()
    kubeadm_phases(tmp_path, cfg, free_ports())  # the real kubeadm's dry run only: nothing is started
    pods = mirror_pods(tmp_path / "pki")
    specs = [s for s in registry.select("doctor", layers=["security"]) if s.id not in HOST_FACT_CHECKS]

    def judged(settings: Config) -> set[tuple[str, str]]:
        snap = Snapshot(kube={"Pod": pods}, settings={"security": settings.security.model_dump(mode="json")})
        return {(f.id, f.status) for f in registry.run(specs, snap) if f.status != "pass"}

    relaxed = {"S1.2.16-apiserver-audit-log-path", "S1.2.17-apiserver-audit-log-maxage",
               "S1.2.18-apiserver-audit-log-maxbackup", "S1.2.19-apiserver-audit-log-maxsize",
               "S1.2.27-apiserver-encryption-provider-config"}  # fmt: skip
    assert judged(cfg) == {(c, "warn") for c in relaxed | LEFT}
    assert judged(Config()) == {(c, "fail") for c in relaxed} | {(c, "warn") for c in LEFT}


def restart_api_server(cp: ControlPlane) -> None:
    """Stop the API server and start it again with the same flags, as the kubelet restarts a static pod whose
    files changed (test_certificates.py does the same)."""
    proc = cp.processes["kube-apiserver"]
    args = [str(a) for a in proc.args]  # type: ignore[union-attr]
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)
    cp.spawn("kube-apiserver", args)
    cp.wait_healthy("kube-apiserver", f"{cp.url}/readyz", cp.admin_tls())


def test_key_rotation_leaves_every_secret_readable(hardened: ControlPlane) -> None:
    """`gpustack secrets rotate-key`'s steps (gpustack/cluster/key_rotation.py), each phase's configuration rendered
    by gpustack and given to the real API server between them as the command's Ansible stages do (the file written,
    the API server restarted), the Secrets rewritten by gpustack through the real API: every Secret stays readable,
    a run cut off after the promotion is finished by the next one without a second key, and at the end each Secret
    is stored with the new key and the old key is gone. Last in this module: it restarts the API server."""
    from gpustack.cluster import key_rotation as kr
    from gpustack.render.encryption_keys import load_keys, rotation_phase
    from gpustack.runners.kubeconfig import kube_from_file

    cfg, state = gpustack_config(hardened=True), hardened.workdir / "state"
    server = api(hardened)
    namespace(server, "rotate")
    kube = kube_from_file(hardened.admin_kubeconfig, request_timeout=30)

    def secret(name: str) -> None:
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {"v": name}}
        assert server.call("POST", "/api/v1/namespaces/rotate/secrets", body).code == 201

    def apply() -> list[security.EncryptionKey]:
        """What the command's add/write-new/drop-old stages do on a control plane: the key file's keys applied."""
        keys = load_keys(cfg, state)
        kp.host_path(security.ENCRYPTION_CONFIG, hardened.pki).write_text(security.render_encryption_config(keys))
        restart_api_server(hardened)
        return keys

    def readable(names: list[str]) -> None:
        for name in names:
            got = api(hardened).call("GET", f"/api/v1/namespaces/rotate/secrets/{name}")
            assert got.code == 200 and base64.b64decode(got.body["data"]["v"]).decode() == name, got.body

    def key_of(name: str) -> str:
        stored = etcd_value(hardened, f"/registry/secrets/rotate/{name}")
        assert stored.startswith(security.SECRETBOX_PREFIX.encode())
        return stored[len(security.SECRETBOX_PREFIX) :].split(b":", 1)[0].decode()

    secret("before")
    assert kr.begin(cfg, state).changed  # added: the new key second (read only)
    keys = apply()
    old, new = keys[0].name, keys[1].name
    assert rotation_phase(cfg, state) == "added" and old != new
    secret("added")
    readable(["before", "added"])
    assert key_of("added") == old

    assert kr.promote(cfg, state).changed  # promoted: Secrets written with the new key
    assert apply()[0].name == new
    secret("promoted")
    readable(["before", "added", "promoted"])
    assert (key_of("before"), key_of("promoted")) == (old, new)
    # cut off here: the next run applies the recorded keys again and goes on, with no second new key
    assert not kr.begin(cfg, state).changed and [k.name for k in apply()] == [new, old]
    assert not kr.promote(cfg, state).changed

    got = kr.rewrite(cfg, kube, state)
    assert got.rewritten is not None and got.rewritten.rewritten >= 3 and got.rewritten.raced == []
    assert {key_of(n) for n in ("before", "added", "promoted")} == {new}
    assert rotation_phase(cfg, state) == "removed"

    assert [k.name for k in apply()] == [new]  # the old key removed
    assert kr.finish(cfg, state).changed and rotation_phase(cfg, state) is None
    readable(["before", "added", "promoted"])
    # every Secret of the cluster (other tests' too) is still readable with the old key gone
    listed = server.call("GET", "/api/v1/secrets")
    assert listed.code == 200 and len(listed.body["items"]) >= 3
    for item in listed.body["items"]:
        meta = item["metadata"]
        got_one = server.call("GET", f"/api/v1/namespaces/{meta['namespace']}/secrets/{meta['name']}")
        assert got_one.code == 200, got_one.body
    assert all(key_of(n) == new for n in ("before", "added", "promoted"))
