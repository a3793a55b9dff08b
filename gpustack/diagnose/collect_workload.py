"""Sources that start test pods (``verify`` only; ``--no-workload`` starts none):

- ``pod-network``: a small pod (no GPU) that resolves ``kubernetes.default.svc`` through CoreDNS and
  opens a TCP connection to the API service, as every in-cluster client must
  (``snap.workload["net"]``);
- ``workload``: a CUDA test pod on one GPU (in a cluster that shares some GPUs, pinned to a node that shares
  none: the sharing nodes get their own pods, ``sharing-workload``), and with ``--load`` a dcgmproftester run whose Tensor
  Core activity must show up in Prometheus.

Each pod is created in the ``gpustack-verify`` namespace (POST, generated name), polled until it
finishes, gets stuck (Unschedulable, image pull errors) for longer than a grace period, or the
deadline passes -- and is deleted in a ``finally``, whatever happened.

``snap.workload["net"]``, ``["cuda"]`` and ``["load"]`` are plain records (see :func:`run_pod`;
``load`` adds ``before``/``during``: max ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` on unallocated GPUs before
the run, and on the load pod's GPU during it -- until dcgm-exporter attributes that GPU to the pod, on
the unallocated GPUs of its node, never on GPUs other pods hold). Skipped (recorded as ``skipped``) for
``doctor`` and with ``--no-workload``.

Knobs for tests in ``ctx.extra``: ``workload_deadline`` (s, default 240), ``net_deadline`` (default 120),
``load_deadline`` (default 300),
``poll_interval`` (default 2), ``stuck_grace`` (default 30), ``load_poll`` (default 5).

The source has its own collection deadline (``SOURCE_TIMEOUT``), above the pods' deadlines: image
pulls and the 45 s load run take far longer than the default 30 s per source.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpustack.config import pins
from gpustack.constants import VERIFY_NAMESPACE
from gpustack.diagnose import pod_queue
from gpustack.diagnose import sharing as sh
from gpustack.diagnose.collect import CollectContext, source
from gpustack.diagnose.collect_prometheus import kube_client, prometheus_endpoint, scalar_max
from gpustack.diagnose.objects import labels_of, listed, name_of
from gpustack.diagnose.snapshot import Obj, Snapshot
from gpustack.runners.http import HttpError, KubeApiEndpoint

CUDA_IMAGE = pins.VERIFY_CUDA_IMAGE
NET_IMAGE = pins.VERIFY_NET_IMAGE
#: what every in-cluster client does first: resolve the API service's name, connect to it
NET_TARGET = "kubernetes.default.svc:443"
NET_SOURCE_TIMEOUT = 180.0
DCGM_IMAGE = pins.VERIFY_DCGM_IMAGE
#: workload (240 s) + load (300 s) deadlines and the deletes
SOURCE_TIMEOUT = 600.0
LOAD_COMMAND = ["/usr/bin/dcgmproftester12", "--no-dcgm-validation", "-t", "1004", "-d", "45"]
TENSOR = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
STUCK_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                           "CreateContainerError", "RunContainerError", "CrashLoopBackOff"})  # fmt: skip
LOG_LIMIT = 4096


#: what verify's GPU test pods tolerate: the GPU taint some clusters put on their GPU nodes, nothing else (they go
#: where GPU workloads go, never onto a control plane that keeps its NoSchedule taint)
GPU_POD_TOLERATIONS: tuple[dict[str, str], ...] = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)
#: the taint effects the scheduler filters nodes on (``node.kubernetes.io/unschedulable`` stands for a cordon)
HARD_EFFECTS = ("NoSchedule", "NoExecute")


def takes_gpu_pods(node: Obj) -> bool:
    """The scheduler may place verify's GPU test pods on ``node``: not cordoned, and every NoSchedule/NoExecute taint
    tolerated by :data:`GPU_POD_TOLERATIONS` (kube-scheduler's NodeUnschedulable and TaintToleration filters; a pod
    pinned to a node that fails them would stay Pending until verify's deadline)."""
    spec = node.get("spec") if isinstance(node, dict) else None
    spec = spec if isinstance(spec, dict) else {}
    if spec.get("unschedulable"):
        return False
    for taint in spec.get("taints") or []:
        if not isinstance(taint, dict) or taint.get("effect") not in HARD_EFFECTS:
            continue
        if not any(t["key"] == taint.get("key") and t["effect"] == taint.get("effect") for t in GPU_POD_TOLERATIONS):
            return False
    return True


def gpu_pod(name_prefix: str, image: str, command: list[str], *, privileged: bool = False,
            resource: str = "nvidia.com/gpu", node: str = "") -> Obj:  # fmt: skip
    """A one-shot pod requesting one GPU (or one MIG device: ``resource``) through the NVIDIA runtime class,
    on ``node`` when given."""
    container: Obj = {
        "name": "main",
        "image": image,
        "command": command,
        "resources": {"limits": {resource: 1}},
    }
    if privileged:  # dcgmproftester needs profiling access; SYS_ADMIN alone is reported not to suffice
        container["securityContext"] = {"privileged": True}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": f"{name_prefix}-", "namespace": VERIFY_NAMESPACE,
                     "labels": {"app.kubernetes.io/part-of": "gpustack", "gpustack/verify": name_prefix}},
        "spec": {
            "restartPolicy": "Never",
            "runtimeClassName": "nvidia",
            "tolerations": [dict(t) for t in GPU_POD_TOLERATIONS],
            "containers": [container],
            **({"nodeSelector": {"kubernetes.io/hostname": node}} if node else {}),
        },
    }  # fmt: skip


