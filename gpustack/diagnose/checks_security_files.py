"""The ``security`` layer's file checks: the CIS Kubernetes Benchmark's file mode and ownership items, judged from the
host facts (``cis_files``: playbooks/module_utils/gpustack_cis_files.py, collected over SSH with the other facts).

Ids, texts and tests are kube-bench's ``cfg/cis-1.12`` (aquasecurity/kube-bench master.yaml 1.1.x, node.yaml 4.1.x,
commit a73ce378): a mode check is kube-bench's ``bitmask`` (no permission bit beyond the value's), an ownership
check ``user:group`` equal to the value. Each is judged on every node where its file exists (kube-bench's audits test
``-e`` first: the control-plane files on control planes only); a check whose file no node has is a skip. The kubelet
unit is the first of kube-bench's ``kubelet.svc`` candidates that exists, as kube-bench picks it. 1.1.12 (etcd's data
directory owned by etcd:etcd) is a documented exception on every cluster (docs/decisions.md, "etcd's data directory
stays root's"): a warning with the reason. 1.1.9/1.1.10 (CNI files, Manual) and 4.1.3/4.1.4 (kube-proxy's kubeconfig
file, which kubeadm's kube-proxy keeps in a ConfigMap) are not judged.

The host facts are collected when doctor runs the host or runtime layer (``gpustack doctor`` with no ``--layer``, or
``--layer security,host``); ``--layer security`` alone reads only the API (no SSH), and these checks then skip.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpustack.checks.model import Finding
from gpustack.diagnose.registry import CheckFn, register
from gpustack.diagnose.snapshot import Snapshot

LAYER = "security"
PKI = "/etc/kubernetes/pki"
#: kube-bench cfg/config.yaml node.kubelet.svc, the candidates a kubeadm Debian/Ubuntu host can have, in its order
KUBELET_UNITS = (
    "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
    "/etc/systemd/system/kubelet.service",
    "/lib/systemd/system/kubelet.service",
)
#: doctor reads the hosts (over SSH) for the host and runtime layers: `doctor` alone, or with them named
NO_FACTS = "not checked: no host facts collected (`doctor --layer security,host` reads them; see H00-host-facts)"
ETCD_DATA_LEFT = (
    "kubeadm's etcd runs as root and a kubeadm host has no etcd user; the directory stays root's, 0700 "
    "(docs/decisions.md, \"etcd's data directory stays root's\")"
)


@dataclass(frozen=True)
class FileRule:
    cis: str
    name: str
    #: kube-bench's text, verbatim
    text: str
    #: one path, ``"kubelet-unit"`` (the first of KUBELET_UNITS that exists) or ``"pki"``, ``"pki:*.crt"``,
    #: ``"pki:*.key"`` (the PKI tree, every entry or the files of that suffix)
    what: str
    #: ``"600"`` (bitmask) or ``"root:root"``
    want: str
    #: why gpustack leaves it on every cluster (a warning, not a failure)
    left: str = ""

    @property
    def check_id(self) -> str:
        return f"S{self.cis}-{self.name}"

    @property
    def mode(self) -> bool:
        return ":" not in self.want


def _rule(cis: str, name: str, what: str, want: str, text: str, left: str = "") -> FileRule:
    return FileRule(cis, name, text, what, want, left)


MANIFESTS = "/etc/kubernetes/manifests"
RULES: tuple[FileRule, ...] = (
    _rule("1.1.1", "apiserver-manifest-mode", f"{MANIFESTS}/kube-apiserver.yaml", "600",
          "Ensure that the API server pod specification file permissions are set to 600 or more restrictive (Automated)"),
    _rule("1.1.2", "apiserver-manifest-owner", f"{MANIFESTS}/kube-apiserver.yaml", "root:root",
          "Ensure that the API server pod specification file ownership is set to root:root (Automated)"),
    _rule("1.1.3", "controller-manager-manifest-mode", f"{MANIFESTS}/kube-controller-manager.yaml", "600",
          "Ensure that the controller manager pod specification file permissions are set to 600 or more restrictive "
          "(Automated)"),
    _rule("1.1.4", "controller-manager-manifest-owner", f"{MANIFESTS}/kube-controller-manager.yaml", "root:root",
          "Ensure that the controller manager pod specification file ownership is set to root:root (Automated)"),
    _rule("1.1.5", "scheduler-manifest-mode", f"{MANIFESTS}/kube-scheduler.yaml", "600",
          "Ensure that the scheduler pod specification file permissions are set to 600 or more restrictive (Automated)"),
    _rule("1.1.6", "scheduler-manifest-owner", f"{MANIFESTS}/kube-scheduler.yaml", "root:root",
          "Ensure that the scheduler pod specification file ownership is set to root:root (Automated)"),
    _rule("1.1.7", "etcd-manifest-mode", f"{MANIFESTS}/etcd.yaml", "600",
          "Ensure that the etcd pod specification file permissions are set to 600 or more restrictive (Automated)"),
    _rule("1.1.8", "etcd-manifest-owner", f"{MANIFESTS}/etcd.yaml", "root:root",
          "Ensure that the etcd pod specification file ownership is set to root:root (Automated)"),
    _rule("1.1.11", "etcd-data-dir-mode", "/var/lib/etcd", "700",
          "Ensure that the etcd data directory permissions are set to 700 or more restrictive (Automated)"),
    _rule("1.1.12", "etcd-data-dir-owner", "/var/lib/etcd", "etcd:etcd",
          "Ensure that the etcd data directory ownership is set to etcd:etcd (Automated)", ETCD_DATA_LEFT),
    _rule("1.1.13", "admin-conf-mode", "/etc/kubernetes/admin.conf", "600",
          "Ensure that the default administrative credential file permissions are set to 600 (Automated)"),
    _rule("1.1.13", "super-admin-conf-mode", "/etc/kubernetes/super-admin.conf", "600",
          "Ensure that the default administrative credential file permissions are set to 600 (Automated)"),
    _rule("1.1.14", "admin-conf-owner", "/etc/kubernetes/admin.conf", "root:root",
          "Ensure that the default administrative credential file ownership is set to root:root (Automated)"),
    _rule("1.1.14", "super-admin-conf-owner", "/etc/kubernetes/super-admin.conf", "root:root",
          "Ensure that the default administrative credential file ownership is set to root:root (Automated)"),
    _rule("1.1.15", "scheduler-conf-mode", "/etc/kubernetes/scheduler.conf", "600",
          "Ensure that the scheduler.conf file permissions are set to 600 or more restrictive (Automated)"),
    _rule("1.1.16", "scheduler-conf-owner", "/etc/kubernetes/scheduler.conf", "root:root",
          "Ensure that the scheduler.conf file ownership is set to root:root (Automated)"),
    _rule("1.1.17", "controller-manager-conf-mode", "/etc/kubernetes/controller-manager.conf", "600",
          "Ensure that the controller-manager.conf file permissions are set to 600 or more restrictive (Automated)"),
    _rule("1.1.18", "controller-manager-conf-owner", "/etc/kubernetes/controller-manager.conf", "root:root",
          "Ensure that the controller-manager.conf file ownership is set to root:root (Automated)"),
    _rule("1.1.19", "pki-owner", "pki", "root:root",
          "Ensure that the Kubernetes PKI directory and file ownership is set to root:root (Automated)"),
    _rule("1.1.20", "pki-crt-mode", "pki:.crt", "644",
          "Ensure that the Kubernetes PKI certificate file permissions are set to 644 or more restrictive (Manual)"),
    _rule("1.1.21", "pki-key-mode", "pki:.key", "600",
          "Ensure that the Kubernetes PKI key file permissions are set to 600 (Manual)"),
    _rule("4.1.1", "kubelet-unit-mode", "kubelet-unit", "600",
          "Ensure that the kubelet service file permissions are set to 600 or more restrictive (Automated)"),
    _rule("4.1.2", "kubelet-unit-owner", "kubelet-unit", "root:root",
          "Ensure that the kubelet service file ownership is set to root:root (Automated)"),
    _rule("4.1.5", "kubelet-conf-mode", "/etc/kubernetes/kubelet.conf", "600",
          "Ensure that the --kubeconfig kubelet.conf file permissions are set to 600 or more restrictive (Automated)"),
    _rule("4.1.6", "kubelet-conf-owner", "/etc/kubernetes/kubelet.conf", "root:root",
          "Ensure that the --kubeconfig kubelet.conf file ownership is set to root:root (Automated)"),
    _rule("4.1.7", "kubelet-client-ca-mode", f"{PKI}/ca.crt", "644",
          "Ensure that the certificate authorities file permissions are set to 644 or more restrictive (Manual)"),
    _rule("4.1.8", "kubelet-client-ca-owner", f"{PKI}/ca.crt", "root:root",
          "Ensure that the client certificate authorities file ownership is set to root:root (Manual)"),
    _rule("4.1.9", "kubelet-config-mode", "/var/lib/kubelet/config.yaml", "600",
          "If the kubelet config.yaml configuration file is being used validate permissions set to 600 or more "
          "restrictive (Automated)"),
    _rule("4.1.10", "kubelet-config-owner", "/var/lib/kubelet/config.yaml", "root:root",
          "If the kubelet config.yaml configuration file is being used validate file ownership is set to root:root "
          "(Automated)"),
)  # fmt: skip


def entries(rule: FileRule, facts: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Path -> its stat entry, of the files ``rule`` reads on one node ({}: none there)."""
    cis = facts.get("cis_files")
    if not isinstance(cis, Mapping):
        return {}
    got_files, got_pki = cis.get("files"), cis.get("pki")
    files: Mapping[str, Any] = got_files if isinstance(got_files, Mapping) else {}
    pki: Mapping[str, Any] = got_pki if isinstance(got_pki, Mapping) else {}
    if rule.what == "kubelet-unit":
        first = next((p for p in KUBELET_UNITS if isinstance(files.get(p), Mapping)), None)
        return {first: files[first]} if first else {}
    if rule.what == "pki":
        return {p: e for p, e in pki.items() if isinstance(e, Mapping)}
    if rule.what.startswith("pki:"):
        suffix = rule.what[4:]
        return {p: e for p, e in pki.items() if isinstance(e, Mapping) and str(p).endswith(suffix) and not e.get("dir")}
    entry = files.get(rule.what)
    return {rule.what: entry} if isinstance(entry, Mapping) else {}


