"""Flannel's manifest, rendered by gpustack (nothing is downloaded; docs/decisions.md).

The objects are those of the Flannel release the pin table names (v0.28.9's
Documentation/kube-flannel.yml: Namespace, RBAC, ConfigMap ``kube-flannel-cfg``, DaemonSet
``kube-flannel-ds``, in upstream's field order), written from the config: ``net-conf.json``'s ``Network`` is ``cluster.pod_cidr`` (vxlan backend),
``cluster.flannel_iface`` becomes flanneld's ``--iface``, and the two images come from the pin
table (with a digest where one is pinned). Pure: the same config gives the same bytes.

Since v0.28.6 the install-cni init container runs ``/opt/bin/install-conf`` (flannel 6c58d115), and since
v0.28.9 flanneld serves ``/healthz`` and ``/readyz`` on ``--healthz-port=8081`` with liveness and readiness
probes on it (flannel 07c20946). With hostNetwork that port is every node's 0.0.0.0:8081 (``--healthz-ip``
defaults to 0.0.0.0; a failed listen panics flanneld), so the preflight requires 8081/tcp free (P07-ports).
The kubelet probes it on the node itself: no firewall rule is needed for it.

The network stage writes :func:`flannel_manifest` to /etc/gpustack/flannel/kube-flannel.yml on the
first control-plane node and applies it; ``gpustack render`` writes it to
manifests/kube-flannel.yaml.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml

from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.constants import FLANNEL_NAMESPACE

NAME = "flannel"  # ServiceAccount, ClusterRole and ClusterRoleBinding
CONFIGMAP = "kube-flannel-cfg"
DAEMONSET = "kube-flannel-ds"
CONTAINER = "kube-flannel"
HEADER = "# Flannel v{version} for this cluster, rendered by gpustack (gpustack/render/flannel.py).\n"

# The CNI configuration Flannel's install-cni init container copies to /etc/cni/net.d: the flannel
# plugin (bridge delegate, hairpin, default gateway) chained with portmap for hostPort.
_CNI_CONF: dict[str, Any] = {
    "name": "cbr0",
    "cniVersion": "0.3.1",
    "plugins": [
        {"type": "flannel", "delegate": {"hairpinMode": True, "isDefaultGateway": True}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}


def images(cfg: Config) -> tuple[str, str]:
    """(flannel, flannel-cni-plugin) image references for the config's Flannel version, each with
    its digest where the pin table or versions.image_digests has one."""
    v = cfg.versions
    tag = pins.FLANNEL_CNI_PLUGIN[v.flannel]  # the config model refuses a version not in the table
    refs = (pins.FLANNEL_IMAGE.format(version=v.flannel), pins.FLANNEL_CNI_PLUGIN_IMAGE.format(tag=tag))
    digests = {**pins.IMAGE_DIGESTS, **(v.image_digests or {})}
    return tuple(f"{r}@{digests[r]}" if r in digests else r for r in refs)  # type: ignore[return-value]


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"


def net_conf(cfg: Config) -> dict[str, Any]:
    return {"Network": str(cfg.cluster.pod_cidr), "EnableNFTables": False, "Backend": {"Type": "vxlan"}}


def flanneld_args(cfg: Config) -> list[str]:
    args = ["--ip-masq", "--kube-subnet-mgr", f"--healthz-port={pins.FLANNEL_HEALTHZ_PORT}"]
    if cfg.cluster.flannel_iface:
        args.append(f"--iface={cfg.cluster.flannel_iface}")
    return args


def _meta(name: str, *, namespaced: bool = True, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespaced:
        meta["namespace"] = FLANNEL_NAMESPACE
    meta["labels"] = labels or {"k8s-app": "flannel"}
    return meta


def _host_path(name: str, path: str, type_: str | None = None) -> dict[str, Any]:
    hp: dict[str, Any] = {"path": path}
    if type_:
        hp["type"] = type_
    return {"name": name, "hostPath": hp}


def _field(path: str) -> dict[str, Any]:
    return {"fieldRef": {"fieldPath": path}}


def _probe(path: str, *, initial_delay: int, period: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "healthz"}, "initialDelaySeconds": initial_delay, "periodSeconds": period}


def _daemonset(cfg: Config) -> dict[str, Any]:
    flannel_image, cni_plugin_image = images(cfg)
    node_labels = {"tier": "node", "app": "flannel"}
    pod_spec: dict[str, Any] = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}
                    ]
                }
            }
        },
        "hostNetwork": True,
        "priorityClassName": "system-node-critical",
        # every node, control planes and tainted GPU nodes included
        "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
        "serviceAccountName": NAME,
        "initContainers": [
            {
                "name": "install-cni-plugin",
                "image": cni_plugin_image,
                "command": ["cp"],
                "args": ["-f", "/flannel", "/opt/cni/bin/flannel"],
                "volumeMounts": [{"name": "cni-plugin", "mountPath": "/opt/cni/bin"}],
            },
            {
                "name": "install-cni",
                "image": flannel_image,
                "command": ["/opt/bin/install-conf"],
                "args": ["/etc/kube-flannel/cni-conf.json", "/etc/cni/net.d/10-flannel.conflist"],
                "volumeMounts": [
                    {"name": "cni", "mountPath": "/etc/cni/net.d"},
                    {"name": "flannel-cfg", "mountPath": "/etc/kube-flannel/"},
                ],
            },
        ],
        "containers": [
            {
                "name": CONTAINER,
                "image": flannel_image,
                "command": ["/opt/bin/flanneld"],
                "args": flanneld_args(cfg),
                "ports": [{"name": "healthz", "containerPort": pins.FLANNEL_HEALTHZ_PORT, "protocol": "TCP"}],
                "livenessProbe": _probe("/healthz", initial_delay=10, period=30),
                "readinessProbe": _probe("/readyz", initial_delay=5, period=10),
                "resources": {"requests": {"cpu": "100m", "memory": "50Mi"}},
                "securityContext": {"privileged": False, "capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}},
                "env": [
                    {"name": "POD_NAME", "valueFrom": _field("metadata.name")},
                    {"name": "POD_NAMESPACE", "valueFrom": _field("metadata.namespace")},
                    {"name": "EVENT_QUEUE_DEPTH", "value": "5000"},
                    {"name": "CONT_WHEN_CACHE_NOT_READY", "value": "false"},
                ],
                "volumeMounts": [
                    {"name": "run", "mountPath": "/run/flannel"},
                    {"name": "flannel-cfg", "mountPath": "/etc/kube-flannel/"},
                    {"name": "xtables-lock", "mountPath": "/run/xtables.lock"},
                ],
            }
        ],
        "volumes": [
            _host_path("run", "/run/flannel"),
            _host_path("cni-plugin", "/opt/cni/bin"),
            _host_path("cni", "/etc/cni/net.d"),
            {"name": "flannel-cfg", "configMap": {"name": CONFIGMAP}},
            _host_path("xtables-lock", "/run/xtables.lock", "FileOrCreate"),
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(DAEMONSET, labels={**node_labels, "k8s-app": "flannel"}),
        "spec": {
            "selector": {"matchLabels": {"app": "flannel"}},
            "template": {"metadata": {"labels": node_labels}, "spec": pod_spec},
        },
    }


def flannel_objects(cfg: Config) -> list[dict[str, Any]]:
    """The Kubernetes objects of Flannel for this cluster, in apply order."""
    namespace_labels = {"k8s-app": "flannel", "pod-security.kubernetes.io/enforce": "privileged"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": _meta(FLANNEL_NAMESPACE, namespaced=False, labels=namespace_labels),
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(NAME, namespaced=False),
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(NAME, namespaced=False),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": FLANNEL_NAMESPACE}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(CONFIGMAP, labels={"tier": "node", "k8s-app": "flannel", "app": "flannel"}),
            "data": {"cni-conf.json": _json(_CNI_CONF), "net-conf.json": _json(net_conf(cfg))},
        },
        _daemonset(cfg),
    ]


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (the embedded JSON stays readable)."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_Dumper.add_representer(str, _represent_str)


def flannel_manifest(cfg: Config) -> str:
    """The manifest as YAML text: deterministic, so writing it is idempotent."""
    body = yaml.dump_all(
        flannel_objects(cfg), Dumper=_Dumper, explicit_start=True, sort_keys=False, default_flow_style=False, width=100
    )
    return HEADER.format(version=cfg.versions.flannel) + body


def manifest_sha256(cfg: Config) -> str:
    return hashlib.sha256(flannel_manifest(cfg).encode("utf-8")).hexdigest()
