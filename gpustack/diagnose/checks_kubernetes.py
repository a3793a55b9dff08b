"""Kubernetes-layer checks (K00..K09); the object helpers they share are in gpustack/diagnose/objects.py.

Every check is a pure function of the :class:`~gpustack.diagnose.snapshot.Snapshot`. Objects come
from the API server as JSON, but a saved or hand-edited snapshot may hold anything: the helpers
(:func:`as_dict`, :func:`as_list`, :func:`meta` ...) never assume a type, so malformed objects are
skipped instead of raising. When the ``kubernetes`` source could not read the cluster, K00 fails and
every other check returns one ``skip``.
"""

from __future__ import annotations

import re
from typing import Any

from gpustack.checks.model import Finding
from gpustack.diagnose.objects import (
    DEFAULT_POD_CIDR,
    MAX_LISTED,
    as_dict,
    as_int,
    as_list,
    daemonset_counts,
    event_index,
    event_messages,
    finding,
    firewall_fix,
    has_taint,
    items,
    labels_of,
    last_event,
    last_line_matching,
    listed,
    logs,
    name_of,
    node_of,
    node_problems,
    ns_of,
    owner_name,
    pod_problem,
    pod_running_ready,
    ref,
    restarts,
)
from gpustack.diagnose.pod_cidr_room import used_up
from gpustack.diagnose.pod_queue import largest_allocatable, never_fits, queue_state
from gpustack.diagnose.registry import register
from gpustack.diagnose.snapshot import Snapshot
from gpustack.runners.kube_proof import NOT_KUBERNETES

LAYER = "kubernetes"
MAX_POD_FINDINGS = 25  # K07: one finding per failing pod up to this, then one summary finding

CONTROL_PLANE_TAINTS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
CONTROL_PLANE_COMPONENTS = ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler")
API_TIMEOUT = re.compile(r"dial tcp (\d+\.\d+\.\d+\.\d+):443: (?:i/o timeout|connect: no route to host)")
COREDNS_LOOP = re.compile(r"Loop \(.*\) detected")
PORT_IN_USE = re.compile(r"address already in use")
FREE_PORTS = "didn't have free ports"


# --- K00 ------------------------------------------------------------------------------------------


@register("K00-api-unreachable", LAYER, title="Kubernetes API reachable (/version, /api) and every kind readable",
          reads="kubeconfig, API server (GET /version and /api prove it is Kubernetes)",
          commands=("doctor", "verify"))  # fmt: skip
def api_reachable(snap: Snapshot) -> list[Finding]:
    """Fail when the API server could not be read at all, or is not a Kubernetes API server; warn per kind it
    refused (RBAC, 500)."""
    err = snap.errors.get("kubernetes")
    if err and err.startswith(NOT_KUBERNETES):  # it answers, but /version and /api are not Kubernetes'
        return [finding("K00-api-unreachable", "fail", "the kubeconfig's server is not a Kubernetes API server",
                        evidence=err,
                        fix="point the kubeconfig's server at the cluster's API server (https://<control-plane>:6443; "
                            "gpustack's admin.conf has it)\n"
                            "kubectl --kubeconfig <file> get --raw /version   # JSON with a gitVersion")]  # fmt: skip
    if err:
        return [finding("K00-api-unreachable", "fail", "cannot read the Kubernetes API", evidence=err,
                        fix="gpustack up   # creates the cluster and fetches its kubeconfig\n"
                            "kubectl --kubeconfig ~/.local/state/gpustack/clusters/<cluster>/admin.conf get --raw /readyz\n"
                            "ssh <control-plane> sudo systemctl status kubelet containerd; "
                            "sudo crictl ps -a | grep kube-apiserver")]  # fmt: skip
    refused = sorted((k.split(":", 1)[1], v) for k, v in snap.errors.items() if k.startswith("kubernetes:"))
    if refused:
        return [finding("K00-api-unreachable", "warn", f"some objects could not be read: {listed(k for k, _ in refused)}",
                        evidence="\n".join(f"{k}: {v}" for k, v in refused),
                        fix="use the cluster-admin kubeconfig gpustack fetched (kubectl auth can-i list pods -A); "
                            "retry: gpustack doctor")]  # fmt: skip
    return []


# --- K01 ------------------------------------------------------------------------------------------