def net_pod() -> Obj:
    """A one-shot, unprivileged pod: ``agnhost connect`` to the API service by name."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "gpustack-net-", "namespace": VERIFY_NAMESPACE,
                     "labels": {"app.kubernetes.io/part-of": "gpustack", "gpustack/verify": "gpustack-net"}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            # a single-node cluster keeps no taint, a multi-node one may run it on the control plane too
            "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                             "effect": "NoSchedule"}],
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "main",
                "image": NET_IMAGE,
                "command": ["/agnhost", "connect", "--timeout=10s", NET_TARGET],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                    "readOnlyRootFilesystem": True},
            }],
        },
    }  # fmt: skip


def cuda_pod(resource: str = "nvidia.com/gpu", node: str = "") -> Obj:
    return gpu_pod("gpustack-cuda", CUDA_IMAGE, ["nvidia-smi"], resource=resource, node=node)


def load_pod() -> Obj:
    return gpu_pod("gpustack-load", DCGM_IMAGE, LOAD_COMMAND, privileged=True)


def pod_state(pod: Obj) -> tuple[str, str, str]:
    """(phase, reason, message) -- the most telling reason: a waiting/terminated container, then
    an unschedulable condition."""
    status = pod.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    for cs in status.get("containerStatuses") or []:
        state = (cs or {}).get("state") or {}
        for key in ("waiting", "terminated"):
            st = state.get(key)
            if st and st.get("reason") and not (key == "terminated" and st.get("reason") == "Completed"):
                return phase, str(st["reason"]), str(st.get("message") or "")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return phase, str(cond.get("reason") or "Unschedulable"), str(cond.get("message") or "")
    return phase, str(status.get("reason") or ""), str(status.get("message") or "")


#: the verify namespace's labels: ``verify --load`` runs dcgmproftester privileged (profiling access), which
#: PodSecurity ``baseline`` (gpustack's cluster-wide default, security.pod_security) refuses elsewhere
VERIFY_NAMESPACE_LABELS = {"app.kubernetes.io/part-of": "gpustack", "pod-security.kubernetes.io/enforce": "privileged"}


def _ensure_namespace(kube: Any) -> None:
    kube.apply_one({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": VERIFY_NAMESPACE, "labels": dict(VERIFY_NAMESPACE_LABELS)}})  # fmt: skip


def _logs(kube: Any, name: str) -> str:
    try:
        resp = KubeApiEndpoint(kube).request("GET", f"/api/v1/namespaces/{VERIFY_NAMESPACE}/pods/{name}/log",
                                             query={"tailLines": "50"}, limit=LOG_LIMIT, timeout=10)  # fmt: skip
        return resp.text()
    except HttpError as exc:
        return f"(logs unavailable: {exc})"


def run_pod(
    kube: Any,
    manifest: Obj,
    *,
    deadline: float,
    interval: float = 2.0,
    stuck_grace: float = 30.0,
    while_running: Callable[[Obj], bool] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Obj:
    """Create the pod, poll it until it ends, is stuck for ``stuck_grace`` s, or ``deadline`` (a
    ``clock()`` value) passes; always delete it. ``while_running(pod)`` is called on every poll while
    the pod runs; returning True stops waiting early (the load test has seen what it needed).

    Returns ``{"pod", "namespace", "image", "node", "phase", "reason", "message", "logs", "elapsed",
    "timed_out", "stuck", "deleted", "error"}``.
    """
    start = clock()
    image = manifest["spec"]["containers"][0]["image"]
    record: Obj = {"pod": "", "namespace": VERIFY_NAMESPACE, "image": image, "node": "", "phase": "",
                   "reason": "", "message": "", "logs": "", "elapsed": 0.0, "timed_out": False, "stuck": False,
                   "deleted": False, "error": ""}  # fmt: skip
    name = ""
    try:
        _ensure_namespace(kube)
        res = kube.resource("v1", "Pod")
        if res is None:
            raise RuntimeError("the API server does not serve v1 Pods")
        created = kube.request("POST", res.path(None, VERIFY_NAMESPACE), body=manifest)
        name = str((created.get("metadata") or {}).get("name") or "")
        record["pod"] = name
        stuck_since: float | None = None
        pod = created
        while True:
            phase, reason, message = pod_state(pod)
            record.update(phase=phase, reason=reason, message=message,
                          node=str((pod.get("spec") or {}).get("nodeName") or ""))  # fmt: skip
            if phase in ("Succeeded", "Failed"):
                break
            if phase == "Running" and while_running is not None and while_running(pod):
                break
            stuck = phase == "Pending" and (reason in STUCK_REASONS or reason == "Unschedulable")
            if stuck or reason in STUCK_REASONS:
                stuck_since = clock() if stuck_since is None else stuck_since
                if clock() - stuck_since >= stuck_grace:
                    record["stuck"] = True
                    break
            else:
                stuck_since = None
            if clock() >= deadline:
                record["timed_out"] = True
                break
            sleep(max(0.0, min(interval, deadline - clock())))
            pod = kube.get("v1", "Pod", name, VERIFY_NAMESPACE) or {}
            if not pod:
                record["error"] = "the pod disappeared while waiting"
                break
        if record["phase"] in ("Succeeded", "Failed", "Running"):
            record["logs"] = _logs(kube, name)
    except Exception as exc:  # any API failure is data for the checks
        record["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if name:
            try:
                kube.delete("v1", "Pod", name, VERIFY_NAMESPACE)
                record["deleted"] = True
            except Exception as exc:
                record["error"] = (record["error"] + "; " if record["error"] else "") + f"delete failed: {exc}"
        record["elapsed"] = round(clock() - start, 2)
    return record


def run_load(ctx: CollectContext, snap: Snapshot, kube: Any, *, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> Obj:  # fmt: skip
    """dcgmproftester on one GPU; max Tensor Core activity before (unallocated GPUs) and during (its GPU)."""
    ep = prometheus_endpoint(ctx, snap)
    out: Obj = {"before": None, "during": None, "error": ""}
    if ep is None:
        out["error"] = "Prometheus unreachable: no kubeconfig and no URL"
        return out
    try:
        out["before"] = scalar_max(ep, f'max({TENSOR}{{exported_pod=""}})') or 0.0
    except HttpError as exc:
        out["error"] = f"Prometheus query failed before the load: {exc}"
        return out
    seen: list[float] = []
    poll = float(ctx.extra.get("load_poll", 5.0))
    last = [0.0]

    def measure(pod: Obj) -> bool:
        if clock() - last[0] < poll:
            return False
        last[0] = clock()
        name = str((pod.get("metadata") or {}).get("name"))
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        exprs = [f'max({TENSOR}{{exported_pod="{name}"}})', f'max({TENSOR}{{pod="{name}"}})']
        if node:  # its GPU not (yet) attributed to it: the node's GPUs no other pod holds, never theirs
            exprs.append(f'max({TENSOR}{{node="{node}",exported_pod=""}})')
        for expr in exprs:
            try:
                value = scalar_max(ep, expr)
            except HttpError:
                continue
            if value is not None:
                seen.append(value)
                break
        return bool(seen) and max(seen) >= 0.5  # clearly loaded: stop early

    deadline = clock() + float(ctx.extra.get("load_deadline", 300.0))
    out["pod"] = run_pod(kube, load_pod(), deadline=deadline, interval=float(ctx.extra.get("poll_interval", 2.0)),
                         stuck_grace=float(ctx.extra.get("stuck_grace", 30.0)), while_running=measure,
                         clock=clock, sleep=sleep)  # fmt: skip
    out["during"] = max(seen) if seen else None
    return out


def _not_for(ctx: CollectContext, snap: Snapshot) -> bool:
    """Test pods run for ``verify`` only, and not with ``--no-workload`` (recorded as ``skipped``)."""
    if ctx.command == "verify" and ctx.workload:
        return False
    snap.workload["skipped"] = "doctor" if ctx.command != "verify" else "--no-workload"
    return True


def _run_test_pod(ctx: CollectContext, kube: Any, manifest: Obj, deadline_knob: str, default: float) -> Obj:
    deadline = time.monotonic() + float(ctx.extra.get(deadline_knob, default))
    return run_pod(kube, manifest, deadline=deadline, interval=float(ctx.extra.get("poll_interval", 2.0)),
                   stuck_grace=float(ctx.extra.get("stuck_grace", 30.0)))  # fmt: skip


def _ready(node: object) -> bool:
    status = node.get("status") if isinstance(node, dict) else None
    conditions = status.get("conditions") if isinstance(status, dict) else None
    return any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
               for c in conditions or [])  # fmt: skip


def allocatable_gpus(nodes: list[Obj], resource: str = "nvidia.com/gpu") -> int:
    """Total ``resource`` allocatable over the nodes (malformed values count as 0)."""
    total = 0
    for node in nodes:
        status = node.get("status") if isinstance(node, dict) else None
        alloc = status.get("allocatable") if isinstance(status, dict) else None
        value = alloc.get(resource) if isinstance(alloc, dict) else None
        try:
            total += int(str(value)) if value is not None else 0
        except ValueError:
            continue
    return total


def cuda_resource(nodes: list[Obj]) -> str | None:
    """What the CUDA test pod requests: ``nvidia.com/gpu`` when a node has one, else the first MIG device type one
    has (every GPU under MIG with the mixed strategy; the operator's own plugin validator chooses the same way:
    gpu-operator cmd/nvidia-validator/main.go getGPUResourceName); None when no node has either."""
    if allocatable_gpus(nodes):
        return "nvidia.com/gpu"
    names = sorted({str(k) for n in nodes if isinstance(n, dict)
                    for k in ((n.get("status") or {}).get("allocatable") or {}) if str(k).startswith("nvidia.com/mig-")})  # fmt: skip
    return next((r for r in names if allocatable_gpus(nodes, r)), None)


def shares_gpus(labels: dict[str, Any]) -> bool:
    """The node's GPUs are shared: MIG asked for, or a device-plugin configuration / GFD sharing strategy set."""
    return (
        sh.mig_on(labels)
        or bool(labels.get(sh.PLUGIN_CONFIG))
        or (str(labels.get(sh.SHARING_STRATEGY) or "none") != "none")
    )


