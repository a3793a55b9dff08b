"""Converged re-runs: which hosts each stage still has to visit. Pure functions, no I/O except
:func:`tree_digest` (which reads the shipped playbooks).

Each host gets, per stage, an input digest: the playbooks' contents, every extra var and the
host's own inventory vars. A stage that completes records the digest with its probes on the host
(playbooks/module_utils/gpustack_stage.py); the preflight reads them back (gpustack_facts,
``facts.stages``). A stage whose play would find nothing to do on a host is left out of that
play's host pattern; a stage converged on every host runs no play at all. ``up --full`` (and a
missing preflight) visits every host, as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: Extra vars that do not shape what a stage does (per-run paths, the fast path's own inputs).
VOLATILE_VARS = frozenset({"gpustack_stage_hosts"})
#: The host-pattern value for a play with no host left to visit.
NO_HOSTS = "all:!all"
#: Stages whose play targets the control-plane group (the rest target every node or the workers).
STAGE_GROUPS = {
    "os": "all",
    "firewall": "all",
    "containerd": "all",
    "kubernetes": "all",
    "control-plane": "control_plane",
    "workers": "workers",
    "network": "control_plane",
    "helm": "control_plane",
}


def tree_digest(root: Path) -> str:
    """sha256 over every file under ``root`` (relative path and contents), caches excluded."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


#: Extra vars that follow the list of nodes, and the only stages whose roles read them (checked
#: against the roles by a unit test). Every other stage's digest leaves them out, so adding (or
#: removing) a node leaves the existing hosts' other stages converged: ``gpustack node add`` and
#: ``up`` with new nodes change an existing host only where the node list matters to it.
NODE_SET_VARS: dict[str, frozenset[str]] = {
    "gpustack_node_addresses": frozenset({"firewall"}),
    "gpustack_control_plane_addresses": frozenset({"firewall"}),
    "gpustack_single_node": frozenset({"control-plane"}),
    "gpustack_kubeadm_config": frozenset({"control-plane"}),
}

#: Extra vars only one stage's role reads that are no node list: the firewall's sources besides the
#: nodes. Changing them (another admin network, gpustack run from another machine) sends only the
#: firewall stage back to the hosts.
STAGE_ONLY_VARS: dict[str, frozenset[str]] = {
    "gpustack_firewall_admin_cidrs": frozenset({"firewall"}),
    "gpustack_firewall_controller_address": frozenset({"firewall"}),
    "gpustack_firewall_open_tcp_ports": frozenset({"firewall"}),
    # hosts.hold_kernel: turning it on or off revisits the kubernetes stage (kernel_hold.yml) only
    "gpustack_hold_kernel": frozenset({"kubernetes"}),
}


def host_digest(tree: str, extravars: Mapping[str, Any], hostvars: Mapping[str, Any], stage: str | None = None) -> str:
    """The input digest of one host: playbooks, extra vars and the host's vars. With ``stage``,
    the node-list vars that stage does not read (:data:`NODE_SET_VARS`, :data:`STAGE_ONLY_VARS`) are left out."""

    def counts(key: str) -> bool:
        readers = NODE_SET_VARS.get(key) or STAGE_ONLY_VARS.get(key)
        return key not in VOLATILE_VARS and (stage is None or readers is None or stage in readers)

    data = {
        "tree": tree,
        "extravars": {k: v for k, v in extravars.items() if counts(k)},
        "hostvars": {k: v for k, v in hostvars.items() if k != "gpustack_stage_digests"},
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _hosts(inventory: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for group in inventory["all"]["children"].values():
        for name, hv in (group.get("hosts") or {}).items():
            out[name] = hv
    return out


def with_stage_digests(
    inventory: Mapping[str, Any], extravars: Mapping[str, Any], tree: str, stages: Iterable[str] = STAGE_GROUPS
) -> dict[str, Any]:
    """A copy of ``inventory`` whose hosts carry ``gpustack_stage_digests`` ({stage: digest}) for
    the stages whose play targets them (a worker has no control-plane stage, and so on)."""
    stage_ids = list(stages)
    out: dict[str, Any] = json.loads(json.dumps(inventory))
    for group_name, group in out["all"]["children"].items():
        mine = [s for s in stage_ids if STAGE_GROUPS.get(s) in ("all", group_name)]
        for hv in (group.get("hosts") or {}).values():
            hv["gpustack_stage_digests"] = {
                s: hashlib.sha256(f"{s}\0{host_digest(tree, extravars, hv, s)}".encode()).hexdigest()[:32] for s in mine
            }
    return out


def stage_hosts(
    stages: Sequence[str],
    inventory: Mapping[str, Any],
    facts: Mapping[str, Mapping[str, Any]],
    *,
    must_run: Iterable[str] = (),
    only: Mapping[str, Collection[str]] | None = None,
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(host pattern per stage, converged hosts per stage) from the preflight's stage verdicts.

    A host is left out of a stage only when its facts say the stage is converged there; a host
    without facts (or without a verdict) is always visited. Stages in ``must_run`` keep their
    whole group. The pattern is the play's usual group when nobody is left out. ``only`` limits
    a stage to some nodes (``node add``: the new ones); the others are not visited at all.
    """
    hosts = _hosts(inventory)
    groups = {
        "all": list(hosts),
        "control_plane": list(inventory["all"]["children"]["control_plane"].get("hosts") or {}),
        "workers": list(inventory["all"]["children"]["workers"].get("hosts") or {}),
    }
    forced = set(must_run)
    patterns: dict[str, str] = {}
    converged: dict[str, list[str]] = {}
    for stage in stages:
        group = STAGE_GROUPS.get(stage)
        if group is None:
            continue
        members = groups[group]
        limited = only is not None and stage in only
        if limited:
            members = [h for h in members if h in (only or {})[stage]]
        done = [
            h
            for h in members
            if stage not in forced
            and ((facts.get(h) or {}).get("stages") or {}).get(stage, {}).get("converged") is True
        ]
        converged[stage] = done
        todo = [h for h in members if h not in done]
        if not todo:
            patterns[stage] = NO_HOSTS
        elif not done and not limited:
            patterns[stage] = group
        else:
            patterns[stage] = ",".join(todo)
    return patterns, converged