@register("K01-nodes-ready", LAYER, title="every node Ready, no memory/disk/PID pressure",
          reads="nodes, events", commands=("doctor", "verify"), needs=("Node",))  # fmt: skip
def nodes_ready(snap: Snapshot) -> list[Finding]:
    """Nodes not Ready, or with MemoryPressure/DiskPressure/PIDPressure/NetworkUnavailable."""
    nodes = items(snap, "Node")
    if not nodes:
        return [finding("K01-nodes-ready", "fail", "the cluster has no nodes",
                        fix="gpustack up --only control-plane,workers")]  # fmt: skip
    evidx = event_index(snap)
    out = []
    by_problem: dict[str, list[tuple[str, str]]] = {}
    for n in nodes:
        for p in node_problems(n):
            by_problem.setdefault(p.split(" ", 1)[0], []).append((name_of(n), p))
    fixes = {
        "NotReady": "ssh {node} sudo journalctl -u kubelet -n 50 --no-pager\n"
                    "ssh {node} sudo systemctl restart containerd kubelet\n"
                    "# 'cni plugin not initialized' / 'network plugin not ready': see K04-pod-network",
        "MemoryPressure": "free memory on {node} (ssh {node} free -h; stop host processes) or move pods away: "
                          "kubectl drain {node} --ignore-daemonsets --delete-emptydir-data",
        "DiskPressure": "free disk on {node}: ssh {node} 'df -h /var/lib; sudo crictl rmi --prune; "
                        "sudo journalctl --vacuum-size=500M'",
        "PIDPressure": "ssh {node} 'ps -eLf | wc -l' and stop the process leaking threads; "
                       "raise kernel.pid_max if the node is just busy",
        "NetworkUnavailable": "the node's pod network is not set up: see K04-pod-network "
                              "(kubectl -n kube-flannel get pods -o wide)",
    }  # fmt: skip
    for problem, hits in by_problem.items():
        names = [n for n, _ in hits]
        evidence = "\n".join(
            f"{n}: {p}" + (f"; last event {ev}" if (ev := last_event(evidx, "Node", "", n)) else "")
            for n, p in hits[:MAX_LISTED]
        )
        if len(hits) > MAX_LISTED:
            evidence += f"\n... and {len(hits) - MAX_LISTED} more"
        out.append(finding("K01-nodes-ready", "fail", f"{problem}: {listed(names)}", evidence=evidence,
                           fix=fixes[problem].format(node=names[0]), host=names[0] if len(names) == 1 else None))  # fmt: skip
    return out


# --- K02 ------------------------------------------------------------------------------------------


@register("K02-control-plane-taint", LAYER, title="no control-plane NoSchedule taint on a single-node cluster",
          reads="nodes, events", commands=("doctor",), fixable=True, needs=("Node",))  # fmt: skip
def control_plane_taint(snap: Snapshot) -> list[Finding]:
    """A single-node cluster (or one where every node is a tainted control plane) cannot run pods."""
    nodes = items(snap, "Node")
    tainted = [(name_of(n), key) for n in nodes if (key := has_taint(n, CONTROL_PLANE_TAINTS))]
    if not nodes or len(tainted) < len(nodes):
        return []
    pending = [m for (kind, _, _), m in event_messages(snap) if kind == "Pod" and "untolerated taint" in m]
    evidence = "\n".join(f"node {n}: taint {k}:NoSchedule" for n, k in tainted[:MAX_LISTED])
    if pending:
        evidence += f"\n{len(pending)} scheduling event(s), e.g. {pending[0]}"
    fix = "\n".join(f"kubectl taint nodes {n} {k}:NoSchedule-" for n, k in tainted[:MAX_LISTED])
    return [finding("K02-control-plane-taint", "fail",
                    "pods cannot be scheduled: the only node(s) carry the control-plane NoSchedule taint",
                    evidence=evidence, fix=fix, host=tainted[0][0] if len(tainted) == 1 else None)]  # fmt: skip


# --- K03 ------------------------------------------------------------------------------------------


@register("K03-control-plane", LAYER, title="kube-apiserver, etcd, controller-manager, scheduler Running and Ready",
          reads="pods (kube-system)", commands=("doctor", "verify"), needs=("Pod",))  # fmt: skip
