"""Ansible filter for ``gpustack security apply`` (role ``security_apply``, tasks/kubelet.yml): which of the kubelet
settings gpustack manages differ between a node's /var/lib/kubelet/config.yaml and what gpustack.yaml's
``security:`` renders.

``gpustack_kubelet_drift(config, wanted)``: ``config`` the parsed config.yaml, ``wanted`` the managed keys as rendered
(gpustack/commands/security_apply.py ``kubelet_vars``); returns the keys that differ, in gpustack's order. The twin of
gpustack/cluster/kubelet_apply.py ``drift`` (tests/unit/cluster/test_kubelet_apply.py holds them to one answer):
the booleans kubeadm leaves out when false (``serverTLSBootstrap``, ``protectKernelDefaults``) count as false.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MANAGED = ("serverTLSBootstrap", "protectKernelDefaults", "tlsCipherSuites", "podPidsLimit")
FALSE_WHEN_ABSENT = ("serverTLSBootstrap", "protectKernelDefaults")


def _value(key: str, config: Mapping[str, Any]) -> Any:
    value = config.get(key)
    return False if value is None and key in FALSE_WHEN_ABSENT else value


def gpustack_kubelet_drift(config: Any, wanted: Mapping[str, Any]) -> list[str]:
    found = config if isinstance(config, Mapping) else {}
    return [k for k in MANAGED if _value(k, found) != _value(k, wanted)]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"gpustack_kubelet_drift": gpustack_kubelet_drift}
