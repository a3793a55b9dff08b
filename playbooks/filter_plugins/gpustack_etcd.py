"""Ansible filter for ``etcdctl member list --write-out=json``: which members belong to the
control-plane nodes ``gpustack node remove`` takes out.

A member matches a removed node by its name (kubeadm names the member after the node) or by a peer
URL on the node's address. etcd prints member IDs as unsigned 64-bit decimals; ``etcdctl member
remove`` takes them in hex. Python's json keeps the full integer, so the hex is exact.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - outside Ansible (unit tests without ansible)
    AnsibleFilterError = ValueError  # type: ignore[misc,assignment]


def _host(url: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


def etcd_members_to_remove(
    member_list: str | Mapping[str, Any], removed: Sequence[Mapping[str, str]]
) -> list[dict[str, str]]:
    """``[{"id": hex, "name": ...}]`` of the members of ``removed`` nodes (``[{name, address}]``)."""
    try:
        data = json.loads(member_list) if isinstance(member_list, str) else dict(member_list)
    except ValueError as exc:
        raise AnsibleFilterError(f"etcdctl member list did not print JSON: {exc}") from None
    names = {str(r["name"]) for r in removed}
    addresses = {str(r["address"]) for r in removed}
    out: list[dict[str, str]] = []
    for m in data.get("members") or []:
        name = str(m.get("name") or "")
        hosts = {_host(str(u)) for u in m.get("peerURLs") or []}
        if name in names or hosts & addresses:
            out.append({"id": format(int(m["ID"]), "x"), "name": name or ", ".join(sorted(hosts))})
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"gpustack_etcd_members_to_remove": etcd_members_to_remove}