def control_plane(snap: Snapshot) -> list[Finding]:
    """kubeadm's static pods in kube-system: present, Running, Ready, not restarting."""
    system = [p for p in items(snap, "Pod") if ns_of(p) == "kube-system"]
    if not system:
        return [finding("K03-control-plane", "fail", "no pods in kube-system: the control plane is not running",
                        fix="ssh <control-plane> 'ls /etc/kubernetes/manifests; sudo journalctl -u kubelet -n 50'")]  # fmt: skip
    evidx = event_index(snap)
    out = []
    for comp in CONTROL_PLANE_COMPONENTS:
        pods = [p for p in system if labels_of(p).get("component") == comp or name_of(p).startswith(comp + "-")]
        if not pods:
            out.append(finding("K03-control-plane", "fail", f"{comp}: no static pod in kube-system",
                               fix=f"ssh <control-plane> 'sudo ls /etc/kubernetes/manifests/{comp}.yaml; "
                                   f"sudo crictl ps -a --name {comp}; sudo journalctl -u kubelet -n 50 --no-pager'"))  # fmt: skip
            continue
        for p in pods:
            if pod_running_ready(p):
                continue
            n, why = restarts(p), pod_problem(p) or "not Ready"
            node = node_of(p) or "<control-plane>"
            ev = last_event(evidx, "Pod", "kube-system", name_of(p))
            fix = (f"ssh {node} 'sudo crictl ps -a --name {comp}; sudo crictl logs $(sudo crictl ps -a -q --name {comp} | head -1)'\n"
                   f"kubectl -n kube-system logs {name_of(p)} --previous")  # fmt: skip
            if n >= 3:
                fix += ("\n# restarting control-plane pods usually mean a cgroup driver mismatch: containerd must use "
                        "SystemdCgroup = true like the kubelet\ngpustack up --only containerd")  # fmt: skip
            out.append(finding("K03-control-plane", "fail", f"{comp} on {node}: {why} ({n} restarts)",
                               evidence=f"pod kube-system/{name_of(p)}" + (f"; last event {ev}" if ev else ""),
                               fix=fix, host=node_of(p) or None))  # fmt: skip
    return out


# --- K04 ------------------------------------------------------------------------------------------


@register("K04-pod-network", LAYER, title="Flannel DaemonSet ready and every node has a pod CIDR",
          reads="daemonsets, nodes, pods, logs", commands=("doctor",), needs=("DaemonSet", "Node"))  # fmt: skip
def pod_network(snap: Snapshot) -> list[Finding]:
    """Flannel installed and fully ready; ``spec.podCIDR`` set on every node (Flannel needs it)."""
    out = []
    nodes = items(snap, "Node")
    no_cidr = [name_of(n) for n in nodes if not as_dict(n.get("spec")).get("podCIDR")]
    if no_cidr and (full := used_up(snap, len(nodes) - len(no_cidr))):
        out.append(finding("K04-pod-network", "fail", f"no pod CIDR assigned to {listed(no_cidr)}", evidence=full,
                           fix="the cluster CIDR cannot be widened in place: build the cluster with a larger "
                               "cluster.pod_cidr (each node takes a /24: a /14 holds 1,024 nodes), or remove the "
                               "nodes that have none (gpustack node remove NODE)"))  # fmt: skip
    elif no_cidr:
        out.append(finding("K04-pod-network", "fail", f"no pod CIDR assigned to {listed(no_cidr)}",
                           evidence="spec.podCIDR is empty: the controller-manager allocates node CIDRs only with "
                                    "--allocate-node-cidrs=true and a --cluster-cidr (kubeadm: networking.podSubnet)",
                           fix="kubectl -n kube-system get pod -l component=kube-controller-manager -o yaml | "
                               "grep -e cluster-cidr -e allocate-node-cidrs\n"
                               f"# a cluster initialised without a pod subnet: set networking.podSubnet: {DEFAULT_POD_CIDR} "
                               "in /etc/gpustack/kubeadm-config.yaml and re-create it (gpustack down && gpustack up)"))  # fmt: skip
    flannel = [d for d in items(snap, "DaemonSet")
               if labels_of(d).get("app") == "flannel" or name_of(d).startswith("kube-flannel")]  # fmt: skip
    if not flannel:
        if nodes:
            out.append(finding("K04-pod-network", "fail", "Flannel is not installed (no kube-flannel DaemonSet)",
                               fix="gpustack up --only network"))  # fmt: skip
        return out
    for d in flannel:
        desired, ready, available = daemonset_counts(d)
        if desired and desired == ready == available:
            continue
        bad = [p for p in items(snap, "Pod") if ns_of(p) == ns_of(d) and owner_name(p) == name_of(d) and pod_problem(p)]
        lines = [f"DaemonSet {ref(d)}: desired {desired}, ready {ready}, available {available}"]
        for p in bad[:MAX_LISTED]:
            lines.append(f"pod {name_of(p)} on {node_of(p) or '?'}: {pod_problem(p)}")
        for key, text in logs(snap):
            if key.startswith(f"{ns_of(d)}/{name_of(d)}"):
                line = last_line_matching(text, re.compile(r"(?i)error|failed"))
                if line:
                    lines.append(f"{key}: {line}")
        out.append(finding("K04-pod-network", "fail", f"Flannel not ready ({ready}/{desired} pods ready)",
                           evidence="\n".join(lines),
                           fix=f"kubectl -n {ns_of(d)} logs ds/{name_of(d)} --all-containers --tail 50\n"
                               "# 'pod cidr not assigned': see the pod CIDR finding; VXLAN blocked: allow 8472/udp "
                               "between nodes (gpustack up --only firewall)\n"
                               "gpustack up --only network"))  # fmt: skip
    return out


