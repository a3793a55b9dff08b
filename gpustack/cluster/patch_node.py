"""One node's turn in ``gpustack node patch``, the parts that go through the Kubernetes API:

    take_out: cordon (gpustack's annotation says "gpustack node patch"), wait for the node's GPU jobs
      (gpustack.cluster.patch_wait.gpu_jobs) up to --gpu-job-timeout -- still running: the node is
      uncordoned again and the patch refused (exit 2, nothing changed), unless --evict-gpu-pods -- then the
      drain of gpustack.cluster.drain (Eviction API, PodDisruptionBudgets respected; a failed drain uncordons)
    bring_back: the GPU stack back as before the drain (patch_wait.not_back) within --ready-timeout; not
      back: the node stays cordoned and the run stops with what to look at
    uncordon: only a cordon gpustack node patch made

The record (<state>/clusters/<cluster>/node-patch.json, 0600) keeps each node's step and what its GPU stack
was before the drain, so a run interrupted after the reboot still knows what must come back. The Node's own
cordon annotation is the other half of the state: a node gpustack node patch cordoned is patched again (and
uncordoned) by the next run even when its packages are already current.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpustack.cluster import drain, patch_wait
from gpustack.constants import ANN_DRAIN_CORDONED_BY, GPU_NAMESPACE
from gpustack.errors import ConfigError, GpustackError
from gpustack.paths import ensure_private_dir, kubeconfig_path, write_json
from gpustack.runners.kube import Kube, Obj

#: the cordon annotation's value (gpustack.constants.ANN_DRAIN_CORDONED_BY) on a node this command cordoned
WHY = "gpustack node patch"

Progress = Callable[[str], None]


class PatchRefused(ConfigError):
    """A patch gpustack will not start (GPU jobs still running, a PodDisruptionBudget that blocks); exit 2."""


class NodeNotBack(GpustackError):
    """A patched node whose GPU stack did not come back; it stays cordoned; exit 1."""


def record_path(cluster: str) -> Path:
    return kubeconfig_path(cluster).parent / "node-patch.json"


def state_dir(cluster: str) -> Path:
    """Where the inspect and packages stages write each host's patch state (0700)."""
    return kubeconfig_path(cluster).parent / "node-patch"


def read_json(path: Path) -> dict[str, Any]:
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def host_state(cluster: str, node: str) -> dict[str, Any]:
    """What the playbook last read on ``node`` (playbooks/roles/node_patch/tasks/state.yml); {} when nothing."""
    return read_json(state_dir(cluster) / f"{node}.json")