def whole_gpu_node(nodes: list[Obj]) -> str:
    """Where the whole-GPU CUDA pod goes in a cluster that shares some GPUs: the first node that shares nothing,
    advertises ``nvidia.com/gpu`` and :func:`takes_gpu_pods` (the sharing nodes get their own pods: collect_sharing).
    "" (anywhere: the scheduler chooses) when no node shares, or no such node exists."""
    if not any(isinstance(n, dict) and shares_gpus(labels_of(n)) for n in nodes):
        return ""
    plain = [n for n in nodes if isinstance(n, dict) and not shares_gpus(labels_of(n)) and allocatable_gpus([n])
             and takes_gpu_pods(n)]  # fmt: skip
    return name_of(plain[0]) if plain else ""


def all_allocated(snap: Snapshot, resource: str, node: str = "") -> str:
    """Why the CUDA test pod cannot be placed now, when every ``resource`` the nodes it may go to (``node``, else every
    node that :func:`takes_gpu_pods`) advertise is held by running pods; "" when one is free or the pods were not read
    (a busy GPU cluster: issue 32 item 3)."""
    if "Node" not in snap.kube or "Pod" not in snap.kube:
        return ""
    nodes = [n for n in snap.kube["Node"] if isinstance(n, dict) and takes_gpu_pods(n)
             and (not node or name_of(n) == node)]  # fmt: skip
    free, total, holders = pod_queue.free_gpus(nodes, snap.kube["Pod"], resource)
    if free or not total:
        return ""
    return (
        f"every {resource} is allocated ({total} of {total} on {len(nodes)} node(s) the test pod may go to): "
        f"held by {listed(holders)}"
    )


