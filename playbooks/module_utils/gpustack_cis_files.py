"""The modes and owners of the files the CIS Kubernetes Benchmark's file checks read, for doctor's ``security`` layer
(gpustack/diagnose/cis_files.py judges them). Standard library only (the facts module runs with the host's python3).

The paths are kube-bench's for a kubeadm host (aquasecurity/kube-bench ``cfg/config.yaml`` and ``cfg/cis-1.12``
master.yaml 1.1.x, node.yaml 4.1.x): the control-plane static pod manifests, etcd's data directory, the kubeconfigs,
every file and directory under /etc/kubernetes/pki, the kubelet's unit (each of kube-bench's ``kubelet.svc``
candidates: it judges the first that exists), kubeconfig, client CA and config file. A path that does not exist is
left out (kube-bench's audits test ``-e`` first).

The kubelet's CIS 4.2.x items (gpustack/diagnose/cis_kubelet.py judges them) read what kube-bench's audits read: the
running kubelet's command line (``ps -fC kubelet``; here ``/proc/<pid>/cmdline``) and its config file (``cat
$kubeletconf``, /var/lib/kubelet/config.yaml, or the file ``--config`` names). With no kubelet running, the command line
the unit would start is read instead: kubeadm's drop-in (its ``KUBELET_*_ARGS`` environment lines),
/var/lib/kubelet/kubeadm-flags.env and /etc/default/kubelet. The config file is returned as text (the host may have
no YAML library); gpustack parses it.
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
    return {"files": files, "pki": pki, "kubelet": collect_kubelet(root)}


KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
#: kubeadm's drop-in (kubernetes/release cmd/krel/templates/latest/kubeadm/10-kubeadm.conf), then the files it sources
KUBELET_ENV_FILES = (
    "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
    "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
    "/var/lib/kubelet/kubeadm-flags.env",
    "/etc/default/kubelet",
)
#: at most this much of the config file (kubeadm's is about 1.5 KB)
CONFIG_LIMIT = 256 * 1024


def _read(path: str, limit: int = CONFIG_LIMIT) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return None


def running_kubelet(proc: str = "/proc") -> list[str] | None:
    """The command line of the running kubelet (the process named ``kubelet``), None when none runs."""
    try:
        pids = sorted((p for p in os.listdir(proc) if p.isdigit()), key=int)
    except OSError:
        return None
    for pid in pids:
        comm = _read(f"{proc}/{pid}/comm", 64)
        if comm is None or comm.strip() != "kubelet":
            continue
        try:
            with open(f"{proc}/{pid}/cmdline", "rb") as f:
                raw = f.read(CONFIG_LIMIT)
        except OSError:
            continue
        argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        if argv:
            return argv
    return None


def _assignment(line: str) -> tuple[str, str] | None:
    """``KEY=value`` of an environment file line or a unit's ``Environment="KEY=value"``, quotes removed."""
    line = line.strip()
    if line.startswith("Environment="):
        line = line[len("Environment=") :].strip()
    if len(line) > 1 and line[0] == line[-1] and line[0] in "\"'":
        line = line[1:-1]
    key, eq, value = line.partition("=")
    if not eq or not key.startswith("KUBELET_") or not key.endswith("ARGS"):
        return None
    value = value.strip()
    if len(value) > 1 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return key, value


def unit_command_line(texts: list[str]) -> list[str]:
    """The flags the unit would start the kubelet with: every ``KUBELET_*ARGS`` value of the drop-in's
    ``Environment=`` lines and of the environment files, in that order, split on white space (as systemd splits an
    unquoted ``$VAR`` of ``ExecStart``)."""
    argv = ["kubelet"]
    for text in texts:
        for line in text.splitlines():
            found = _assignment(line)
            if found:
                argv += found[1].split()
    return argv


def collect_kubelet(root: str = "") -> dict[str, object]:
    """``{"source": "process"|"unit"|None, "argv": [...], "config_path": ..., "config": text or None}`` (``root``: a
    directory standing for /, its ``proc`` for /proc)."""
    argv = running_kubelet(root + "/proc")
    source: str | None = "process" if argv else None
    if argv is None:
        texts = [t for t in (_read(root + p) for p in KUBELET_ENV_FILES) if t is not None]
        if texts:
            argv, source = unit_command_line(texts), "unit"
    config_path = KUBELET_CONFIG
    for i, arg in enumerate(argv or []):
        if arg.startswith("--config="):
            config_path = arg.split("=", 1)[1]
        elif arg == "--config" and argv is not None and i + 1 < len(argv):
            config_path = argv[i + 1]
    return {"source": source, "argv": argv or [], "config_path": config_path, "config": _read(root + config_path)}
