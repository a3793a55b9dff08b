"""``gpustack security apply`` with the real kubeadm 1.36.5 and kube-apiserver 1.36.5 (issue 28).

The shared control plane was built from a relaxed ``security:`` (tests/controlplane/cluster.py ``RELAXED``: no
encryption, no audit log), its kubeadm-config ConfigMap uploaded by the real ``kubeadm init phase upload-config``.
gpustack's ``upload-config`` step (gpustack/commands/security_apply.py, through gpustack's Kubernetes client) patches
that ClusterConfiguration with the default ``security:``; then the role's command, ``kubeadm upgrade node phase
control-plane --certificate-renewal=false --etcd-upgrade=false``, runs with ``--dry-run`` in a root of its own
(``--rootfs``: /etc/kubernetes there holds the fixture's admin.conf and kubelet.conf and the API server's manifest,
which is what makes kubeadm treat the root as a control plane; the Node and the API server's mirror pod, whose
advertise-address annotation kubeadm reads, are created in the API). The manifests kubeadm prints carry every flag
gpustack renders, judged by the comparison ``gpustack security apply`` makes from the mirror pods and by the role's
filter; before the patch they carry the relaxed flags. The ConfigMap is put back afterwards.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from gpustack.cluster import security_apply as sa
from gpustack.commands.security_apply import flag_vars, upload_config
from gpustack.render import security
from gpustack.runners.kube import Kube
from gpustack.runners.kubeconfig import kube_from_file
from tests.controlplane import kubeadm_phases as kp
from tests.controlplane.cluster import NODE, ControlPlane, gpustack_config
from tests.realbin.gobuild import binary

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"
CM = "/api/v1/namespaces/kube-system/configmaps/kubeadm-config"
WRITE = re.compile(r'\[dryrun\] Would write file "([^"]+)" with content:\n')
ROLE_DEFAULTS = PLAYBOOKS / "roles/security_apply/defaults/main.yml"


def dry_run(root: Path) -> dict[str, dict[str, Any]]:
    """The role's kubeadm command with ``--dry-run`` in ``root``: component -> the manifest kubeadm would write."""
    argv = yaml.safe_load(ROLE_DEFAULTS.read_text())["security_apply_kubeadm_argv"]
    done = subprocess.run([str(binary("kubeadm")), *argv[1:], "--dry-run", "--rootfs", str(root)],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    parts = WRITE.split(done.stdout)
    written = {Path(path).stem: yaml.safe_load(text) for path, text in zip(parts[1::2], parts[2::2], strict=True)}
    assert set(written) == set(sa.COMPONENTS), done.stdout[-2000:]
    return written


def mirror_pod(manifest: dict[str, Any]) -> dict[str, Any]:
    """The API server's static pod as the kubelet mirrors it: its labels and annotations (kubeadm reads the advertise
    address from ``kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint``), bound to the node."""
    md = manifest["metadata"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"kube-apiserver-{NODE}", "namespace": "kube-system", "labels": md["labels"],
                         "annotations": md.get("annotations") or {}},
            "spec": {**manifest["spec"], "nodeName": NODE}}  # fmt: skip


def node() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE, "annotations": {
                "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock"}}}  # fmt: skip


def host_paths(manifest: dict[str, Any]) -> set[str]:
    return {str(v["hostPath"]["path"]) for v in manifest["spec"].get("volumes") or [] if "hostPath" in v}


def drift(written: dict[str, dict[str, Any]], cfg: Any) -> dict[str, list[str]]:
    want = sa.wanted(cfg)
    return {c: sorted(ch.flag for ch in sa.component_drift(c, kp.command_of(m), want[c])) for c, m in written.items()}


def test_kubeadm_writes_the_uploaded_security_flags_into_the_manifests(control_plane: ControlPlane,
                                                                       tmp_path: Path) -> None:  # fmt: skip
    cp = control_plane
    admin: Kube = kube_from_file(cp.admin_kubeconfig, request_timeout=30)
    relaxed, default = gpustack_config(), gpustack_config(hardened=True)
    root = tmp_path / "root"
    etc = root / "etc/kubernetes"
    (etc / "manifests").mkdir(parents=True)
    for name in ("admin.conf", "kubelet.conf"):  # both carry their certificates and point at the fixture's server
        shutil.copy(cp.pki / name, etc / name)
    shutil.copy(cp.pki / "kube-apiserver.yaml", etc / "manifests/kube-apiserver.yaml")
    apiserver = yaml.safe_load((cp.pki / "kube-apiserver.yaml").read_text())
    original = admin.request("GET", CM)["data"]["ClusterConfiguration"]
    admin.request("POST", "/api/v1/nodes", body=node())
    admin.request("POST", "/api/v1/namespaces/kube-system/pods", body=mirror_pod(apiserver))
    try:
        before = dry_run(root)
        assert all(not d for d in drift(before, relaxed).values()), "kubeadm writes what the cluster was built with"
        assert drift(before, default)["kube-apiserver"] == [
            "audit-log-maxage", "audit-log-maxbackup", "audit-log-maxsize", "audit-log-path", "audit-policy-file",
            "encryption-provider-config"]  # fmt: skip

        assert upload_config(default, admin).status == "changed"
        after = dry_run(root)
        assert all(not d for d in drift(after, default).values()), drift(after, default)
        # the mounts the flags need come with them
        assert {security.ENCRYPTION_DIR, security.AUDIT_DIR, security.AUDIT_LOG_DIR, security.ADMISSION_DIR} <= (
            host_paths(after["kube-apiserver"])
        )
        # the role's judgement of the manifests kubeadm writes: nothing left to regenerate (a resumed run skips)
        spec = importlib.util.spec_from_file_location("gpustack_flags", PLAYBOOKS / "filter_plugins/gpustack_flags.py")
        assert spec is not None and spec.loader is not None
        flags = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(flags)
        sent = flag_vars(default)
        assert {c: flags.flag_drift(m, sent[c]) for c, m in after.items()} == {c: [] for c in sa.COMPONENTS}
        assert upload_config(default, admin).note == "unchanged"
    finally:
        rv = admin.request("GET", CM)["metadata"]["resourceVersion"]
        admin.request("PATCH", CM, body={"metadata": {"resourceVersion": rv}, "data": {"ClusterConfiguration": original}},
                      content_type="application/merge-patch+json")  # fmt: skip
        admin.request("DELETE", f"/api/v1/namespaces/kube-system/pods/kube-apiserver-{NODE}",
                      query={"gracePeriodSeconds": "0"})  # fmt: skip
        admin.request("DELETE", f"/api/v1/nodes/{NODE}")