def update_record(cluster: str, node: str, **fields: Any) -> dict[str, Any]:
    """Merge ``fields`` into the node's entry of the record, stamped with the time; the whole record."""
    path = record_path(cluster)
    rec = read_json(path)
    nodes = rec.setdefault("nodes", {})
    entry = nodes.setdefault(node, {})
    entry.update(fields, updated=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    ensure_private_dir(path.parent)
    write_json(path, rec)
    return rec


def node_record(cluster: str, node: str) -> dict[str, Any]:
    return dict((read_json(record_path(cluster)).get("nodes") or {}).get(node) or {})


def cordoned_by_patch(node: Obj | None) -> bool:
    """The node carries this command's cordon: an earlier run stopped before uncordoning it (pure)."""
    ann = ((node or {}).get("metadata") or {}).get("annotations") or {}
    return bool((node or {}).get("spec", {}).get("unschedulable")) and ann.get(ANN_DRAIN_CORDONED_BY) == WHY


def needs_patch(state: Mapping[str, Any], node: Obj | None) -> bool:
    """Whether the node gets its turn (pure): the host has something to do, or an earlier run left it cordoned."""
    return bool(state.get("needed")) or cordoned_by_patch(node)


def take_out(
    kube: Kube,
    cluster: str,
    node: str,
    *,
    gpu_job_timeout: float,
    drain_timeout: float,
    evict_gpu_pods: bool,
    interval: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    progress: Progress | None = None,
) -> int:
    """Cordon ``node``, wait for its GPU jobs, drain it; the number of pods evicted. PatchRefused when its GPU
    jobs are still running after ``gpu_job_timeout`` (the node uncordoned again when this cordoned it)."""
    obj = kube.get("v1", "Node", node)
    if obj is None:
        raise PatchRefused(f"{node} is not a node of the cluster", hint="`gpustack node add` joins it first")
    pods = drain.node_pods(kube, node)
    rec = node_record(cluster, node)
    if not rec.get("baseline") or not cordoned_by_patch(obj):  # a resumed node keeps what it had before
        rec["baseline"] = patch_wait.GpuBaseline.read(obj, pods).as_record()
    ours = drain.ours_to_uncordon(obj)
    if ours:
        drain.cordon(kube, node, why=WHY)
    update_record(cluster, node, status="cordoned", baseline=rec["baseline"], cordoned=ours)
    left = patch_wait.wait_until(
        lambda: patch_wait.gpu_jobs(drain.node_pods(kube, node)),
        timeout=gpu_job_timeout, interval=interval, clock=clock, sleep=sleep, progress=progress,
    )  # fmt: skip
    if left and not evict_gpu_pods:
        if ours:
            drain.cordon(kube, node, on=False)
        update_record(cluster, node, status="refused", gpu_jobs=left)
        raise PatchRefused(
            f"{node}: GPU job(s) still running after {gpu_job_timeout:.0f}s: {', '.join(left)}",
            hint=f"nothing was changed ({node} is uncordoned again); run again when they finished, give them longer "
            "(--gpu-job-timeout), or --evict-gpu-pods (a Job's pod starts again elsewhere; its work so far is lost)",
        )
    result = drain.drain(kube, node, timeout=drain_timeout, interval=interval, clock=clock, sleep=sleep,
                         progress=progress, why=WHY)  # fmt: skip
    update_record(cluster, node, status="drained", evicted=result.evicted)
    return len(result.evicted)


def look_at(node: str) -> str:
    """What to look at on a node whose GPU stack did not come back (pure)."""
    return (
        f"{node} stays cordoned. Look at: kubectl describe node {node}; kubectl -n {GPU_NAMESPACE} get pods -o wide "
        f"--field-selector spec.nodeName={node}; kubectl -n {GPU_NAMESPACE} logs ds/nvidia-driver-daemonset "
        f"--all-containers --tail 50 (a driver that does not build for the new kernel: its headers); on the host: "
        f"journalctl -u kubelet -b, uname -r, nvidia-smi; `gpustack doctor`. Then run the same `gpustack node patch` "
        "again: it continues with this node"
    )


def bring_back(
    kube: Kube,
    cluster: str,
    node: str,
    *,
    timeout: float,
    interval: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    progress: Progress | None = None,
) -> None:
    """Wait until ``node``'s GPU stack is back as it was before the drain (the record's baseline), with the boot
    id the host reported last (after a reboot, a Node status from before it does not count). NodeNotBack
    when it is not within ``timeout``: the node stays cordoned."""
    base = patch_wait.GpuBaseline.from_record(node_record(cluster, node).get("baseline") or {})
    host_boot = str(host_state(cluster, node).get("boot_id") or "")

    def probe() -> list[str]:
        return patch_wait.not_back(base, kube.get("v1", "Node", node), drain.node_pods(kube, node), host_boot=host_boot)

    left = patch_wait.wait_until(probe, timeout=timeout, interval=interval, clock=clock, sleep=sleep, progress=progress)
    if left:
        update_record(cluster, node, status="not back", waiting=left)
        raise NodeNotBack(f"{node} did not come back within {timeout:.0f}s: {'; '.join(left)}", hint=look_at(node))
    update_record(cluster, node, status="back")


def uncordon(kube: Kube, cluster: str, node: str) -> bool:
    """Uncordon ``node`` when this command cordoned it; whether it did."""
    obj = kube.get("v1", "Node", node)
    done = cordoned_by_patch(obj)
    if done:
        drain.cordon(kube, node, on=False)
    update_record(cluster, node, status="done")
    return done
