"""The Job ``gpustack diag`` runs on one GPU node, the timeouts per level, and which pods use a node's
GPUs. Pure: everything here is a function of its arguments.

One Job per node:

- pinned to the node with a required node affinity on ``metadata.name`` (the scheduler still places
  it, so a node whose GPUs are held by other pods leaves it Pending with a reason instead of failing
  it at the kubelet), tolerating the taints a GPU node under test may carry: ``nvidia.com/gpu``, the
  cordon (``node.kubernetes.io/unschedulable``: ``gpustack health release`` needs a diag on a
  quarantined, cordoned node), gpustack's own quarantine taint, and the control-plane taint;
- requesting every allocatable ``nvidia.com/gpu`` of the node, so nothing else is scheduled on them
  while the test runs;
- the pinned DCGM image (:data:`gpustack.config.pins.DIAG_DCGM_IMAGE`), privileged as NVIDIA runs its
  own standalone DCGM (GPU Operator ``assets/state-dcgm``): diagnostics need the GPUs' device files
  and root; no service account token (the pod talks to nothing);
- ``backoffLimit: 0`` (a failed diagnostic is a result, not something to retry),
  ``activeDeadlineSeconds`` (the level's timeout plus the time to pull the image and start the host
  engine) and ``ttlSecondsAfterFinished`` as a backstop: gpustack deletes its Jobs itself, also on
  Ctrl-C, but a run that is killed outright leaves one behind until the TTL.

The container starts ``nv-hostengine`` (the image's own entrypoint is the host engine), waits until it
answers, then runs ``dcgmi diag -r LEVEL -j --timeout T`` (or, with ``--health``, sets every health
watch with ``dcgmi health -s a``, waits the 60 s the watches need, and runs ``dcgmi health -c -j``),
printing markers around dcgmi's output so the log is parsed without guessing (:mod:`gpustack.diag.dcgmi`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpustack.config import pins
from gpustack.constants import (
    DIAG_NAMESPACE,
    GPU_NAMESPACE,
    LABEL_PREFIX,
    QUARANTINE_TAINT_EFFECT,
    QUARANTINE_TAINT_KEY,
)
from gpustack.diag.dcgmi import BEGIN_MARKER, END_MARKER

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
PART_OF = "app.kubernetes.io/part-of"
COMPONENT = "app.kubernetes.io/component"
RUN_LABEL = f"{LABEL_PREFIX}/diag-run"
NODE_ANNOTATION = f"{LABEL_PREFIX}/node"

#: dcgmi diag's own --timeout per level, seconds. NVIDIA's dcgmi diag reference: level 1 "normally
#: lasting seconds", 2 "approximately two minutes", 3 "approximately 15 minutes", 4 "extended,
#: longer-running" (memtest and pulse_test on top of 3). Generous multiples, because tests of
#: several GPUs share the host (PCIe, CPU) and slow down.
LEVEL_TIMEOUTS: dict[int, int] = {1: 120, 2: 600, 3: 2700, 4: 14400}
LEVEL_NAMES = {1: "quick", 2: "medium", 3: "long", 4: "extended"}
#: pulling the DCGM image (~2 GB) and starting the host engine, before dcgmi's own timeout starts
START_ALLOWANCE = 600
#: --health: the watches need 60 s of samples before the first check ("watch requires 60 sec")
HEALTH_WAIT = 65
HEALTH_TIMEOUT = HEALTH_WAIT + 60
#: extra time for the container to print its result after dcgmi's timeout fired
FINISH_MARGIN = 120
#: the Job is deleted by Kubernetes this long after it finished, if gpustack could not delete it
TTL_AFTER_FINISHED = 3600
#: levels that stress the GPUs for long enough that a workload sharing them would disturb (and be
#: disturbed by) the test: refused while other GPU pods run on the node, unless --force
EXCLUSIVE_LEVELS = frozenset({3, 4})

SCRIPT = f"""\
set -u
echo "gpustack: starting nv-hostengine (DCGM {pins.DCGM_VERSION})"
nv-hostengine --log-level ERROR -f /tmp/nv-hostengine.log || true
i=0
until dcgmi discovery -l >/dev/null 2>&1; do
  i=$((i + 1))
  if [ "$i" -ge 30 ]; then
    echo "gpustack: nv-hostengine did not answer within 30 s; its log:"
    cat /tmp/nv-hostengine.log 2>/dev/null
    exit 97
  fi
  sleep 1