KUBELET_CM = "/api/v1/namespaces/kube-system/configmaps/kubelet-config"


def kubelet_dry_run(root: Path) -> dict[str, Any]:
    """The role's ``kubeadm upgrade node phase kubelet-config`` with ``--dry-run`` in ``root`` (a worker's: only
    kubelet.conf): the config.yaml kubeadm would write."""
    argv = yaml.safe_load(ROLE_DEFAULTS.read_text())["security_apply_kubelet_kubeadm_argv"]
    done = subprocess.run([str(binary("kubeadm")), *argv[1:], "--dry-run", "--rootfs", str(root)],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    parts = WRITE.split(done.stdout)
    written = {path: text for path, text in zip(parts[1::2], parts[2::2], strict=True)}
    # each file's content runs until kubeadm's next log line ("[patches] ...", "[kubelet-start] ...")
    configs = [yaml.safe_load(re.split(r"^\[", text, maxsplit=1, flags=re.M)[0])
               for path, text in written.items() if path.endswith("/config.yaml")]  # fmt: skip
    assert len(configs) == 1, done.stdout[-3000:]
    return dict(configs[0])


def test_kubeadm_writes_the_uploaded_kubelet_settings_into_config_yaml(control_plane: ControlPlane,
                                                                       tmp_path: Path) -> None:  # fmt: skip
    """gpustack's ``upload-kubelet-config`` step patches the kubelet-config ConfigMap the real ``kubeadm init phase
    upload-config`` made; the role's ``kubeadm upgrade node phase kubelet-config`` then writes those settings into
    the node's config.yaml, and the role's filter finds nothing left to do there."""
    from gpustack.cluster import kubelet_apply as ka
    from gpustack.commands.security_apply import kubelet_vars, upload_kubelet_config

    cp = control_plane
    admin: Kube = kube_from_file(cp.admin_kubeconfig, request_timeout=30)
    built = gpustack_config()
    relaxed = built.model_copy(update={"security": built.security.model_copy(
        update={"pod_pids_limit": None, "protect_kernel_defaults": False, "tls_cipher_suites": []})})  # fmt: skip
    root = tmp_path / "root"
    (root / "etc/kubernetes").mkdir(parents=True)
    shutil.copy(cp.pki / "kubelet.conf", root / "etc/kubernetes/kubelet.conf")
    original = admin.request("GET", KUBELET_CM)["data"]["kubelet"]
    admin.request("POST", "/api/v1/nodes", body=node())  # kubeadm reads the node's registration from its Node
    spec = importlib.util.spec_from_file_location("gpustack_kubelet", PLAYBOOKS / "filter_plugins/gpustack_kubelet.py")
    assert spec is not None and spec.loader is not None
    kubelet_filter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kubelet_filter)
    try:
        before = kubelet_dry_run(root)
        assert kubelet_filter.gpustack_kubelet_drift(before, kubelet_vars(built)) == []
        assert upload_kubelet_config(relaxed, admin).status == "changed"
        after = kubelet_dry_run(root)
        assert (
            kubelet_filter.gpustack_kubelet_drift(after, kubelet_vars(relaxed))
            == []
            == ka.drift(after, ka.wanted(relaxed))
        )
        assert "podPidsLimit" not in after and "tlsCipherSuites" not in after and after["serverTLSBootstrap"] is True
        assert {k: v for k, v in after.items() if k not in ka.MANAGED} == {
            k: v for k, v in before.items() if k not in ka.MANAGED}  # fmt: skip
        assert upload_kubelet_config(relaxed, admin).note == "unchanged"
    finally:
        rv = admin.request("GET", KUBELET_CM)["metadata"]["resourceVersion"]
        admin.request("PATCH", KUBELET_CM, body={"metadata": {"resourceVersion": rv}, "data": {"kubelet": original}},
                      content_type="application/merge-patch+json")  # fmt: skip
        admin.request("DELETE", f"/api/v1/nodes/{NODE}")