@source("workload", layers=("gpu-operator", "monitoring"), after=("kubernetes",), timeout=SOURCE_TIMEOUT)
def collect_workload(ctx: CollectContext, snap: Snapshot) -> None:
    """``verify``: the CUDA test pod, then (``--load``) the load test. Skipped otherwise."""
    if _not_for(ctx, snap):
        return
    kube = kube_client(ctx)
    if kube is None:
        snap.errors["workload"] = "no kubeconfig: cannot create the CUDA test pod"
        return
    resource = cuda_resource(snap.kube["Node"]) if "Node" in snap.kube else "nvidia.com/gpu"
    if resource is None:
        # a pod requesting a GPU could never schedule: don't wait out the deadline for it
        snap.errors["workload"] = ("no node has allocatable nvidia.com/gpu (or a MIG device): the CUDA test pod "
                                   "cannot be scheduled")  # fmt: skip
        return
    node = whole_gpu_node(snap.kube["Node"]) if resource == "nvidia.com/gpu" and "Node" in snap.kube else ""
    busy = all_allocated(snap, resource, node)
    if busy:  # the pod would wait in the queue until verify's deadline: say so instead (G10 skips)
        snap.workload["cuda_skipped"] = busy
        return
    snap.workload["cuda"] = _run_test_pod(ctx, kube, cuda_pod(resource, node), "workload_deadline", 240.0)
    if ctx.load:
        snap.workload["load"] = run_load(ctx, snap, kube)


@source("pod-network", layers=("kubernetes",), after=("kubernetes",), timeout=NET_SOURCE_TIMEOUT)
def collect_pod_network(ctx: CollectContext, snap: Snapshot) -> None:
    """``verify``: the pod-network probe (CoreDNS answers, the API service is reachable from a pod)."""
    if _not_for(ctx, snap):
        return
    if snap.errors.get("kubernetes"):  # the API server itself is unreadable: K00 says so
        return
    if "Node" in snap.kube and not any(_ready(n) for n in snap.kube["Node"]):
        snap.workload["net_skipped"] = "no Ready node to run it on (see K01)"  # don't wait out the deadline
        return
    kube = kube_client(ctx)
    if kube is None:
        snap.errors["pod-network"] = "no kubeconfig: cannot create the pod-network probe"
        return
    snap.workload["net"] = _run_test_pod(ctx, kube, net_pod(), "net_deadline", 120.0)