done
echo "gpustack: nv-hostengine answers after $i s"
if [ "$DIAG_MODE" = health ]; then
  dcgmi health -s a >/dev/null || exit 98
  sleep "$DIAG_HEALTH_WAIT"
  echo "{BEGIN_MARKER} (dcgmi health -c -j)"
  dcgmi health -c -j
  rc=$?
else
  echo "{BEGIN_MARKER} (dcgmi diag -r $DIAG_LEVEL -j --timeout $DIAG_TIMEOUT)"
  dcgmi diag -r "$DIAG_LEVEL" -j --timeout "$DIAG_TIMEOUT"
  rc=$?
fi
echo "{END_MARKER} (exit $rc)"
nv-hostengine --term >/dev/null 2>&1 || true
exit "$rc"
"""


@dataclass(frozen=True)
class DiagSpec:
    """What one run asks for: ``mode`` "diag" (``dcgmi diag -r level``) or "health" (``dcgmi health -c``)."""

    mode: str = "diag"
    level: int = 1
    timeout: int | None = None  # dcgmi's timeout (s); default LEVEL_TIMEOUTS[level]

    @property
    def dcgmi_timeout(self) -> int:
        if self.mode == "health":
            return HEALTH_TIMEOUT
        return self.timeout if self.timeout is not None else LEVEL_TIMEOUTS[self.level]

    @property
    def active_deadline(self) -> int:
        """The Job's activeDeadlineSeconds: start-up + dcgmi's timeout + a margin to print the result."""
        return START_ALLOWANCE + self.dcgmi_timeout + FINISH_MARGIN

    @property
    def component(self) -> str:
        return "diag" if self.mode == "diag" else "diag-health"

    def describe(self) -> str:
        if self.mode == "health":
            return "dcgmi health -c"
        return f"dcgmi diag -r {self.level} ({LEVEL_NAMES[self.level]})"


def _slug(name: str, limit: int) -> str:
    s = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    return s[:limit].rstrip("-") or "node"


def job_name(node: str, spec: DiagSpec) -> str:
    """A stable name per node and mode (at most 52 characters, as CronJob-made names): a run finds
    the Job a previous, interrupted run left on that node."""
    digest = hashlib.sha256(node.encode()).hexdigest()[:8]
    prefix = "gpustack-diag-" if spec.mode == "diag" else "gpustack-health-"
    return f"{prefix}{_slug(node, 52 - len(prefix) - 9)}-{digest}"


def tolerations() -> list[Obj]:
    """The taints a GPU node under test may carry (never NoExecute: the Job must not outlive an eviction)."""
    return [
        {"key": GPU, "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
        {"key": QUARANTINE_TAINT_KEY, "operator": "Exists", "effect": QUARANTINE_TAINT_EFFECT},
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
    ]


def build_job(node: str, gpus: int, spec: DiagSpec, *, run_id: str, image: str | None = None) -> Obj:
    """The Job for ``node``, requesting ``gpus`` (all its allocatable ``nvidia.com/gpu``)."""
    if gpus < 1:
        raise ValueError(f"node {node} has no allocatable {GPU} to request")
    labels = {PART_OF: "gpustack", COMPONENT: spec.component, RUN_LABEL: run_id}
    env = [
        {"name": "DIAG_MODE", "value": spec.mode},
        {"name": "DIAG_LEVEL", "value": str(spec.level)},
        {"name": "DIAG_TIMEOUT", "value": str(spec.dcgmi_timeout)},
        {"name": "DIAG_HEALTH_WAIT", "value": str(HEALTH_WAIT)},
    ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(node, spec),
            "namespace": DIAG_NAMESPACE,
            "labels": labels,
            "annotations": {NODE_ANNOTATION: node},
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": spec.active_deadline,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED,
            "template": {
                "metadata": {"labels": labels, "annotations": {NODE_ANNOTATION: node}},
                "spec": {
                    "restartPolicy": "Never",
                    "runtimeClassName": "nvidia",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
                    "tolerations": tolerations(),
                    "terminationGracePeriodSeconds": 30,
                    "containers": [{
                        "name": "dcgm",
                        "image": image or pins.DIAG_DCGM_IMAGE,
                        "command": ["/bin/sh", "-c", SCRIPT],
                        "env": env,
                        "resources": {
                            "requests": {GPU: str(gpus), "cpu": "1", "memory": "2Gi"},
                            "limits": {GPU: str(gpus), "memory": "8Gi"},
                        },
                        "securityContext": {"privileged": True},
                    }],
                },
            },
        },
    }  # fmt: skip


def namespace_object() -> Obj:
    """The diag namespace, allowed to run privileged pods under Pod Security admission."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": DIAG_NAMESPACE,
            "labels": {
                PART_OF: "gpustack",
                "pod-security.kubernetes.io/enforce": "privileged",
                "pod-security.kubernetes.io/warn": "privileged",
            },
        },
    }


