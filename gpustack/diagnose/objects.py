"""The object helpers every check and collector that reads Kubernetes objects shares.

Objects come from the API server as JSON, but a saved or hand-edited snapshot may hold anything: the
helpers (:func:`as_dict`, :func:`as_list`, :func:`meta` ...) never assume a type, so malformed objects
are skipped instead of raising. Pure functions of objects (or of a
:class:`~gpustack.diagnose.snapshot.Snapshot`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from gpustack.checks.model import Finding, Status
from gpustack.diagnose.snapshot import Snapshot

MAX_LISTED = 10  # objects named in one finding's evidence
PRESSURES = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
WAITING_FAILURES = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "ContainerCannotRun",
    }
)
DEFAULT_POD_CIDR = "10.244.0.0/16"
DEFAULT_API_SERVICE_IP = "10.96.0.1"


# --- tolerant accessors ----------------------------------------------------------------------------


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a dict, else an empty dict."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a list, else an empty list."""
    return value if isinstance(value, list) else []


def as_int(value: Any) -> int:
    """An integer from an int or a numeric string (Kubernetes quantities without suffix); 0 otherwise."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return 0


def meta(obj: Any) -> dict[str, Any]:
    return as_dict(as_dict(obj).get("metadata"))


def name_of(obj: Any) -> str:
    return str(meta(obj).get("name") or "")


def ns_of(obj: Any) -> str:
    return str(meta(obj).get("namespace") or "")


def labels_of(obj: Any) -> dict[str, Any]:
    return as_dict(meta(obj).get("labels"))


def ref(obj: Any) -> str:
    """``namespace/name`` (or ``name`` for cluster-scoped objects)."""
    ns = ns_of(obj)
    return f"{ns}/{name_of(obj)}" if ns else name_of(obj)


def conditions(obj: Any) -> dict[str, dict[str, Any]]:
    """status.conditions by type."""
    out: dict[str, dict[str, Any]] = {}
    for c in as_list(as_dict(as_dict(obj).get("status")).get("conditions")):
        c = as_dict(c)
        if isinstance(c.get("type"), str):
            out[c["type"]] = c
    return out


def listed(names: Iterable[str], limit: int = MAX_LISTED) -> str:
    """``a, b, c and 7 more``."""
    items = list(names)
    head = ", ".join(items[:limit])
    return head + (f" and {len(items) - limit} more" if len(items) > limit else "")


# --- nodes -----------------------------------------------------------------------------------------


def node_problems(node: Any) -> list[str]:
    """Human-readable problems of one node: not Ready, pressure conditions."""
    conds = conditions(node)
    out = []
    ready = conds.get("Ready")
    if ready is None or ready.get("status") != "True":
        why = as_dict(ready).get("message") or as_dict(ready).get("reason") or "no Ready condition reported"
        out.append(f"NotReady ({why})")
    for p in PRESSURES:
        if as_dict(conds.get(p)).get("status") == "True":
            out.append(p)
    return out


def failing_nodes(nodes: Iterable[Any]) -> list[str]:
    return [name_of(n) for n in nodes if node_problems(n)]


def node_ip(node: Any) -> str:
    for a in as_list(as_dict(as_dict(node).get("status")).get("addresses")):
        a = as_dict(a)
        if a.get("type") == "InternalIP" and a.get("address"):
            return str(a["address"])
    return "NODE_IP"


def has_taint(node: Any, keys: Iterable[str], effect: str = "NoSchedule") -> str | None:
    """The key of the first matching taint, or None."""
    wanted = set(keys)
    for t in as_list(as_dict(as_dict(node).get("spec")).get("taints")):
        t = as_dict(t)
        key = t.get("key")
        if isinstance(key, str) and key in wanted and t.get("effect") == effect:
            return key
    return None


# --- pods ------------------------------------------------------------------------------------------


def container_statuses(pod: Any, *, init: bool | None = None) -> list[dict[str, Any]]:
    status = as_dict(as_dict(pod).get("status"))
    keys = {None: ("initContainerStatuses", "containerStatuses"), True: ("initContainerStatuses",),
            False: ("containerStatuses",)}[init]  # fmt: skip
    return [as_dict(c) for k in keys for c in as_list(status.get(k)) if isinstance(c, dict)]


def container_problem(cs: dict[str, Any], *, init: bool = False) -> str | None:
    """Why a container is unhealthy (CrashLoopBackOff, OOMKilled, Error, NotReady ...), or None."""
    state = as_dict(cs.get("state"))
    waiting, terminated = as_dict(state.get("waiting")), as_dict(state.get("terminated"))
    if waiting.get("reason") in WAITING_FAILURES:
        return str(waiting["reason"])
    if terminated and as_int(terminated.get("exitCode")) != 0:
        return str(terminated.get("reason") or "Error")
    if init:
        if terminated:
            return None
        if state.get("running") is not None or waiting:
            return "Init:" + str(waiting.get("reason") or "Running")
        return None
    if cs.get("ready") is not True and as_int(cs.get("restartCount")) > 0:
        last = as_dict(as_dict(cs.get("lastState")).get("terminated"))
        return str(last.get("reason") or "NotReady") if last.get("reason") == "OOMKilled" else "NotReady"
    return None


def pod_problem(pod: Any) -> str | None:
    """Why a pod is failing (a container problem, Pending, Failed, NotReady), or None when it is fine."""
    status = as_dict(as_dict(pod).get("status"))
    phase = status.get("phase")
    if phase == "Succeeded":
        return None
    if phase == "Running" and _all_ready(status):  # the common case, kept cheap for 10,000s of pods
        return None
    for init in (True, False):
        for cs in container_statuses(pod, init=init):
            problem = container_problem(cs, init=init)
            if problem is not None and not (init and problem == "Init:Running" and phase == "Running"):
                return problem
    if phase in ("Pending", "Failed", "Unknown"):
        return str(status.get("reason") or phase)
    if phase is None:
        return None
    if phase == "Running" and as_dict(conditions(pod).get("Ready")).get("status") == "False":
        return "NotReady"
    return None


def _all_ready(status: dict[str, Any]) -> bool:
    """Every container ready and the Ready condition not False (what pod_problem would find fine)."""
    css = status.get("containerStatuses")
    if not isinstance(css, list) or not css:
        return False
    for c in css:
        if not isinstance(c, dict) or c.get("ready") is not True:
            return False
    for c in as_list(status.get("conditions")):
        if isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "False":
            return False
    return True


def pod_ready(pod: Any) -> bool:
    return as_dict(conditions(pod).get("Ready")).get("status") == "True"


def pod_running_ready(pod: Any) -> bool:
    return as_dict(as_dict(pod).get("status")).get("phase") == "Running" and pod_ready(pod)


def restarts(pod: Any) -> int:
    return sum(as_int(c.get("restartCount")) for c in container_statuses(pod))


#: extended resources of GPU pods: whole or shared GPUs (nvidia.com/gpu, nvidia.com/gpu.shared) and MIG devices
#: (nvidia.com/mig-1g.10gb) -- the GPU Operator's own GPU pod filter (cmd/gpu-operator/main.go gpuPodSpecFilter)
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")


def requests_gpus(pod: Any) -> bool:
    """A pod with a container (or init container) that requests or is limited to a GPU resource."""
    spec = as_dict(as_dict(pod).get("spec"))
    for c in [*as_list(spec.get("containers")), *as_list(spec.get("initContainers"))]:
        res = as_dict(as_dict(c).get("resources"))
        for section in ("requests", "limits"):
            if any(str(k).startswith(GPU_RESOURCE_PREFIXES) for k in as_dict(res.get(section))):
                return True
    return False


def node_of(pod: Any) -> str:
    return str(as_dict(as_dict(pod).get("spec")).get("nodeName") or "")


def owner_name(obj: Any) -> str:
    for o in as_list(meta(obj).get("ownerReferences")):
        o = as_dict(o)
        if o.get("name"):
            return str(o["name"])
    return ""


def daemonset_counts(ds: Any) -> tuple[int, int, int]:
    """(desired, ready, available) of a DaemonSet."""
    st = as_dict(as_dict(ds).get("status"))
    return as_int(st.get("desiredNumberScheduled")), as_int(st.get("numberReady")), as_int(st.get("numberAvailable"))


# --- events and logs -------------------------------------------------------------------------------


def involved_key(event: Any) -> tuple[str, str, str]:
    """(kind, namespace, name) an event is about (nodes: namespace '')."""
    inv = as_dict(as_dict(event).get("involvedObject"))
    kind = str(inv.get("kind") or "")
    ns = "" if kind == "Node" else str(inv.get("namespace") or "")
    return kind, ns, str(inv.get("name") or "")


def _event_time(event: dict[str, Any]) -> str:
    for k in ("lastTimestamp", "eventTime", "firstTimestamp"):
        if isinstance(event.get(k), str):
            return str(event[k])
    return str(as_dict(event.get("metadata")).get("creationTimestamp") or "")


def event_index(snap: Snapshot) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Events by involved object, oldest first."""
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for e in as_list(snap.events):
        if isinstance(e, dict):
            out.setdefault(involved_key(e), []).append(e)
    for evs in out.values():
        evs.sort(key=_event_time)
    return out