def meets(rule: FileRule, entry: Mapping[str, Any]) -> tuple[bool, str]:
    """kube-bench's test of one file: ``bitmask`` (no bit beyond the value) or ``eq`` on ``owner:group``."""
    if rule.mode:
        try:
            mode = int(str(entry.get("mode")), 8)
        except ValueError:
            return False, f"mode {entry.get('mode')!r} unreadable"
        return mode & ~int(rule.want, 8) == 0, f"permissions={mode:o}"
    owner = f"{entry.get('owner')}:{entry.get('group')}"
    return owner == rule.want, owner


def fix(rule: FileRule, paths: list[str]) -> str:
    shown = " ".join(paths[:5]) + (" ..." if len(paths) > 5 else "")
    command = f"chmod {rule.want}" if rule.mode else f"chown {rule.want}"
    return f'{command} {shown}  (gpustack up sets the modes it manages: docs/configuration.md, "Security defaults")'


def judge(rule: FileRule, snap: Snapshot) -> list[Finding]:
    check = rule.check_id
    hosts = {n: f for n, f in sorted(snap.hosts.items()) if isinstance(f, Mapping)}
    if not hosts:
        return [Finding(check, LAYER, "skip", NO_FACTS)]
    out: list[Finding] = []
    judged: list[str] = []
    for node, facts in hosts.items():
        found = entries(rule, facts)
        if not found:
            continue
        judged.append(node)
        bad = {p: shown for p, e in found.items() for ok, shown in [meets(rule, e)] if not ok}
        if not bad:
            continue
        evidence = "; ".join(f"{p}: {shown}" for p, shown in list(bad.items())[:5])
        if rule.left:
            out.append(Finding(check, LAYER, "warn", f"CIS {rule.cis} not met, left on purpose: {rule.text}",
                               host=node, evidence=f"{evidence}; {rule.left}", fix=f"to meet it anyway: {fix(rule, list(bad))}"))  # fmt: skip
        else:
            out.append(Finding(check, LAYER, "fail", f"CIS {rule.cis} not met: {rule.text}", host=node,
                               evidence=evidence, fix=f"on {node}: {fix(rule, list(bad))}"))  # fmt: skip
    if not judged:
        where = "the kubelet unit" if rule.what == "kubelet-unit" else rule.what.replace("pki", PKI, 1)
        return [Finding(check, LAYER, "skip", f"CIS {rule.cis}: {where} is on no node whose facts were read")]
    if not out:
        wanted = f"{rule.want} or more restrictive" if rule.mode else rule.want
        out.append(Finding(check, LAYER, "pass", f"CIS {rule.cis}: {wanted}", evidence=f"on {', '.join(judged)}"))
    return out


def _register(rule: FileRule) -> CheckFn:
    title = f"CIS {rule.cis}: {rule.text.rsplit(' (', 1)[0]}"

    def check(snap: Snapshot) -> list[Finding]:
        return judge(rule, snap)

    check.__name__ = check.__qualname__ = rule.name.replace("-", "_")
    return register(rule.check_id, LAYER, title=title, reads="host facts: cis_files (mode, owner)")(check)


for _rule_ in RULES:
    _register(_rule_)
