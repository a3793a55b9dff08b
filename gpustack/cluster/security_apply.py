"""``gpustack security apply``: changed ``security:`` settings brought to a running cluster (issue 28).

kubeadm reads gpustack's ``security:`` (its flags: :func:`gpustack.render.security.kubeadm_security`) only at ``init``
and ``join``. On a running cluster the static pods' flags are compared with what gpustack renders now:

- **what differs** is read from the API, as doctor's ``security`` layer reads it: each control-plane component's
  mirror pod in kube-system carries its manifest's command line (:func:`drift`), so the flags that differ, per
  control plane, and the static pods that restart are known before anything changes. Only the flags gpustack
  manages (:data:`MANAGED`) are compared; any other flag is kubeadm's or the site's.
- **kubeadm regenerates the manifests**: the kubeadm-config ConfigMap's ClusterConfiguration gets gpustack's flags
  and mounts (:func:`merged_cluster_configuration`: only the entries gpustack manages are replaced), then each
  control plane in turn runs ``kubeadm upgrade node phase control-plane`` (role ``security_apply``).
- **Encryption turned on**: once every API server runs with the EncryptionConfiguration, every Secret is rewritten
  (:mod:`gpustack.cluster.secrets`): stored before in clear, then with the cluster's key. The rewrite is recorded
  before the first control plane changes (:func:`record_rewrite`), so a run cut off after the flags are everywhere
  still rewrites: the flags alone would show nothing left to do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpustack.config.model import Config
from gpustack.diagnose.cis import parse_flags
from gpustack.errors import StageError
from gpustack.paths import ensure_private_dir, kubeconfig_path, state_dir, write_json
from gpustack.render.security import ENCRYPTION_CONFIG, kubeadm_security
from gpustack.runners.kube import Kube

#: the static pods this changes (etcd's flags are no ``security:`` setting)
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
#: every flag ``security:`` may render, per component (held against kubeadm_security by
#: tests/unit/cluster/test_security_apply.py): only these are compared, added or removed
MANAGED: dict[str, tuple[str, ...]] = {
    "kube-apiserver": (
        "admission-control-config-file",
        "encryption-provider-config",
        "audit-policy-file",
        "audit-log-path",
        "audit-log-maxage",
        "audit-log-maxbackup",
        "audit-log-maxsize",
        "profiling",
        "tls-cipher-suites",
        "service-account-extend-token-expiration",
        "kubelet-certificate-authority",
    ),
    "kube-controller-manager": ("profiling",),
    "kube-scheduler": ("profiling",),
}
#: the ClusterConfiguration section of each component (kubeadm v1beta4)
SECTION = {"kube-apiserver": "apiServer", "kube-controller-manager": "controllerManager", "kube-scheduler": "scheduler"}
#: gpustack's own host-path mounts in the API server's pod (gpustack/render/security.py ``_volume``)
VOLUME_PREFIX = "gpustack-"
#: the record of a Secret rewrite still to do, beside the cluster's admin kubeconfig
RECORD_FILE = "security-apply.json"

#: node -> component -> its command line (None: its mirror pod shows none)
Commands = Mapping[str, Mapping[str, "Sequence[str] | None"]]


def wanted(cfg: Config) -> dict[str, dict[str, str]]:
    """Component -> flag name -> value: the managed flags gpustack renders now (absent: the flag must not be set)."""
    sec = kubeadm_security(cfg)
    return {
        "kube-apiserver": dict(sec.api_server_args),
        "kube-controller-manager": dict(sec.controller_manager_args),
        "kube-scheduler": dict(sec.scheduler_args),
    }


@dataclass(frozen=True)
class FlagChange:
    component: str
    flag: str
    #: None: not set
    current: str | None
    wanted: str | None

    def describe(self) -> str:
        if self.wanted is None:
            return f"--{self.flag} removed (was {self.current})"
        if self.current is None:
            return f"--{self.flag}={self.wanted} added"
        return f"--{self.flag}: {self.current} -> {self.wanted}"


def component_drift(component: str, argv: Sequence[str], want: Mapping[str, str]) -> list[FlagChange]:
    """The managed flags of one command line that differ from ``want`` (name -> value)."""
    have = parse_flags(argv)
    out = []
    for flag in MANAGED[component]:
        current, target = have.get(flag), want.get(flag)
        if current != target:
            out.append(FlagChange(component, flag, current, target))
    return out


@dataclass(frozen=True)
class Drift:
    #: node -> the flags that differ there (a node whose flags are gpustack's has none)
    changes: dict[str, list[FlagChange]]
    #: node -> the components whose command line could not be read (no mirror pod, or one without a command)
    unread: dict[str, list[str]]

    @property
    def nodes(self) -> list[str]:
        """The control planes whose static pods change."""
        return [node for node, changes in self.changes.items() if changes]

    def restarts(self, node: str) -> list[str]:
        """The static pods that restart on ``node`` (kubeadm leaves a manifest it would write unchanged alone)."""
        return [c for c in COMPONENTS if any(ch.component == c for ch in self.changes.get(node, []))]

    def encryption(self) -> str | None:
        """``on`` when the EncryptionConfiguration flag is added somewhere, ``off`` when removed, else None."""
        for changes in self.changes.values():
            for ch in changes:
                if ch.flag == "encryption-provider-config":
                    return "on" if ch.wanted else "off"
        return None


def drift(cfg: Config, control_planes: Sequence[str], commands: Commands) -> Drift:
    """What differs on each control plane (``commands``: node -> component -> command line, from the mirror pods)."""
    want = wanted(cfg)
    changes: dict[str, list[FlagChange]] = {}
    unread: dict[str, list[str]] = {}
    for node in control_planes:
        mine = commands.get(node, {})
        changes[node] = []
        for component in COMPONENTS:
            argv = mine.get(component)
            if not argv:
                unread.setdefault(node, []).append(component)
                continue
            changes[node] += component_drift(component, argv, want[component])
    return Drift(changes, unread)


def mirror_commands(pods: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list[str] | None]]:
    """Node -> component -> command line, from kube-system's control-plane mirror pods (label ``component``)."""
    out: dict[str, dict[str, list[str] | None]] = {}
    for pod in pods:
        md = pod.get("metadata") or {}
        component = (md.get("labels") or {}).get("component")
        if md.get("namespace", "kube-system") != "kube-system" or component not in COMPONENTS:
            continue
        spec = pod.get("spec") or {}
        containers = [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]
        mine = next((c for c in containers if c.get("name") == component), containers[0] if containers else {})
        argv = [str(a) for a in [*(mine.get("command") or []), *(mine.get("args") or [])]]
        out.setdefault(str(spec.get("nodeName") or ""), {})[str(component)] = argv or None
    return out


