"""Why nodes have no pod CIDR (doctor K04): the cluster CIDR the controller-manager cuts into node blocks is used up.

kube-controller-manager (``--allocate-node-cidrs``) gives each node a block of ``--node-cidr-mask-size`` (24 for
IPv4 unless set: kubernetes ``cmd/kube-controller-manager/app/core.go`` ``defaultNodeMaskCIDRIPv4``) out of
``--cluster-cidr`` (kubeadm: ``networking.podSubnet``); when none is left a new node gets no ``spec.podCIDR`` and
a ``CIDRNotAvailable`` event (``pkg/controller/nodeipam/ipam/range_allocator.go``). gpustack's default
10.244.0.0/16 holds 256 nodes. Found by the real control plane at 1,000 kwok nodes (issue 26).
"""

from __future__ import annotations

import ipaddress

from gpustack.diagnose.checks_security import mirror_pods
from gpustack.diagnose.cis import parse_flags
from gpustack.diagnose.snapshot import Snapshot


def cidr_room(snap: Snapshot) -> tuple[str, int] | None:
    """(the IPv4 cluster CIDR, how many node blocks it holds), from the controller-manager's mirror pod; None
    when no mirror pod with a readable ``--cluster-cidr`` is in the snapshot."""
    for argv in mirror_pods(snap, "kube-controller-manager").values():
        flags = parse_flags(argv or [])
        cidrs = (flags.get("cluster-cidr") or "").split(",")
        mask = flags.get("node-cidr-mask-size-ipv4") or flags.get("node-cidr-mask-size") or "24"
        for cidr in cidrs:
            try:
                net = ipaddress.ip_network(cidr.strip(), strict=False)
                size = int(mask)
            except ValueError:
                continue
            if net.version == 4:
                return str(net), 2 ** max(0, size - net.prefixlen)
    return None


def used_up(snap: Snapshot, with_cidr: int) -> str:
    """A sentence when ``with_cidr`` nodes already hold every block of the cluster CIDR, else ""."""
    room = cidr_room(snap)
    if room is None or with_cidr < room[1]:
        return ""
    return (f"the cluster CIDR {room[0]} holds {room[1]} node blocks and {with_cidr} nodes have them all: "
            "the controller-manager has none left for the others (their CIDRNotAvailable events)")  # fmt: skip