# --- nodes and the pods on them --------------------------------------------------------------------


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def gpu_capacity(node: Mapping[str, Any]) -> tuple[int, int]:
    """(capacity, allocatable) ``nvidia.com/gpu`` of a Node object."""
    status = node.get("status") or {}
    return _quantity((status.get("capacity") or {}).get(GPU)), _quantity((status.get("allocatable") or {}).get(GPU))


def node_name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def gpu_nodes(nodes: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Nodes with ``nvidia.com/gpu`` capacity, by name."""
    return {node_name(n): n for n in nodes if gpu_capacity(n)[0] > 0}


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """``nvidia.com/gpu`` a pod's containers hold (limits, else requests; init containers as the max)."""
    spec = pod.get("spec") or {}

    def held(containers: Any) -> list[int]:
        out = []
        for c in containers or []:
            res = (c or {}).get("resources") or {}
            out.append(_quantity((res.get("limits") or {}).get(GPU) or (res.get("requests") or {}).get(GPU)))
        return out

    return max(sum(held(spec.get("containers"))), max(held(spec.get("initContainers")), default=0))


def _uses_all_devices(pod: Mapping[str, Any]) -> bool:
    """A container that sees every GPU without asking the device plugin (NVIDIA_VISIBLE_DEVICES=all)."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        for e in (c or {}).get("env") or []:
            if (e or {}).get("name") == "NVIDIA_VISIBLE_DEVICES" and str(e.get("value")) == "all":
                return True
    return False


#: namespaces whose pods are GPU infrastructure (device plugin, exporter, validator), not workloads
INFRA_NAMESPACES = frozenset({GPU_NAMESPACE, "kube-system"})


def workload_gpu_pods(pods: Iterable[Mapping[str, Any]], node: str) -> list[str]:
    """``namespace/name`` of the running or pending pods on ``node`` that hold or see its GPUs, other than
    gpustack's own and the GPU infrastructure (operator operands, exporters): the workloads a long
    diagnostic would disturb."""
    out = []
    for pod in pods:
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        if spec.get("nodeName") != node:
            continue
        if str((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
            continue
        if (meta.get("labels") or {}).get(PART_OF) == "gpustack" or meta.get("namespace") in INFRA_NAMESPACES:
            continue
        if pod_gpus(pod) > 0 or _uses_all_devices(pod):
            out.append(f"{meta.get('namespace')}/{meta.get('name')}")
    return sorted(out)
