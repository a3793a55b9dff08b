"""The modes and owners of the files the CIS Kubernetes Benchmark's file checks read, for doctor's ``security`` layer
(gpustack/diagnose/cis_files.py judges them). Standard library only (the facts module runs with the host's python3).

The paths are kube-bench's for a kubeadm host (aquasecurity/kube-bench ``cfg/config.yaml`` and ``cfg/cis-1.12``
master.yaml 1.1.x, node.yaml 4.1.x): the control-plane static pod manifests, etcd's data directory, the kubeconfigs,
every file and directory under /etc/kubernetes/pki, the kubelet's unit (each of kube-bench's ``kubelet.svc``
candidates: it judges the first that exists), kubeconfig, client CA and config file. A path that does not exist is
left out (kube-bench's audits test ``-e`` first).
"""

from __future__ import annotations

import grp
import os
import pwd
import stat

#: single files, by what kube-bench calls them
FILES = (
    "/etc/kubernetes/manifests/kube-apiserver.yaml",
    "/etc/kubernetes/manifests/kube-controller-manager.yaml",
    "/etc/kubernetes/manifests/kube-scheduler.yaml",
    "/etc/kubernetes/manifests/etcd.yaml",
    "/var/lib/etcd",
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/super-admin.conf",
    "/etc/kubernetes/scheduler.conf",
    "/etc/kubernetes/controller-manager.conf",
    # kube-bench node.kubelet.svc, in its order (the first that exists is judged)
    "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
    "/etc/systemd/system/kubelet.service",
    "/lib/systemd/system/kubelet.service",
    "/etc/kubernetes/kubelet.conf",
    "/etc/kubernetes/pki/ca.crt",
    "/var/lib/kubelet/config.yaml",
)
PKI = "/etc/kubernetes/pki"
#: at most this many entries of the PKI tree (a kubeadm control plane has about 25)
PKI_LIMIT = 200


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def describe(st: os.stat_result) -> dict[str, object]:
    """``{"mode": "0600", "owner": "root", "group": "root", "dir": false}`` (names as ``stat -c %U:%G`` prints them;
    the number when it has none)."""
    return {
        "mode": format(stat.S_IMODE(st.st_mode), "04o"),
        "owner": _user(st.st_uid),
        "group": _group(st.st_gid),
        "dir": stat.S_ISDIR(st.st_mode),
    }


def _stat(path: str) -> dict[str, object] | None:
    try:
        return describe(os.stat(path))
    except OSError:
        return None


def collect_cis_files(root: str = "") -> dict[str, object]:
    """``{"files": {path: entry}, "pki": {path: entry}}`` (``root``: a directory standing for /, for tests)."""
    files = {}
    for path in FILES:
        found = _stat(root + path)
        if found is not None:
            files[path] = found
    pki: dict[str, dict[str, object]] = {}
    base = root + PKI
    if os.path.isdir(base):
        walked: list[str] = [PKI]
        for top, dirs, names in os.walk(base):
            rel = top[len(root) :] if root else top
            walked += [os.path.join(rel, d) for d in sorted(dirs)] + [os.path.join(rel, n) for n in sorted(names)]
            if len(walked) > PKI_LIMIT:
                break
        for path in walked[:PKI_LIMIT]:
            found = _stat(root + path)
            if found is not None:
                pki[path] = found
    return {"files": files, "pki": pki}