def last_event(index: dict[tuple[str, str, str], list[dict[str, Any]]], kind: str, ns: str, name: str) -> str:
    evs = index.get((kind, "" if kind == "Node" else ns, name))
    if not evs:
        return ""
    e = evs[-1]
    return f"{e.get('reason') or 'Event'}: {e.get('message') or ''}".strip()


def event_messages(snap: Snapshot) -> list[tuple[tuple[str, str, str], str]]:
    return [(involved_key(e), str(e.get("message") or "")) for e in as_list(snap.events) if isinstance(e, dict)]


def logs(snap: Snapshot) -> list[tuple[str, str]]:
    """(``ns/pod/container``, text) of the collected log tails."""
    return [(str(k), v) for k, v in as_dict(snap.pod_logs).items() if isinstance(v, str)]


def last_line_matching(text: str, pattern: re.Pattern[str]) -> str | None:
    for line in reversed(text.splitlines()):
        if pattern.search(line):
            return line.strip()[:300]
    return None


# --- findings --------------------------------------------------------------------------------------


def finding(
    id: str, status: Status, summary: str, *, evidence: str = "", fix: str = "", host: str | None = None,
    layer: str = "kubernetes",
) -> Finding:  # fmt: skip
    return Finding(id, layer, status, summary, host=host, evidence=evidence, fix=fix)