# --- K05 ------------------------------------------------------------------------------------------

COREDNS_LOOP_FIX = (
    "# CoreDNS forwards to itself: the node's /etc/resolv.conf points at a local stub (127.0.0.53)\n"
    "# on every node: set `resolvConf: /run/systemd/resolve/resolv.conf` in /var/lib/kubelet/config.yaml, then\n"
    "sudo systemctl restart kubelet\n"
    "kubectl -n kube-system rollout restart deployment coredns"
)


@register("K05-coredns", LAYER, title="CoreDNS ready and not looping",
          reads="deployments, pods, logs (kube-system)", commands=("doctor", "verify"), fixable=True, needs=("Deployment", "Pod"))  # fmt: skip
def coredns(snap: Snapshot) -> list[Finding]:
    """CoreDNS Deployment fully ready; no "Loop ... detected" in its logs."""
    out = []
    for key, text in logs(snap):
        if key.startswith("kube-system/coredns"):
            line = last_line_matching(text, COREDNS_LOOP)
            if line:
                out.append(finding("K05-coredns", "fail", "CoreDNS detected a forwarding loop and exits",
                                   evidence=f"{key}: {line}", fix=COREDNS_LOOP_FIX))  # fmt: skip
                break
    deps = [d for d in items(snap, "Deployment") if ns_of(d) == "kube-system" and name_of(d) == "coredns"]
    if not deps:
        return [*out, finding("K05-coredns", "fail", "no CoreDNS Deployment in kube-system",
                              fix="kubeadm init phase addon coredns --config /etc/gpustack/kubeadm-config.yaml")]  # fmt: skip
    spec, st = as_dict(deps[0].get("spec")), as_dict(deps[0].get("status"))
    want = as_int(spec.get("replicas")) if "replicas" in spec else 1
    ready = as_int(st.get("readyReplicas"))
    if ready >= want and want > 0:
        return out
    pods = [p for p in items(snap, "Pod") if ns_of(p) == "kube-system" and labels_of(p).get("k8s-app") == "kube-dns"]
    evidx = event_index(snap)
    lines = [f"Deployment kube-system/coredns: {ready}/{want} ready"]
    for p in pods[:MAX_LISTED]:
        ev = last_event(evidx, "Pod", "kube-system", name_of(p))
        lines.append(f"pod {name_of(p)}: {pod_problem(p) or 'ok'}" + (f"; last event {ev}" if ev else ""))
    api_blocked = any(API_TIMEOUT.search(t) for k, t in logs(snap) if k.startswith("kube-system/coredns"))
    fix = (firewall_fix(snap) if api_blocked else
           "kubectl -n kube-system logs -l k8s-app=kube-dns --tail 30\n"
           "kubectl get endpoints kubernetes -n default\n"
           "kubectl -n kube-system rollout restart deployment coredns   # or gpustack doctor --fix")  # fmt: skip
    if api_blocked:
        lines.append("its logs show timeouts to the API service: see K06-pod-to-api")
    if not out:
        out.append(
            finding("K05-coredns", "fail", f"CoreDNS not ready ({ready}/{want})", evidence="\n".join(lines), fix=fix)
        )
    return out


