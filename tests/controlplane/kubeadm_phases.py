"""What kubeadm makes of gpustack's kubeadm configuration, placed on loopback for the tests.

The real ``kubeadm`` (built from k8s.io/kubernetes at the pinned version: tests/realbin/gobuild.py) runs its own
``init`` phases on gpustack's rendered configuration (:func:`gpustack.render.kubeadm.render_init_config`): the
certificates (``certs all``), the kubeconfigs (``kubeconfig all``), etcd's and the control plane's static pod
manifests (``etcd local``, ``control-plane all``). It runs them with ``--dry-run`` and ``KUBEADM_INIT_DRYRUN_DIR``
set (kubeadm's own switch for running ``init`` without root, ``cmd/kubeadm/app/constants``: ``GetDryRunDir``), so
everything lands in one directory and nothing under /etc/kubernetes.

The only changes to gpustack's configuration are where things live (:func:`place`): the advertised address (kubeadm
refuses a loopback one: ``SetAPIEndpointDynamicDefaults``; :data:`ADVERTISE` is a TEST-NET-2 address nothing
listens on), the API endpoint on 127.0.0.1 and a free port, the certificate directory, etcd's data directory and
ports, and the controller-manager's and scheduler's secure ports (free ports, so two runs never collide). Every
other flag is kubeadm's own from gpustack's configuration: what issue 28's hardening changes is tested as deployed.

The manifests' commands then run as processes (:func:`commands`), their paths and addresses moved to loopback
the same way (pure functions, unit-tested in tests/unit/test_controlplane_placement.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: the advertised address kubeadm needs (a global unicast address; TEST-NET-2, RFC 5737): only the ``kubernetes``
#: Service's endpoint carries it, nothing connects to it
ADVERTISE = "198.51.100.1"
LOOPBACK = "127.0.0.1"
#: kubeadm's fixed ports for etcd (constants.EtcdListenClientPort, EtcdListenPeerPort, EtcdMetricsPort)
ETCD_CLIENT, ETCD_PEER, ETCD_METRICS = 2379, 2380, 2381
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
KUBECONFIGS = ("admin.conf", "super-admin.conf", "controller-manager.conf", "scheduler.conf", "kubelet.conf")


@dataclass(frozen=True)
class Ports:
    apiserver: int
    etcd_client: int
    etcd_peer: int
    etcd_metrics: int
    controller_manager: int
    scheduler: int


def place(rendered: str, *, pki: Path, ports: Ports) -> str:
    """gpustack's rendered kubeadm configuration, placed on loopback (see the module docstring)."""
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    for doc in docs:
        if doc.get("kind") == "InitConfiguration":
            doc["localAPIEndpoint"] = {"advertiseAddress": ADVERTISE, "bindPort": ports.apiserver}
        elif doc.get("kind") == "ClusterConfiguration":
            doc["controlPlaneEndpoint"] = f"{LOOPBACK}:{ports.apiserver}"
            doc["certificatesDir"] = str(pki)
            api = doc.setdefault("apiServer", {})
            api["certSANs"] = [*(api.get("certSANs") or []), LOOPBACK]
            _extra(api, "bind-address", LOOPBACK)
            _extra(doc.setdefault("controllerManager", {}), "secure-port", str(ports.controller_manager))
            _extra(doc.setdefault("scheduler", {}), "secure-port", str(ports.scheduler))
            local = doc.setdefault("etcd", {}).setdefault("local", {})
            local["dataDir"] = str(pki.parent / "etcd-data")
    return yaml.safe_dump_all(docs, sort_keys=False)


def _extra(component: dict[str, Any], name: str, value: str) -> None:
    """Set one of kubeadm v1beta4's ``extraArgs`` (a list of name/value pairs), replacing the same name."""
    args = [a for a in component.get("extraArgs") or [] if a.get("name") != name]
    component["extraArgs"] = [*args, {"name": name, "value": value}]


def command_of(manifest: Mapping[str, Any]) -> list[str]:
    """The first container's command of a static pod manifest."""
    return [str(a) for a in manifest["spec"]["containers"][0]["command"]]


def _url_ports(value: str, ports: Ports) -> str:
    """etcd's URLs moved to loopback and the free ports; a list that becomes two equal URLs keeps one."""
    mapping = {ETCD_CLIENT: ports.etcd_client, ETCD_PEER: ports.etcd_peer, ETCD_METRICS: ports.etcd_metrics}

    def move(url: str) -> str:
        m = re.fullmatch(r"(https?)://([^:/]+):(\d+)", url)
        if not m or int(m.group(3)) not in mapping:
            return url
        return f"{m.group(1)}://{LOOPBACK}:{mapping[int(m.group(3))]}"

    moved = [move(u) for u in value.split(",")]
    return ",".join(dict.fromkeys(moved))


def relocate(args: list[str], *, root: Path, ports: Ports) -> list[str]:
    """A manifest command with /etc/kubernetes moved to ``root`` and etcd's addresses to loopback and free ports.
    kubeadm wrote the kubeconfigs and certificates to ``root`` (its dry-run directory); the command names
    /etc/kubernetes/<name>.conf (``constants.KubernetesDir``) for the kubeconfigs."""
    out = []
    for arg in args:
        name, eq, value = arg.partition("=")
        if eq:
            value = value.replace("/etc/kubernetes/pki/", f"{root}/").replace("/etc/kubernetes/", f"{root}/")
            value = value.replace("/var/log/kubernetes/", f"{root}/var-log-kubernetes/")  # the audit log
            if name.endswith("-urls") or name in ("--etcd-servers", "--initial-cluster"):
                value = _initial_cluster(value, ports) if name == "--initial-cluster" else _url_ports(value, ports)
            arg = f"{name}={value}"
        out.append(arg)
    return out


def host_path(path: str, root: Path) -> Path:
    """Where a file a control plane keeps under /etc/kubernetes or /var/log/kubernetes lives in ``root`` (as
    :func:`relocate` moves the flags that name it)."""
    if path.startswith("/etc/kubernetes/"):
        return root / path.removeprefix("/etc/kubernetes/")
    if path.startswith("/var/log/kubernetes/"):
        return root / "var-log-kubernetes" / path.removeprefix("/var/log/kubernetes/")
    raise ValueError(f"{path}: not under /etc/kubernetes or /var/log/kubernetes")


def _initial_cluster(value: str, ports: Ports) -> str:
    return ",".join(f"{member.partition('=')[0]}={_url_ports(member.partition('=')[2], ports)}"
                    for member in value.split(","))  # fmt: skip


def kubeconfig_on_loopback(text: str, port: int) -> str:
    """A kubeconfig kubeadm wrote for the advertised address, pointed at the API server on loopback."""
    return text.replace(f"https://{ADVERTISE}:{port}", f"https://{LOOPBACK}:{port}")