def items(snap: Snapshot, kind: str) -> list[dict[str, Any]]:
    """The dict items of a kind (anything else in the list is ignored)."""
    return [o for o in as_list(snap.kube.get(kind)) if isinstance(o, dict)]


def pod_cidr(snap: Snapshot) -> str:
    """The cluster's pod CIDR guessed from the nodes' podCIDR (a /16 around the first), or Flannel's default."""
    for n in items(snap, "Node"):
        cidr = as_dict(n.get("spec")).get("podCIDR")
        if isinstance(cidr, str) and re.fullmatch(r"\d+\.\d+\.\d+\.\d+/\d+", cidr):
            a, b = cidr.split(".")[:2]
            return f"{a}.{b}.0.0/16"
    return DEFAULT_POD_CIDR


def api_service_ip(snap: Snapshot) -> str:
    for s in items(snap, "Service"):
        if ns_of(s) == "default" and name_of(s) == "kubernetes":
            ip = as_dict(s.get("spec")).get("clusterIP")
            if isinstance(ip, str) and ip:
                return ip
    return DEFAULT_API_SERVICE_IP


def firewall_fix(snap: Snapshot) -> str:
    """Seed 002's rules with this cluster's pod CIDR, node IP and API service IP."""
    nodes = items(snap, "Node")
    ip = node_ip(nodes[0]) if nodes else "NODE_IP"
    cidr, svc = pod_cidr(snap), api_service_ip(snap)
    return (
        "gpustack up --only firewall   # or gpustack doctor --fix\n"
        "# by hand, on every node:\n"
        "sudo iptables -I INPUT 1 -m state --state ESTABLISHED,RELATED -j ACCEPT\n"
        f"sudo iptables -I INPUT 1 -s {cidr} -d {ip} -p tcp --dport 6443 -j ACCEPT\n"
        f"sudo iptables -I INPUT 1 -s {cidr} -d {svc} -p tcp --dport 443 -j ACCEPT\n"
        "kubectl -n kube-system delete pods -l k8s-app=kube-dns"
    )