# --- K06 ------------------------------------------------------------------------------------------


@register("K06-pod-to-api", LAYER, title="pods reach the API service (no 10.96.0.1:443 timeouts)",
          reads="pod logs, events, endpoints", commands=("doctor", "verify"), fixable=True, needs=("Endpoints",))  # fmt: skip
def pod_to_api(snap: Snapshot) -> list[Finding]:
    """Pod logs/events timing out on the API service IP: the host firewall drops pod->host traffic."""
    out = []
    hits = [(k, line) for k, t in logs(snap) if (line := last_line_matching(t, API_TIMEOUT))]
    hits += [(f"{kind} {ns}/{name}", m[:300]) for (kind, ns, name), m in event_messages(snap) if API_TIMEOUT.search(m)]
    if hits:
        evidence = "\n".join(f"{k}: {line}" for k, line in hits[:MAX_LISTED])
        if len(hits) > MAX_LISTED:
            evidence += f"\n... and {len(hits) - MAX_LISTED} more"
        out.append(finding("K06-pod-to-api", "fail",
                           f"pods time out reaching the API service ({len(hits)} pod(s)/event(s)): "
                           "the host firewall drops pod -> API traffic", evidence=evidence, fix=firewall_fix(snap)))  # fmt: skip
    eps = [e for e in items(snap, "Endpoints") if ns_of(e) == "default" and name_of(e) == "kubernetes"]
    if items(snap, "Endpoints") and (not eps or not any(as_list(as_dict(s).get("addresses"))
                                                          for s in as_list(eps[0].get("subsets")))):  # fmt: skip
        out.append(finding("K06-pod-to-api", "fail", "the default/kubernetes Service has no endpoints",
                           evidence="kubectl get endpoints kubernetes -n default shows no addresses",
                           fix="ssh <control-plane> sudo crictl ps --name kube-apiserver; "
                               "check --advertise-address in /etc/kubernetes/manifests/kube-apiserver.yaml"))  # fmt: skip
    return out


# --- K07 ------------------------------------------------------------------------------------------


def pod_fix(pod: dict[str, Any], problem: str, last: str) -> str:
    """The next command(s) for one failing pod, by reason."""
    ns, name, node = ns_of(pod), name_of(pod), node_of(pod) or "<node>"
    if problem in ("ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull", "InvalidImageName"):
        images = [str(as_dict(c).get("image")) for c in as_list(as_dict(pod.get("spec")).get("containers"))]
        image = images[0] if images else "<image>"
        return (f"ssh {node} sudo crictl pull {image}   # shows the registry/DNS/proxy error\n"
                f"# check the image name and tag, the registry's reachability from {node} and imagePullSecrets")  # fmt: skip
    if "untolerated taint" in last:
        return (
            "see K02-control-plane-taint: kubectl taint nodes --all node-role.kubernetes.io/control-plane:NoSchedule-"
        )
    if FREE_PORTS in last:
        return "see K08-node-exporter-port (a host process holds the pod's hostPort)"
    if "nvidia.com/gpu" in last:
        return "see G06-gpu-allocatable: no node advertises enough nvidia.com/gpu"
    if problem == "OOMKilled":
        return f"raise the memory limit of {ns}/{name} (kubectl -n {ns} get pod {name} -o yaml | grep -A3 limits)"
    if problem in ("CrashLoopBackOff", "Error", "NotReady", "RunContainerError"):
        return f"kubectl -n {ns} logs {name} --all-containers --previous --tail 50\nkubectl -n {ns} describe pod {name}"
    return f"kubectl -n {ns} describe pod {name}   # read Events at the bottom"


@register("K07-pod-failures", LAYER, title="no pod CrashLoopBackOff, ImagePullBackOff, ErrImagePull, Pending or Failed "
          "(a GPU queue and finished workload pods are no failure)", reads="pods, events, logs, nodes (allocatable)",
          commands=("doctor",), needs=("Pod",))  # fmt: skip
