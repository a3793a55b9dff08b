"""The kubelet's settings ``security:`` drives, brought to a running cluster by ``gpustack security apply``.

kubeadm keeps the cluster's KubeletConfiguration in ``kube-system/kubelet-config`` (key ``kubelet``) and writes each
node's /var/lib/kubelet/config.yaml from it at ``join`` and ``upgrade``. kubernetes/website
``content/en/docs/tasks/administer-cluster/kubeadm/kubeadm-reconfigure.md`` ("Applying kubelet configuration
changes"): edit that ConfigMap, then on each node ``kubeadm upgrade node phase kubelet-config`` (it downloads the
ConfigMap into config.yaml) and restart the kubelet, one node at a time. gpustack edits only the keys it renders
(:data:`MANAGED`), every other key of the ConfigMap is kept; the role judges each node's config.yaml with the twin
of :func:`drift` (playbooks/filter_plugins/gpustack_kubelet.py; tests/unit/cluster/test_kubelet_apply.py holds them
to one answer), so a node already as configured is left alone and an interrupted run resumes with the next.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from gpustack.config.model import Config
from gpustack.render.security import kubeadm_security
from gpustack.runners.kube import Kube

#: the KubeletConfiguration keys gpustack.yaml's security: renders (gpustack/render/security.py kubeadm_security)
MANAGED = ("serverTLSBootstrap", "protectKernelDefaults", "tlsCipherSuites", "podPidsLimit")
#: booleans kubeadm leaves out when false (omitempty): absent is false
FALSE_WHEN_ABSENT = frozenset({"serverTLSBootstrap", "protectKernelDefaults"})
CONFIGMAP = "/api/v1/namespaces/kube-system/configmaps/kubelet-config"


def wanted(cfg: Config) -> dict[str, Any]:
    """The managed keys as ``cfg`` renders them (a key it leaves out, e.g. ``podPidsLimit`` with no limit, absent)."""
    kubelet = kubeadm_security(cfg).kubelet
    return {k: kubelet[k] for k in MANAGED if k in kubelet}


def _value(key: str, config: Mapping[str, Any]) -> Any:
    value = config.get(key)
    return False if value is None and key in FALSE_WHEN_ABSENT else value


def drift(config: Mapping[str, Any], want: Mapping[str, Any]) -> list[str]:
    """The managed keys whose value in ``config`` (a parsed KubeletConfiguration) is not ``want``'s."""
    return [k for k in MANAGED if _value(k, config) != _value(k, want)]


def merged_kubelet_config(text: str, cfg: Config) -> str:
    """The ConfigMap's KubeletConfiguration with the managed keys as ``cfg`` renders them, every other key kept."""
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict) or doc.get("kind") != "KubeletConfiguration":
        raise ValueError("its kubelet key holds no KubeletConfiguration")
    want = wanted(cfg)
    for key in MANAGED:
        if key in want:
            doc[key] = want[key]
        else:
            doc.pop(key, None)
    return yaml.safe_dump(doc, sort_keys=False)


def configmap_drift(cfg: Config, kube: Kube) -> list[str]:
    """The managed keys the ``kubelet-config`` ConfigMap holds otherwise than ``cfg`` renders (what the CLI shows
    before it asks: the kubelets restart where their config.yaml differs)."""
    cm = kube.request("GET", CONFIGMAP)
    doc = yaml.safe_load(str((cm.get("data") or {}).get("kubelet") or ""))
    return drift(doc if isinstance(doc, dict) else {}, wanted(cfg))
