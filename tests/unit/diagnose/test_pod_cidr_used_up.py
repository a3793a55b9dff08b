"""doctor K04 says when nodes have no pod CIDR because the cluster CIDR is used up (issue 26: found by the real
kube-controller-manager 1.36.5 at 1,000 kwok nodes, 744 of them without a podCIDR out of 10.244.0.0/16), and keeps
its old finding for a cluster whose controller-manager allocates none."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack.diagnose import registry
from gpustack.diagnose.pod_cidr_room import cidr_room
from gpustack.diagnose.snapshot import Snapshot
from tests.fakes.pod_cidrs import pod_cidr_spec


def node(i: int, cidr: bool) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": f"n{i}"}, "spec": pod_cidr_spec(i) if cidr else {}}


def controller_manager(*flags: str) -> dict[str, Any]:
    container = {"name": "kube-controller-manager", "command": ["kube-controller-manager", *flags]}
    return {"kind": "Pod", "metadata": {"name": "kube-controller-manager-n0", "namespace": "kube-system",
            "labels": {"component": "kube-controller-manager", "tier": "control-plane"}},
            "spec": {"nodeName": "n0", "containers": [container]}}  # fmt: skip


def k04(nodes: int, with_cidr: int, *flags: str) -> list[Any]:
    snap = Snapshot(kube={"Node": [node(i, i < with_cidr) for i in range(nodes)], "Pod": [controller_manager(*flags)],
                          "DaemonSet": []})  # fmt: skip
    found = registry.run([registry.load_all()["K04-pod-network"]], snap)
    return [f for f in found if "pod CIDR" in f.summary]


FLAGS = ("--allocate-node-cidrs=true", "--cluster-cidr=10.244.0.0/16")


def test_every_block_taken_says_the_cluster_cidr_is_used_up() -> None:
    (f,) = k04(300, 256, *FLAGS)
    assert f.status == "fail" and "no pod CIDR assigned to n256" in f.summary and "and 34 more" in f.summary
    assert "the cluster CIDR 10.244.0.0/16 holds 256 node blocks and 256 nodes have them all" in f.evidence
    assert "larger cluster.pod_cidr" in f.fix and "podSubnet" not in f.fix


def test_room_left_keeps_the_finding_about_allocation() -> None:
    (f,) = k04(300, 255, *FLAGS)
    assert "--allocate-node-cidrs=true" in f.evidence and "holds" not in f.evidence


@pytest.mark.parametrize(
    ("flags", "room"),
    [
        (FLAGS, ("10.244.0.0/16", 256)),
        (("--cluster-cidr", "10.244.0.0/14"), ("10.244.0.0/14", 1024)),
        (("--cluster-cidr=10.244.0.0/16", "--node-cidr-mask-size=26"), ("10.244.0.0/16", 1024)),
        (("--cluster-cidr=fd00::/48,10.244.0.0/16", "--node-cidr-mask-size-ipv4=25"), ("10.244.0.0/16", 512)),
        (("--allocate-node-cidrs=true",), None),
    ],
)
def test_the_room_is_read_from_the_controller_managers_flags(flags: tuple[str, ...], room: Any) -> None:
    snap = Snapshot(kube={"Pod": [controller_manager(*flags)]})
    assert cidr_room(snap) == room


def test_no_controller_manager_pod_keeps_the_old_finding() -> None:
    snap = Snapshot(kube={"Node": [node(0, False)], "Pod": [], "DaemonSet": []})
    (f,) = [f for f in registry.run([registry.load_all()["K04-pod-network"]], snap) if "pod CIDR" in f.summary]
    assert "--allocate-node-cidrs=true" in f.evidence