def pod_failures(snap: Snapshot) -> list[Finding]:
    """Every failing pod with its reason, last event and last log line. A busy GPU cluster's queue (workload pods
    waiting for GPUs) and its finished Failed workload pods are not failures (gpustack/diagnose/pod_queue.py)."""
    evidx = event_index(snap)
    log_by_pod: dict[str, str] = {}
    for key, text in logs(snap):
        lines = [line for line in text.splitlines() if line.strip()]
        if lines:
            log_by_pod.setdefault(key.rsplit("/", 1)[0], lines[-1].strip()[:300])
    largest = largest_allocatable(items(snap, "Node"))
    failing: list[tuple[dict[str, Any], str]] = []
    normal: dict[str, list[str]] = {"queued": [], "finished": []}
    for p in items(snap, "Pod"):
        if (prob := pod_problem(p)) is None:
            continue
        state = queue_state(p, prob, last_event=last_event(evidx, "Pod", ns_of(p), name_of(p)), largest=largest)
        if state is None:
            failing.append((p, prob))
        else:
            normal[state].append(ref(p))
    failing.sort(key=lambda x: (ns_of(x[0]), name_of(x[0])))
    if not failing and (normal["queued"] or normal["finished"]):
        return [finding("K07-pod-failures", "pass", f"no failing pod; {len(normal['queued'])} pod(s) queued for GPUs, "
                        f"{len(normal['finished'])} workload pod(s) ended Failed",
                        evidence="\n".join(f"{k}: {listed(sorted(v))}" for k, v in normal.items() if v))]  # fmt: skip
    out = []
    for p, prob in failing[:MAX_POD_FINDINGS]:
        last = last_event(evidx, "Pod", ns_of(p), name_of(p))
        ev = [f"pod {ref(p)} on {node_of(p) or '(unscheduled)'}: {prob}, {restarts(p)} restarts"]
        if last:
            ev.append(f"last event: {last}")
        if ref(p) in log_by_pod:
            ev.append(f"log: {log_by_pod[ref(p)]}")
        too_big = never_fits(p, largest) if not node_of(p) else ""
        fix = (f"{too_big}: no node can ever run it; lower its request or add a node with that many"
               if too_big else pod_fix(p, prob, last))  # fmt: skip
        out.append(finding("K07-pod-failures", "fail", f"{ref(p)}: {prob}", evidence="\n".join(ev), fix=fix,
                           host=node_of(p) or None))  # fmt: skip
    if len(failing) > MAX_POD_FINDINGS:
        rest = failing[MAX_POD_FINDINGS:]
        out.append(finding("K07-pod-failures", "fail", f"{len(rest)} more failing pods",
                           evidence=listed((f"{ref(p)} ({prob})" for p, prob in rest), 20),
                           fix="kubectl get pods -A --field-selector=status.phase!=Running,status.phase!=Succeeded"))  # fmt: skip
    return out


# --- K08 ------------------------------------------------------------------------------------------


@register("K08-node-exporter-port", LAYER, title="node-exporter not blocked by a host process on its port (9100)",
          reads="pods, events, logs (monitoring)", commands=("doctor",), fixable=True, needs=("Pod",))  # fmt: skip
def node_exporter_port(snap: Snapshot) -> list[Finding]:
    """prometheus-node-exporter Pending with "didn't have free ports" or logging "address already in use"."""
    evidx = event_index(snap)
    hits = []
    for p in items(snap, "Pod"):
        lbl = labels_of(p)
        if lbl.get("app.kubernetes.io/name") != "prometheus-node-exporter" and "node-exporter" not in name_of(p):
            continue
        evs = [str(e.get("message") or "") for e in evidx.get(("Pod", ns_of(p), name_of(p)), [])]
        blocked = next((m for m in evs if FREE_PORTS in m), None)
        if blocked is None:
            for key, text in logs(snap):
                if key.startswith(ref(p) + "/") and (line := last_line_matching(text, PORT_IN_USE)):
                    blocked = line
        if blocked:
            hits.append((p, blocked))
    if not hits:
        return []
    nodes = sorted({node_of(p) for p, _ in hits if node_of(p)})
    evidence = "\n".join(f"pod {ref(p)} ({pod_problem(p) or 'running'}): {m[:200]}" for p, m in hits[:MAX_LISTED])
    node = nodes[0] if nodes else "<node>"
    return [finding("K08-node-exporter-port", "fail",
                    "node-exporter cannot bind port 9100: a host node_exporter already listens there",
                    evidence=evidence,
                    fix="gpustack up --only cluster   # preflight sees the host node_exporter and moves the chart's to 9101\n"
                        f"# or stop the host one: ssh {node} sudo systemctl disable --now node_exporter",
                    host=nodes[0] if len(nodes) == 1 else None)]  # fmt: skip


