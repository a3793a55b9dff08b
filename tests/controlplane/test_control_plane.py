"""The control plane itself: the versions production runs, kubeadm's security settings, GPU nodes the real
scheduler places pods on, and a clean stop."""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import subprocess
import time
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from gpustack.config import pins
from gpustack.runners.kubeconfig import kube_from_file
from tests.realbin.gobuild import MODULES, binary, go_download

from . import kubeadm_phases as kp
from .cluster import ControlPlane, ControlPlaneError, kubectl, running
from .nodes import gpu_node

PINNED = f"v{pins.KUBERNETES[pins.KUBERNETES_DEFAULT]}"


def version_of(name: str, *args: str) -> str:
    out = subprocess.run([str(binary(name)), *args], capture_output=True, text=True, timeout=60, check=True)
    return out.stdout + out.stderr


@pytest.mark.parametrize("name", ["kube-apiserver", "kube-controller-manager", "kube-scheduler"])
def test_components_report_the_pinned_kubernetes(name: str) -> None:
    assert version_of(name, "--version").strip() == f"Kubernetes {PINNED}"


def test_kubeadm_is_the_pinned_release_and_etcd_the_one_it_deploys() -> None:
    assert version_of("kubeadm", "version", "-o", "short").strip() == PINNED
    images = version_of("kubeadm", "config", "images", "list", f"--kubernetes-version={PINNED}")
    etcd_tag = re.search(r"/etcd:(\d+\.\d+\.\d+)-\d+", images)
    assert etcd_tag, images
    assert re.search(r"^etcd Version: (\S+)$", version_of("etcd", "--version"), re.M).group(1) == etcd_tag.group(1)  # type: ignore[union-attr]


def test_kwok_is_the_module_version() -> None:
    assert f"kwok version {MODULES['kwok'].version} " in version_of("kwok", "--version")


def test_kwok_stages_come_from_its_module() -> None:
    stages = go_download(MODULES["kwok"], MODULES["kwok"].upstream) / "kustomize" / "stage" / "fast"
    assert (stages / "kustomization.yaml").is_file()


def test_the_api_server_answers_as_the_pinned_release(control_plane: ControlPlane) -> None:
    kube = kube_from_file(control_plane.admin_kubeconfig)
    assert kube.server_version() == PINNED
    # what gpustack's one client path reads first: discovery of the core group
    assert "v1" in kube.request("GET", "/api")["versions"]


def test_kubeadm_flags_from_gpustacks_configuration(control_plane: ControlPlane) -> None:
    """The API server runs with what kubeadm derives from gpustack's kubeadm configuration: Node and RBAC
    authorisation, NodeRestriction, client-certificate authentication."""
    args = control_plane.processes["kube-apiserver"].args
    assert "--authorization-mode=Node,RBAC" in args
    assert "--enable-admission-plugins=NodeRestriction" in args
    assert f"--client-ca-file={control_plane.pki / 'ca.crt'}" in args


def test_anonymous_and_unbound_users_are_refused(control_plane: ControlPlane) -> None:
    """RBAC is real: the kubelet's client certificate (group system:nodes) may not list Secrets cluster-wide, and
    anonymous requests see only the discovery documents."""
    with pytest.raises(ControlPlaneError, match="forbidden"):
        kubectl(control_plane, "get", "secrets", "-A", kubeconfig=control_plane.pki / "kubelet.conf")
    assert "yes" in kubectl(control_plane, "auth", "can-i", "list", "nodes")


def test_the_real_scheduler_places_gpu_pods_on_kwok_nodes(control_plane: ControlPlane) -> None:
    node = gpu_node("cp-test-gpu-1", gpus=2)
    kubectl(control_plane, "create", "-f", "-", stdin=json.dumps(node))
    try:
        ns = "cp-test-sched"
        kubectl(control_plane, "create", "namespace", ns)
        for name, gpus in (("fits", 2), ("too-big", 3)):
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                   "spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04",
                                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}  # fmt: skip
            kubectl(control_plane, "create", "-f", "-", stdin=json.dumps(pod))
        fits = wait_pod(control_plane, ns, "fits", lambda p: p["status"].get("phase") == "Running")
        assert fits["spec"]["nodeName"] == "cp-test-gpu-1"
        big = wait_pod(control_plane, ns, "too-big", lambda p: bool(p["status"].get("conditions")))
        cond = big["status"]["conditions"][0]
        assert (cond["type"], cond["status"], cond["reason"]) == ("PodScheduled", "False", "Unschedulable")
        assert "Insufficient nvidia.com/gpu" in cond["message"], cond
    finally:
        kubectl(control_plane, "delete", "namespace", "cp-test-sched", "--wait=false", "--ignore-not-found")
        kubectl(control_plane, "delete", "node", "cp-test-gpu-1", "--ignore-not-found")


def wait_pod(cp: ControlPlane, ns: str, name: str, ready: object, timeout: float = 60) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while True:
        pod = json.loads(kubectl(cp, "get", "pod", name, f"--namespace={ns}", "-o", "json"))
        if ready(pod):  # type: ignore[operator]
            return pod  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, f"pod {ns}/{name}: {json.dumps(pod['status'])}"
        time.sleep(0.3)


def processes_under(workdir: Path) -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(workdir) in cmdline:
            out.append(f"{pid}: {cmdline[:120]}")
    return out


