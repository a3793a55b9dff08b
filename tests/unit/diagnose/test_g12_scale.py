"""G12-mig-config-state at fleet size (issue 32 item 8): it read every pod once per node (27.7 of doctor's 31 s at
1,000 nodes). It now reads the pods once, and only when a node's MIG state needs a log; what it reports per node is
still that node's own MIG manager log and GPU pods."""

from __future__ import annotations

from typing import Any

from gpustack.constants import GPU_NAMESPACE
from gpustack.diagnose import checks_sharing
from gpustack.diagnose.snapshot import Snapshot

NODES = 300
PODS_PER_NODE = 10


class CountingList(list[Any]):
    """A list that counts the passes over it."""

    passes = 0

    def __iter__(self) -> Any:
        CountingList.passes += 1
        return super().__iter__()


def _node(name: str, state: str) -> dict[str, Any]:
    labels = {"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": state}
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}}


def _pod(node: str, i: int) -> dict[str, Any]:
    if i == 0:
        return {"kind": "Pod", "metadata": {"name": f"nvidia-mig-manager-{node}", "namespace": GPU_NAMESPACE,
                                            "labels": {"app": "nvidia-mig-manager"}},
                "spec": {"nodeName": node}, "status": {"phase": "Running"}}  # fmt: skip
    gpu = {"resources": {"limits": {"nvidia.com/gpu": "1"}}} if i == 1 else {}
    return {"kind": "Pod", "metadata": {"name": f"job-{node}-{i}", "namespace": "ml"},
            "spec": {"nodeName": node, "containers": [{"name": "c", **gpu}]}, "status": {"phase": "Running"}}  # fmt: skip


def _fleet(failed: dict[str, str]) -> Snapshot:
    names = [f"gpu-{i:04d}" for i in range(NODES)]
    nodes = [_node(n, "failed" if n in failed else "success") for n in names]
    pods = CountingList(_pod(n, i) for n in names for i in range(PODS_PER_NODE))
    logs = {f"{GPU_NAMESPACE}/nvidia-mig-manager-{n}/nvidia-mig-manager": line for n, line in failed.items()}
    return Snapshot(kube={"Node": nodes, "Pod": pods}, pod_logs=logs)


def test_a_healthy_fleet_reads_no_pod() -> None:
    snap = _fleet({})
    CountingList.passes = 0
    assert checks_sharing.mig_config_state(snap) == []
    assert CountingList.passes == 0


def test_failed_nodes_among_many_get_their_own_log_and_pods_from_one_pass() -> None:
    failed = {
        "gpu-0007": "Unable to destroy GPU instance: In use by another client",
        "gpu-0200": "selected mig-config not present: all-1g.10gb",
    }
    snap = _fleet(failed)
    CountingList.passes = 0
    found = {f.host: f for f in checks_sharing.mig_config_state(snap)}
    assert CountingList.passes == 1  # one pass over 3,000 pods, not one per node
    assert set(found) == set(failed)
    in_use, absent = found["gpu-0007"], found["gpu-0200"]
    assert "In use by another client" in in_use.summary and "In use by another client" in in_use.evidence
    assert "ml/job-gpu-0007-1" in in_use.fix  # the node's own GPU pod, no other node's
    assert "job-gpu-0200" not in in_use.fix and "gpu-0008" not in in_use.fix
    assert "does not offer all-1g.10gb" in absent.summary
    assert "In use" not in absent.evidence  # the other node's log is not mixed in
