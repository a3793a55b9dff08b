"""Ansible filter for ``gpustack security apply`` (role ``security_apply``): which of the flags gpustack manages differ
between a static pod manifest on the host and what gpustack.yaml's ``security:`` renders.

``gpustack_flag_drift(manifest, wanted)``: ``manifest`` is the static pod (parsed YAML, as kubeadm writes it to
/etc/kubernetes/manifests), ``wanted`` ``{"managed": [flag names], "flags": {name: value}}`` for its component
(gpustack/commands/security_apply.py ``flag_vars``); returns the names that differ, sorted: set but not wanted,
wanted but not set, or set to another value. The twin of gpustack/cluster/security_apply.py ``component_drift``,
which judges the mirror pod the same way from the API (tests/unit/playbooks/test_flags_filter.py holds them to one
answer). kubeadm writes each flag as ``--name=value`` (cmd/kubeadm/app/util ``ArgumentsToCommand``); a bare
``--name`` is Go's boolean ``true``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - outside Ansible (unit tests without ansible)
    AnsibleFilterError = ValueError  # type: ignore[misc,assignment]


def _command(manifest: Mapping[str, Any]) -> list[str]:
    try:
        container = manifest["spec"]["containers"][0]
    except (KeyError, IndexError, TypeError):
        raise AnsibleFilterError("not a static pod manifest: no spec.containers") from None
    return [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]


def _flags(argv: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for arg in argv:
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            out[name] = value if eq else "true"
    return out


def flag_drift(manifest: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    have = _flags(_command(manifest))
    flags = dict(wanted.get("flags") or {})
    return sorted(n for n in wanted.get("managed") or [] if have.get(n) != (str(flags[n]) if n in flags else None))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"gpustack_flag_drift": flag_drift}