def test_a_control_plane_starts_and_stops_leaving_nothing(tmp_path: Path) -> None:
    """A second control plane beside the shared one (its own ports): healthy in bounded time; a controller-manager
    that exits (as one does when it loses its leader lease) is started again, as the kubelet would; then every
    process ends at SIGTERM (none needs SIGKILL) and none is left."""
    with running(tmp_path / "cp") as cp:
        assert processes_under(tmp_path)
        assert cp.started_in["total"] < 120, cp.started_in
        first = cp.processes["kube-controller-manager"]
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        deadline = time.monotonic() + 30
        while cp.processes["kube-controller-manager"] is first and time.monotonic() < deadline:
            time.sleep(0.2)
        healthz = f"https://{kp.LOOPBACK}:{cp.ports.controller_manager}/healthz"
        cp.wait_healthy("kube-controller-manager", healthz, ssl._create_unverified_context(), timeout=120)
        assert cp.restarts == {"kube-controller-manager": 1} and cp.processes["kube-controller-manager"] is not first
        killed = cp.stop()
    assert killed == []
    assert processes_under(tmp_path) == []


def test_the_real_server_passes_gpustacks_kubernetes_proof_with_any_credentials(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """gpustack proves a server is Kubernetes by ``/version`` and ``/api`` (gpustack/runners/kube_proof.py). The
    real server: admin credentials prove it; a client with no credentials at all is anonymous, which kubeadm's API
    server lets read ``/version`` (system:public-info-viewer) but not ``/api`` (system:discovery is bound to
    authenticated users only): unproven, not "not Kubernetes", and the request itself then says 403."""
    admin = kube_from_file(control_plane.admin_kubeconfig)
    assert admin.prove_kubernetes() == PINNED
    assert admin.proof.verdict is not None and admin.proof.verdict.kind == "kubernetes"
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "anon",
           "clusters": [{"name": "c", "cluster": {"server": control_plane.url,
                                                  "certificate-authority": str(control_plane.pki / "ca.crt")}}],
           "users": [{"name": "anonymous", "user": {}}],
           "contexts": [{"name": "anon", "context": {"cluster": "c", "user": "anonymous"}}]}  # fmt: skip
    path = tmp_path / "anonymous.conf"
    path.write_text(json.dumps(cfg))
    anonymous = kube_from_file(path)
    assert anonymous.prove_kubernetes() == ""
    assert anonymous.proof.verdict is not None
    assert (anonymous.proof.verdict.kind, anonymous.proof.verdict.reason) == ("unproven", "GET /api answered 403")
    with pytest.raises(ApiException) as refused:  # discovery itself is refused: the CLI says "HTTP 403" (exit 1)
        anonymous.list_objects("v1", "Node")
    assert refused.value.status == 403
    assert 'User \\"system:anonymous\\" cannot get path \\"/api/v1\\"' in str(refused.value.body)


def test_the_not_kubernetes_doubles_imitate_what_the_real_server_answers(control_plane: ControlPlane) -> None:
    """tests/fakes/not_kube.py's ``refusing`` server answers a bad token as the real API server does, and its
    ``api-404`` server's ``/version`` is the real server's (the other kinds imitate no Kubernetes answer)."""
    from tests.controlplane.servers import Server
    from tests.fakes import not_kube

    real = Server("real", control_plane.url, tls=ssl.create_default_context(cafile=str(control_plane.pki / "ca.crt")),
                  headers={"Authorization": "Bearer not-a-token"})  # fmt: skip
    refused = real.call("GET", "/api/v1/nodes")
    code, _, body = not_kube.answer("refusing", "/api/v1/nodes")
    assert (refused.code, refused.body) == (code, json.loads(body))
    version = Server("real", control_plane.url, tls=control_plane.admin_tls()).call("GET", "/version").body
    code, _, body = not_kube.answer("api-404", "/version")
    assert code == 200 and set(json.loads(body)) == set(version)
    assert {k: v for k, v in json.loads(body).items() if k not in ("gitCommit", "buildDate", "goVersion")} == {
        k: v for k, v in version.items() if k not in ("gitCommit", "buildDate", "goVersion")
    }


def test_a_mig_node_advertises_its_instances_and_the_scheduler_places_by_them(control_plane: ControlPlane) -> None:
    """A MIG node as the GPU Operator leaves it (mixed strategy: ``nvidia.com/mig-<profile>`` devices, no whole
    GPUs, GPU feature discovery's MIG labels): a pod asking for an instance runs there, one asking for a whole GPU
    stays Pending with the scheduler's own message."""
    node = gpu_node("cp-test-mig-1", index=40, mig={"1g.10gb": 7})
    kubectl(control_plane, "create", "-f", "-", stdin=json.dumps(node))
    ns = "cp-test-mig"
    try:
        kubectl(control_plane, "create", "namespace", ns)
        stored = json.loads(kubectl(control_plane, "get", "node", "cp-test-mig-1", "-o", "json"))
        assert stored["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "7"
        assert stored["status"]["allocatable"]["nvidia.com/gpu"] == "0"
        assert stored["metadata"]["labels"]["nvidia.com/mig.strategy"] == "mixed"
        for name, resource in (("instance", "nvidia.com/mig-1g.10gb"), ("whole", "nvidia.com/gpu")):
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                   "spec": {"nodeSelector": {"kubernetes.io/hostname": "cp-test-mig-1"},
                            "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04",
                                            "resources": {"limits": {resource: "1"}}}]}}  # fmt: skip
            kubectl(control_plane, "create", "-f", "-", stdin=json.dumps(pod))
        assert wait_pod(control_plane, ns, "instance", lambda p: p["status"].get("phase") == "Running")
        whole = wait_pod(control_plane, ns, "whole", lambda p: bool(p["status"].get("conditions")))
        assert "Insufficient nvidia.com/gpu" in whole["status"]["conditions"][0]["message"]
    finally:
        kubectl(control_plane, "delete", "namespace", ns, "--wait=false", "--ignore-not-found")
        kubectl(control_plane, "delete", "node", "cp-test-mig-1", "--ignore-not-found")