# --- K09 ------------------------------------------------------------------------------------------

NET_ERRORS = (  # agnhost connect's stderr -> (what failed, fix)
    ("DNS:", "CoreDNS does not answer pods",
     "gpustack doctor --check K05,K06,H04   # CoreDNS, pod -> API, the host firewall\n"
     "kubectl -n kube-system get pods -l k8s-app=kube-dns -o wide\n"
     "kubectl -n kube-system logs -l k8s-app=kube-dns --tail 30"),
    ("TIMEOUT", "a pod times out connecting to the API service",
     "gpustack doctor --check H04,K06   # the host firewall drops pod -> API traffic; --fix opens it"),
    ("REFUSED", "the API service refuses connections from pods",
     "kubectl get endpoints kubernetes -n default; kubectl -n kube-system get pods -l k8s-app=kube-proxy -o wide\n"
     "ssh <control-plane> sudo crictl ps --name kube-apiserver"),
)  # fmt: skip


@register("K09-pod-network-probe", LAYER, title="a pod resolves kubernetes.default.svc and connects to it",
          reads="verify's pod-network probe", commands=("verify",))  # fmt: skip
def pod_network_probe(snap: Snapshot) -> list[Finding]:
    """The probe pod (``agnhost connect kubernetes.default.svc:443``): CoreDNS answers a pod and the
    API service accepts its connection, proved rather than inferred from logs."""
    if "pod-network" in snap.errors:
        return [finding("K09-pod-network-probe", "fail", "the pod-network probe could not be run",
                        evidence=snap.errors["pod-network"])]  # fmt: skip
    rec = as_dict(as_dict(snap.workload).get("net"))
    if not rec:
        wl = as_dict(snap.workload)
        why = (
            wl.get("skipped")
            or wl.get("net_skipped")
            or ("API unreadable" if snap.errors.get("kubernetes") else "not run")
        )
        return [finding("K09-pod-network-probe", "skip", f"pod-network probe not run ({why})")]
    node = str(rec.get("node") or "") or None
    logs_text = str(rec.get("logs") or "")
    out = []
    if rec.get("phase") != "Succeeded":
        what, fix = (
            "the pod-network probe did not complete",
            "kubectl -n gpustack-verify get events; gpustack doctor --layer kubernetes",
        )
        for marker, summary, marker_fix in NET_ERRORS:
            if marker in logs_text:
                what, fix = summary, marker_fix
                break
        else:
            if rec.get("stuck") or rec.get("timed_out"):
                how = "stuck" if rec.get("stuck") else "timed out"
                what = f"the pod-network probe was {how} ({rec.get('reason') or rec.get('phase') or 'Pending'})"
                if str(rec.get("reason")) in ("ErrImagePull", "ImagePullBackOff"):
                    fix = (f"ssh {node or '<node>'} sudo crictl pull {rec.get('image')}   # registry, DNS or proxy "
                           "error; with a mirror, set it in gpustack.yaml (sources)")  # fmt: skip
        evidence = "; ".join(x for x in (f"pod {rec.get('pod')} on {node or '?'}: phase {rec.get('phase') or '?'}",
                                         f"{rec.get('reason', '')} {rec.get('message', '')}".strip(),
                                         logs_text.strip()[-300:], str(rec.get("error") or "")) if x)  # fmt: skip
        out.append(finding("K09-pod-network-probe", "fail", what, evidence=evidence, fix=fix, host=node))
    if rec.get("pod") and not rec.get("deleted"):
        out.append(finding("K09-pod-network-probe", "warn", f"the probe pod {rec.get('pod')} was not deleted",
                           evidence=str(rec.get("error") or ""),
                           fix=f"kubectl -n {rec.get('namespace') or 'gpustack-verify'} delete pod {rec.get('pod')}"))  # fmt: skip
    return out