def rows(result: Drift) -> list[list[str]]:
    """Per control plane: the flags that differ, the static pods that restart (``security apply`` prints them)."""
    out = []
    for node, changes in result.changes.items():
        unread = result.unread.get(node)
        if unread:
            out.append([node, f"not read: no mirror pod with a command line for {', '.join(unread)}",
                        "kubeadm regenerates them"])  # fmt: skip
        if changes:
            out.append([node, "; ".join(ch.describe() for ch in changes), ", ".join(result.restarts(node))])
        elif not unread:
            out.append([node, "as gpustack.yaml says", "none"])
    return out


# --- the kubeadm-config ConfigMap ----------------------------------------------------------------------------


def _args(pairs: Any, component: str, want: Mapping[str, str]) -> list[dict[str, str]]:
    """A v1beta4 ``extraArgs`` list with the managed names replaced by ``want``, every other entry kept in order."""
    if isinstance(pairs, Mapping):  # v1beta3's map: kubeadm 1.34+ stores v1beta4 (name/value pairs)
        raise ValueError(
            "the ClusterConfiguration's extraArgs are a map (kubeadm v1beta3): not a kubeadm 1.34+ cluster"
        )
    kept = [a for a in pairs or [] if isinstance(a, Mapping) and a.get("name") not in MANAGED[component]]
    return [dict(a) for a in kept] + [{"name": k, "value": v} for k, v in want.items()]


def merged_cluster_configuration(text: str, cfg: Config) -> str:
    """The ClusterConfiguration (kubeadm v1beta4, as the kubeadm-config ConfigMap holds it) with gpustack's flags
    and the API server's ``gpustack-*`` mounts as ``cfg`` renders them; everything else kept."""
    doc = yaml.safe_load(text) or {}
    if not isinstance(doc, dict) or doc.get("kind") != "ClusterConfiguration":
        raise ValueError("not a kubeadm ClusterConfiguration")
    sec = kubeadm_security(cfg)
    for component, want in wanted(cfg).items():
        section = doc.setdefault(SECTION[component], {}) or {}
        doc[SECTION[component]] = section
        section["extraArgs"] = _args(section.get("extraArgs"), component, want)
    api = doc[SECTION["kube-apiserver"]]
    volumes = [v for v in api.get("extraVolumes") or []
               if not (isinstance(v, Mapping) and str(v.get("name", "")).startswith(VOLUME_PREFIX))]  # fmt: skip
    api["extraVolumes"] = volumes + [dict(v) for v in sec.api_server_volumes]
    return yaml.safe_dump(doc, sort_keys=False)


# --- the Secret rewrite still to do ---------------------------------------------------------------------------


def record_path(cfg: Config, root: Path | None = None) -> Path:
    return (root or state_dir()) / "clusters" / cfg.cluster.name / RECORD_FILE


def record_rewrite(cfg: Config, root: Path | None = None) -> Path:
    """Encryption is being turned on: every Secret is to be rewritten once every API server encrypts."""
    path = record_path(cfg, root)
    ensure_private_dir(path.parent)
    return write_json(path, {"rewrite": "encrypt", "config": ENCRYPTION_CONFIG})


def rewrite_pending(cfg: Config, root: Path | None = None) -> bool:
    path = record_path(cfg, root)
    try:
        return bool(json.loads(path.read_text(encoding="utf-8")).get("rewrite") == "encrypt")
    except (OSError, ValueError, AttributeError):
        return False


def clear_rewrite(cfg: Config, root: Path | None = None) -> None:
    record_path(cfg, root).unlink(missing_ok=True)


def admin_kube(cfg: Config) -> Kube:
    """The admin client of the kubeconfig gpustack fetched for the cluster."""
    from gpustack.runners.kubeconfig import kube_from_file

    path = kubeconfig_path(cfg.cluster.name)
    if not path.is_file():
        raise StageError(f"no admin kubeconfig at {path}: the control planes' flags cannot be read", stage="detect",
                         hint="fetch it again (gpustack up --only control-plane), then run this again")  # fmt: skip
    return kube_from_file(path, request_timeout=60)
