"""Node pod CIDRs as the controller-manager's node IPAM allocator hands them out, for the test doubles' scenarios.

kube-controller-manager (``--allocate-node-cidrs=true``, which kubeadm sets with ``networking.podSubnet``) cuts
``--cluster-cidr`` into blocks of ``--node-cidr-mask-size`` (24 for IPv4 unless set: kubernetes
``cmd/kube-controller-manager/app/core.go``, ``defaultNodeMaskCIDRIPv4``) and gives each new node the next free one
(``pkg/controller/nodeipam/ipam/cidrset``); a node that finds none left gets no ``spec.podCIDR`` and a
``CIDRNotAvailable`` event. So gpustack's default 10.244.0.0/16 holds 256 nodes: a scenario larger than that is
given a cluster CIDR that holds it, as a real cluster of that size must be configured (1,024 nodes: a /14).
"""

from __future__ import annotations

from typing import Any

#: gpustack's default ``cluster.pod_cidr`` (Flannel's) and the larger one a scenario of more nodes needs
DEFAULT, LARGE = "10.244.0.0/16", "10.244.0.0/14"


def cluster_pod_cidr(nodes: int) -> str:
    """The ``cluster.pod_cidr`` of a scenario cluster of ``nodes`` nodes: the default while it holds them."""
    if nodes <= 256:
        return DEFAULT
    if nodes <= 1024:
        return LARGE
    raise ValueError(f"{nodes} nodes: the test scenarios' pod CIDRs hold at most 1,024")


def node_pod_cidr(i: int) -> str:
    """Node ``i``'s /24, inside :func:`cluster_pod_cidr` of any scenario that has node ``i``."""
    return f"10.{244 + i // 256}.{i % 256}.0/24"


def pod_cidr_spec(i: int) -> dict[str, Any]:
    """The ``spec.podCIDR``/``podCIDRs`` the allocator writes on node ``i``."""
    return {"podCIDR": node_pod_cidr(i), "podCIDRs": [node_pod_cidr(i)]}
