"""How kube-state-metrics names things gpustack reads. Pure.

kube-state-metrics 2.20 (the chart kube-prometheus-stack 88.5.3 depends on) exports a resource's Kubernetes
labels in ``kube_<resource>_labels`` only for keys listed in ``--metric-labels-allowlist`` (chart value
``metricLabelsAllowlist``), each as a Prometheus label named by :func:`label_name`.
"""

from __future__ import annotations

import re


def label_name(key: str) -> str:
    """The Prometheus label for a Kubernetes label key: ``label_`` + the key with every character outside
    ``[a-zA-Z0-9_]`` replaced by ``_``, then snake-cased (internal/store/utils.go ``labelName``):
    ``example.com/teamName`` -> ``label_example_com_team_name``."""
    sanitized = re.sub(r"[^a-zA-Z0-9_]", "_", key)
    return "label_" + re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", sanitized).lower()


def namespace_allowlist(key: str) -> list[str]:
    """``metricLabelsAllowlist`` entries exporting namespace label ``key`` (``namespaces=[team]``)."""
    return [f"namespaces=[{key}]"]


#: the node label GPU feature discovery sets on time-sliced and MPS nodes (k8s-device-plugin v0.20.0
#: internal/lm/resource.go); the alert GPUsMissingFromMetrics skips those nodes (allocatable counts replicas)
SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"


def node_allowlist(keys: list[str]) -> list[str]:
    """``metricLabelsAllowlist`` entries exporting node labels ``keys`` (``nodes=[a,b]``); none for no keys."""
    return [f"nodes=[{','.join(keys)}]"] if keys else []
