"""TEST DOUBLE DATA: healthy gpustack clusters as Kubernetes objects, and one mutation per failure.

``healthy(nodes=1|3|N)`` returns a :class:`Scenario`: Node/Pod/DaemonSet/Deployment/Service/Endpoints/
ServiceMonitor/PrometheusRule/Prometheus/ClusterPolicy objects as ``gpustack up`` leaves them (the
ServiceMonitor and PrometheusRule come from :mod:`gpustack.render.manifests`, so names match), every
node a GPU node with 8 GPUs, ~10 pods per node. ``FAILURES[name]`` mutates a scenario into one failure
and names the check id that must fail. ``scenario.load(api)`` seeds a :class:`FakeKubeAPI`.
"""

from __future__ import annotations

import base64
import copy
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.constants import GPU_NAMESPACE, GRAFANA_ADMIN_SECRET, GRAFANA_SERVICE, MONITORING_NAMESPACE
from gpustack.monitoring.rules import prometheus_rule
from gpustack.render.manifests import EXPORTER_TARGETS, service_monitor
from tests.fakes.kube_api import FakeKubeAPI
from tests.fakes.pod_cidrs import pod_cidr_spec
from tests.fakes.sharing_scenarios import SHARING_FAILURES

Obj = dict[str, Any]
GPUS = 8
STAMP = "2026-11-20T10:00:00Z"
CP_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
#: Operand DaemonSets of the GPU Operator (app label = name) as in v26.7.0 (exporter added when it is the operator's).
OPERANDS = (
    "nvidia-driver-daemonset",
    "nvidia-container-toolkit-daemonset",
    "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery",
    "nvidia-operator-validator",
    "gpu-operator-node-feature-discovery-worker",
)
VALIDATION_STAGES = ("driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation")


@dataclass
class Scenario:
    objects: list[Obj]
    logs: dict[tuple[str, str, str], str] = field(default_factory=dict)
    hosts: dict[str, Obj] = field(default_factory=dict)  # snap.hosts (host source output)
    exporter: str = "standalone"

    def load(self, api: FakeKubeAPI) -> None:
        api.seed(self.objects)
        for (ns, pod, c), text in self.logs.items():
            api.set_log(ns, pod, c, text)

    # -- finders for mutations --------------------------------------------------------------------

    def find(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        for o in self.objects:
            md = o["metadata"]
            if o["kind"] == kind and md["name"] == name and (namespace is None or md.get("namespace") == namespace):
                return o
        raise KeyError(f"{kind} {namespace}/{name}")

    def pods(self, prefix: str, namespace: str | None = None) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == "Pod" and o["metadata"]["name"].startswith(prefix)
                and (namespace is None or o["metadata"]["namespace"] == namespace)]  # fmt: skip

    def nodes(self) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == "Node"]


# --- builders --------------------------------------------------------------------------------------


def node_name(i: int, total: int) -> str:
    return "gpu-node-1" if total == 1 else ("cp-1" if i == 0 else f"gpu-node-{i}")


def node_ip(i: int) -> str:
    return f"10.0.{i // 200}.{i % 200 + 10}"


def _driver_labels(version: str) -> dict[str, str]:
    major, minor, rev = version.split(".")
    return {"nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": minor,
            "nvidia.com/cuda.driver.rev": rev, "nvidia.com/cuda.driver-version.major": major,
            "nvidia.com/cuda.driver-version.minor": minor, "nvidia.com/cuda.driver-version.revision": rev,
            "nvidia.com/cuda.driver-version.full": version}  # fmt: skip


def _node(i: int, total: int) -> Obj:
    name = node_name(i, total)
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": str(GPUS),
        # GPU feature discovery's driver labels (NVIDIA/k8s-device-plugin internal/lm/nvml.go): the operator's driver
        **_driver_labels(pins.GPU_OPERATOR_DRIVER[pins.CHARTS["gpu-operator"].version]),
    }
    if i == 0:
        labels["node-role.kubernetes.io/control-plane"] = ""
    res = {"cpu": "64", "memory": "528287672Ki", "pods": "110", "nvidia.com/gpu": str(GPUS)}
    cond = [
        {"type": t, "status": "False", "reason": f"KubeletHas{'No' if t != 'PIDPressure' else 'Sufficient'}{t}"}
        for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
    ]
    cond += [
        {"type": "NetworkUnavailable", "status": "False", "reason": "FlannelIsUp"},
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            **pod_cidr_spec(i),
            **({"taints": [dict(CP_TAINT)]} if i == 0 and total > 1 else {}),
        },
        "status": {
            "capacity": dict(res),
            "allocatable": dict(res),
            "conditions": cond,
            "addresses": [{"type": "InternalIP", "address": node_ip(i)}, {"type": "Hostname", "address": name}],
            "nodeInfo": {  # every field the kubelet reports (all required in v1 NodeSystemInfo)
                "machineID": f"{i:032x}",
                "systemUUID": f"4c4c4544-0000-1000-8000-{i:012x}",
                "bootID": f"b007-{i}",
                "kernelVersion": "6.8.0-48-generic",
                "osImage": "Ubuntu 24.04.1 LTS",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": f"containerd://{pins.CONTAINERD_VERSION}",
                "kubeletVersion": f"v{pins.KUBERNETES[pins.KUBERNETES_DEFAULT]}",
                "kubeProxyVersion": f"v{pins.KUBERNETES[pins.KUBERNETES_DEFAULT]}",
            },
        },
    }


def _image_id(image: str) -> str:
    """What the kubelet reports as a container's imageID: the repository @ the digest it pulled (derived here)."""
    return image.rsplit(":", 1)[0] + "@sha256:" + hashlib.sha256(image.encode()).hexdigest()


def _running(name: str, image: str, *, init: bool = False) -> Obj:
    if init:
        state = {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": STAMP}}
        return {"name": name, "image": image, "imageID": _image_id(image), "ready": True, "restartCount": 0,
                "state": state}  # fmt: skip
    return {"name": name, "image": image, "imageID": _image_id(image), "ready": True, "started": True,
            "restartCount": 0, "state": {"running": {"startedAt": STAMP}}}  # fmt: skip


def pod(
    name: str, ns: str, node: str, *, labels: Obj, owner: tuple[str, str] | None = None,
    containers: tuple[str, ...] = ("main",), init: tuple[str, ...] = (), image: str = "registry.k8s.io/pause:3.10",
) -> Obj:  # fmt: skip
    """A Running, Ready pod as the kubelet reports it."""
    md: Obj = {"name": name, "namespace": ns, "labels": dict(labels)}
    if owner:
        md["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "controller": True,
                                  "uid": f"uid-{owner[0].lower()}-{owner[1]}"}]  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": md,
        "spec": {
            "nodeName": node,
            "containers": [{"name": c, "image": image} for c in containers],
            **({"initContainers": [{"name": c, "image": image} for c in init]} if init else {}),
        },
        "status": {
            "phase": "Running",
            "podIP": "10.244.0.10",
            "conditions": [
                {"type": t, "status": "True"} for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [_running(c, image) for c in containers],
            **({"initContainerStatuses": [_running(c, image, init=True) for c in init]} if init else {}),
        },
    }


def daemonset(name: str, ns: str, n: int, labels: Obj) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
        "spec": {"selector": {"matchLabels": dict(labels)}, "template": {"metadata": {"labels": dict(labels)}}},
        "status": {"desiredNumberScheduled": n, "currentNumberScheduled": n, "numberReady": n,
                   "numberAvailable": n, "updatedNumberScheduled": n, "numberMisscheduled": 0},
    }  # fmt: skip


def deployment(name: str, ns: str, replicas: int, labels: Obj) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
        "spec": {"replicas": replicas, "selector": {"matchLabels": dict(labels)},
                 "template": {"metadata": {"labels": dict(labels)}, "spec": {"containers": [{"name": name}]}}},
        "status": {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
                   "updatedReplicas": replicas, "conditions": [{"type": "Available", "status": "True"}]},
    }  # fmt: skip


def service(name: str, ns: str, labels: Obj, ports: list[tuple[str, int]], ip: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
        "spec": {"clusterIP": ip, "selector": dict(labels), "ports": [{"name": n, "port": p, "targetPort": p} for n, p in ports]},
    }  # fmt: skip


def endpoints(name: str, ns: str, labels: Obj, addresses: list[tuple[str, str]], ports: list[tuple[str, int]]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
        "subsets": [{"addresses": [{"ip": ip, "nodeName": n} for ip, n in addresses],
                     "ports": [{"name": pn, "port": p} for pn, p in ports]}] if addresses else [],
    }  # fmt: skip


#: the Grafana admin password of the scenario clusters: only in the cluster (the Secret below), never in a state file
GRAFANA_PASSWORD = "scenario-grafana-pw"


def grafana_admin(objs: list[Obj]) -> list[Obj]:
    """Grafana's admin credentials as kube-prometheus-stack renders them with gpustack's values
    (``grafana.admin.existingSecret``): the grafana container's env from the Secret; returns the Secret."""
    dep = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == GRAFANA_SERVICE)
    ref = {"name": GRAFANA_ADMIN_SECRET}
    dep["spec"]["template"] = {
        "metadata": {"labels": dict(dep["spec"]["selector"]["matchLabels"])},
        "spec": {"containers": [
            {"name": "grafana-sc-dashboard", "image": "quay.io/kiwigrid/k8s-sidecar:1.30.0",
             "env": [{"name": "REQ_PASSWORD", "valueFrom": {"secretKeyRef": {**ref, "key": "admin-password"}}}]},
            {"name": "grafana", "image": "docker.io/grafana/grafana:13.2.0", "env": [
                {"name": "GF_SECURITY_ADMIN_USER", "valueFrom": {"secretKeyRef": {**ref, "key": "admin-user"}}},
                {"name": "GF_SECURITY_ADMIN_PASSWORD", "valueFrom": {"secretKeyRef": {**ref, "key": "admin-password"}}},
                {"name": "GF_PATHS_DATA", "value": "/var/lib/grafana/"}]},
        ]},
    }  # fmt: skip
    return [{
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": GRAFANA_ADMIN_SECRET, "namespace": MONITORING_NAMESPACE},
        "data": {"admin-user": base64.b64encode(b"admin").decode(),
                 "admin-password": base64.b64encode(GRAFANA_PASSWORD.encode()).decode()},
    }]  # fmt: skip


def healthy(nodes: int = 1, *, exporter: str = "standalone") -> Scenario:
    """A healthy gpustack cluster: ``nodes`` GPU nodes (node 0 is the control plane), 8 GPUs each."""
    objs: list[Obj] = []
    names = [node_name(i, nodes) for i in range(nodes)]
    cp = names[0]
    objs += [_node(i, nodes) for i in range(nodes)]
    # control plane (static pods) and kube-system
    for comp in ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler"):
        objs.append(pod(f"{comp}-{cp}", "kube-system", cp, labels={"component": comp, "tier": "control-plane"},
                        containers=(comp,)))  # fmt: skip
    dns = {"k8s-app": "kube-dns"}
    objs.append(deployment("coredns", "kube-system", 2, dns))
    for suffix in ("7db6d8ff4d-4xk2p", "7db6d8ff4d-9mzqv"):
        objs.append(pod(f"coredns-{suffix}", "kube-system", cp, labels=dns, owner=("ReplicaSet", "coredns-7db6d8ff4d"),
                        containers=("coredns",)))  # fmt: skip
    # per-node DaemonSets: (namespace, name, labels, containers, init containers)
    exporter_ds: list[tuple[str, str, Obj, tuple[str, ...], tuple[str, ...]]] = []
    if exporter == "standalone":
        exporter_ds.append(
            (GPU_NAMESPACE, "dcgm-exporter", dict(EXPORTER_TARGETS["standalone"].labels), ("exporter",), ())
        )
    else:
        exporter_ds.append((GPU_NAMESPACE, "nvidia-dcgm-exporter", {"app": "nvidia-dcgm-exporter"}, ("nvidia-dcgm-exporter",),
                            ("toolkit-validation",)))  # fmt: skip
    per_node = [
        ("kube-system", "kube-proxy", {"k8s-app": "kube-proxy"}, ("kube-proxy",), ()),
        ("kube-flannel", "kube-flannel-ds", {"app": "flannel", "k8s-app": "flannel"}, ("kube-flannel",),
         ("install-cni-plugin", "install-cni")),
        (MONITORING_NAMESPACE, "kube-prometheus-stack-prometheus-node-exporter",
         {"app.kubernetes.io/name": "prometheus-node-exporter", "release": "kube-prometheus-stack"}, ("node-exporter",), ()),
        *[(GPU_NAMESPACE, o, {"app": o}, (o.replace("-daemonset", "") + "-ctr",),
           VALIDATION_STAGES if o == "nvidia-operator-validator" else ()) for o in OPERANDS],
        *exporter_ds,
    ]  # fmt: skip
    for ns, ds, labels, containers, init in per_node:
        objs.append(daemonset(ds, ns, nodes, labels))
        for i, n in enumerate(names):
            objs.append(pod(f"{ds}-{i:05x}", ns, n, labels=labels, owner=("DaemonSet", ds), containers=containers,
                            init=init))  # fmt: skip
    # cluster-wide Deployments / StatefulSet pods
    singles = [
        (GPU_NAMESPACE, "gpu-operator", {"app": "gpu-operator", "app.kubernetes.io/component": "gpu-operator"}),
        (
            GPU_NAMESPACE,
            "gpu-operator-node-feature-discovery-master",
            {"app.kubernetes.io/name": "node-feature-discovery"},
        ),
        (MONITORING_NAMESPACE, "kube-prometheus-stack-operator", {"app": "kube-prometheus-stack-operator"}),
        (MONITORING_NAMESPACE, "kube-prometheus-stack-grafana", {"app.kubernetes.io/name": "grafana"}),
        (
            MONITORING_NAMESPACE,
            "kube-prometheus-stack-kube-state-metrics",
            {"app.kubernetes.io/name": "kube-state-metrics"},
        ),
    ]
    for ns, name, labels in singles:
        objs.append(deployment(name, ns, 1, labels))
        objs.append(pod(f"{name}-6c9f7b8d5-x2x7q", ns, cp, labels=labels, owner=("ReplicaSet", f"{name}-6c9f7b8d5")))
        if name == "gpu-operator":  # the chart's gpu-operator.labels (deployments/gpu-operator/templates/_helpers.tpl)
            objs[-2]["metadata"]["labels"]["helm.sh/chart"] = f"gpu-operator-{pins.CHARTS['gpu-operator'].version}"
        if name == "kube-prometheus-stack-operator":  # kube-prometheus-stack.labels (templates/_helpers.tpl): chart
            objs[-2]["metadata"]["labels"]["chart"] = (
                f"kube-prometheus-stack-{pins.CHARTS['kube-prometheus-stack'].version}"
            )
    objs += grafana_admin(objs)
    prom_labels = {"app.kubernetes.io/name": "prometheus", "prometheus": "kube-prometheus-stack-prometheus"}
    objs.append(pod("prometheus-kube-prometheus-stack-prometheus-0", MONITORING_NAMESPACE, cp, labels=prom_labels,
                    owner=("StatefulSet", "prometheus-kube-prometheus-stack-prometheus"),
                    containers=("prometheus", "config-reloader")))  # fmt: skip
    # Services and Endpoints
    target = EXPORTER_TARGETS[exporter]
    exporter_pods = [(node_ip(i), n) for i, n in enumerate(names)]
    svcs = [
        ("default", "kubernetes", {"component": "apiserver"}, [("https", 443)], "10.96.0.1", [(node_ip(0), cp)], [("https", 6443)]),
        ("kube-system", "kube-dns", dns, [("dns", 53)], "10.96.0.10", [("10.244.0.2", cp), ("10.244.0.3", cp)], [("dns", 53)]),
        (target.namespace, target.service, dict(target.labels), [(target.port, 9400)], "10.96.10.40", exporter_pods,
         [(target.port, 9400)]),
        (MONITORING_NAMESPACE, "kube-prometheus-stack-prometheus", {"app": "kube-prometheus-stack-prometheus",
         "release": "kube-prometheus-stack"}, [("http-web", 9090)], "10.96.20.90", [("10.244.0.20", cp)], [("http-web", 9090)]),
        (MONITORING_NAMESPACE, "kube-prometheus-stack-grafana", {"app.kubernetes.io/name": "grafana"}, [("http-web", 80)],
         "10.96.20.30", [("10.244.0.21", cp)], [("http-web", 3000)]),
    ]  # fmt: skip
    for ns, name, labels, ports, ip, addrs, eports in svcs:
        objs.append(service(name, ns, labels, ports, ip))
        objs.append(endpoints(name, ns, labels, addrs, eports))
    # monitoring CRs (names as gpustack renders them)
    cfg = Config.model_validate({"gpu": {"exporter": exporter}})
    objs.append(service_monitor(cfg))
    objs.append(prometheus_rule(namespace=MONITORING_NAMESPACE, labels={"release": "kube-prometheus-stack"}))
    objs.append({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": "kube-prometheus-stack-prometheus", "namespace": MONITORING_NAMESPACE,
                     "labels": {"release": "kube-prometheus-stack"}},
        "spec": {"serviceMonitorSelector": {"matchLabels": {"release": "kube-prometheus-stack"}},
                 "serviceMonitorNamespaceSelector": {}, "ruleSelector": {"matchLabels": {"release": "kube-prometheus-stack"}},
                 "ruleNamespaceSelector": {}, "replicas": 1},
        "status": {"availableReplicas": 1, "replicas": 1,  # the real CRD requires each lastTransitionTime
                   "conditions": [{"type": t, "status": "True", "lastTransitionTime": STAMP} for t in ("Available", "Reconciled")]},
    })  # fmt: skip
    objs.append({
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"driver": {"enabled": True}, "toolkit": {"enabled": True}, "devicePlugin": {"enabled": True},
                 "dcgmExporter": {"enabled": exporter == "operator"}, "operator": {"runtimeClass": "nvidia"},
                 "cdi": {"enabled": True}},
        "status": {"state": "ready", "namespace": GPU_NAMESPACE,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled"},
                                  {"type": "Error", "status": "False"}]},
    })  # fmt: skip
    return Scenario(objs, exporter=exporter)


#: the GPU workloads of a cluster in use (the "busy" golden path): on every node pods may run on (the control
#: plane's taint keeps them off it when there are others), ``(namespace, name prefix, container, GPUs)``
GPU_WORKLOADS = (("ml-team", "train", "trainer", 4), ("inference", "vllm", "vllm", 1))


def gpu_workload_pods(nodes: int) -> list[tuple[str, str, str, str, int]]:
    """``(namespace, pod, container, node, GPUs)`` of the GPU workload pods of ``healthy(nodes)`` in use."""
    names = [node_name(i, nodes) for i in range(nodes)]
    workers = names[1:] if nodes > 1 else names
    return [(ns, f"{prefix}-{i}", container, node, gpus)
            for i, node in enumerate(workers) for ns, prefix, container, gpus in GPU_WORKLOADS]  # fmt: skip


def gpu_workloads(nodes: int) -> list[Obj]:
    """The GPU workload pods of :func:`gpu_workload_pods` as the kubelet reports them: Running, each container
    with an ``nvidia.com/gpu`` limit (what the device plugin allocates; requests default to limits for an
    extended resource), scheduled with the NVIDIA runtime class as the GPU Operator sets it up."""
    out = []
    for ns, name, container, node, gpus in gpu_workload_pods(nodes):
        owner = ("StatefulSet", name.rsplit("-", 1)[0])
        p = pod(name, ns, node, labels={"app": owner[1]}, owner=owner, containers=(container,),
                image="nvcr.io/nvidia/pytorch:25.10-py3")  # fmt: skip
        p["spec"]["runtimeClassName"] = "nvidia"
        p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)},
                                                   "requests": {"nvidia.com/gpu": str(gpus)}}  # fmt: skip
        out.append(p)
    return out


# --- mutations: one per failure (each returns the check id that must fail) -------------------------


def _event(obj: Obj, reason: str, message: str, type_: str = "Warning") -> Obj:
    md = obj["metadata"]
    ns = md.get("namespace") or "default"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{md['name']}.{abs(hash((reason, message))) % 10**8:x}", "namespace": ns},
        "involvedObject": {
            "kind": obj["kind"],
            "name": md["name"],
            **({"namespace": ns} if md.get("namespace") else {}),
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "lastTimestamp": STAMP,
        "count": 5,
    }


def _crashloop(p: Obj, container: str | None = None, *, reason: str = "CrashLoopBackOff", last: str = "Error") -> None:
    st = p["status"]
    st["conditions"] = [{"type": "Ready", "status": "False"}]
    for cs in st["containerStatuses"]:
        if container is None or cs["name"] == container:
            cs.update(ready=False, restartCount=12, state={"waiting": {"reason": reason, "message": "back-off 5m0s"}},
                      lastState={"terminated": {"exitCode": 1 if last != "OOMKilled" else 137, "reason": last}})  # fmt: skip


def _not_ready(p: Obj) -> None:
    p["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    for cs in p["status"]["containerStatuses"]:
        cs["ready"] = False


def _waiting(p: Obj, reason: str) -> None:
    p["status"].update(phase="Pending", conditions=[{"type": "Ready", "status": "False"}])
    for cs in p["status"]["containerStatuses"]:
        cs.update(ready=False, started=False, state={"waiting": {"reason": reason}})


def _ds_degraded(s: Scenario, name: str, ready_less: int = 1) -> None:
    st = s.find("DaemonSet", name)["status"]
    st["numberReady"] = max(0, st["numberReady"] - ready_less)
    st["numberAvailable"] = st["numberReady"]
    st["numberUnavailable"] = ready_less


def m_node_not_ready(s: Scenario) -> str:
    n = s.nodes()[-1]
    ready = next(c for c in n["status"]["conditions"] if c["type"] == "Ready")
    ready.update(status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status.")
    s.objects.append(_event(n, "NodeNotReady", f"Node {n['metadata']['name']} status is now: NodeNotReady"))
    return "K01-nodes-ready"


def m_node_disk_pressure(s: Scenario) -> str:
    n = s.nodes()[0]
    next(c for c in n["status"]["conditions"] if c["type"] == "DiskPressure").update(
        status="True", reason="KubeletHasDiskPressure"
    )
    return "K01-nodes-ready"


def m_control_plane_taint(s: Scenario) -> str:
    assert len(s.nodes()) == 1, "the taint failure is a single-node one"
    s.nodes()[0]["spec"]["taints"] = [dict(CP_TAINT)]
    p = s.pods("gpu-operator-6c9f7b8d5")[0]
    p["spec"].pop("nodeName")
    p["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    s.objects.append(_event(p, "FailedScheduling", "0/1 nodes are available: 1 node(s) had untolerated taint "
                            "{node-role.kubernetes.io/control-plane: }. preemption: 0/1 nodes are available"))  # fmt: skip
    return "K02-control-plane-taint"


def m_scheduler_crashloop(s: Scenario) -> str:
    p = s.pods("kube-scheduler-", "kube-system")[0]
    _crashloop(p)
    s.logs[("kube-system", p["metadata"]["name"], "kube-scheduler")] = "E1120 failed to get cgroup stats\n"
    return "K03-control-plane"


def m_flannel_not_ready(s: Scenario) -> str:
    _ds_degraded(s, "kube-flannel-ds")
    p = s.pods("kube-flannel-ds-", "kube-flannel")[0]
    _crashloop(p)
    s.logs[("kube-flannel", p["metadata"]["name"], "kube-flannel")] = (
        "I1120 10:00:00 main.go:211] CLI flags config\n"
        'E1120 10:00:01 main.go:359] Error registering network: failed to acquire lease: node "x" pod cidr not assigned\n'
    )
    return "K04-pod-network"


def m_pod_cidr_missing(s: Scenario) -> str:
    spec = s.nodes()[-1]["spec"]
    spec.pop("podCIDR")
    spec.pop("podCIDRs")
    return "K04-pod-network"


def m_coredns_not_ready(s: Scenario) -> str:
    s.find("Deployment", "coredns", "kube-system")["status"].update(readyReplicas=0, availableReplicas=0)
    for p in s.pods("coredns-", "kube-system"):
        _not_ready(p)
        s.logs[("kube-system", p["metadata"]["name"], "coredns")] = (
            '[INFO] plugin/ready: Still waiting on: "kubernetes"\n'
        )
    return "K05-coredns"


def m_coredns_loop(s: Scenario) -> str:
    s.find("Deployment", "coredns", "kube-system")["status"].update(readyReplicas=0, availableReplicas=0)
    for p in s.pods("coredns-", "kube-system"):
        _crashloop(p)
        s.logs[("kube-system", p["metadata"]["name"], "coredns")] = (
            '.:53\nCoreDNS-1.12.1\n[FATAL] plugin/loop: Loop (127.0.0.1:44444 -> :53) detected for zone ".", '
            'see https://coredns.io/plugins/loop#troubleshooting. Query: "HINFO 4547991504243258144.3688648895315093531."\n'
        )
    return "K05-coredns"


def m_pod_to_api_timeout(s: Scenario) -> str:
    s.find("Deployment", "coredns", "kube-system")["status"].update(readyReplicas=0, availableReplicas=0)
    for p in s.pods("coredns-", "kube-system"):
        _not_ready(p)
        s.logs[("kube-system", p["metadata"]["name"], "coredns")] = (
            '[INFO] plugin/ready: Still waiting on: "kubernetes"\n'
            "[ERROR] plugin/kubernetes: pkg/mod/k8s.io/client-go/tools/cache/reflector.go:229: Failed to watch "
            '*v1.Namespace: failed to list *v1.Namespace: Get "https://10.96.0.1:443/api/v1/namespaces?limit=500": '
            "dial tcp 10.96.0.1:443: i/o timeout\n"
        )
    return "K06-pod-to-api"


def m_crashloop(s: Scenario) -> str:
    p = s.pods("gpu-operator-6c9f7b8d5", GPU_NAMESPACE)[0]
    _crashloop(p)
    s.logs[(GPU_NAMESPACE, p["metadata"]["name"], "main")] = "panic: runtime error: invalid memory address\n"
    s.objects.append(_event(p, "BackOff", "Back-off restarting failed container main in pod"))
    return "K07-pod-failures"


def m_image_pull_backoff(s: Scenario) -> str:
    p = s.pods("kube-prometheus-stack-grafana-", MONITORING_NAMESPACE)[0]
    _waiting(p, "ImagePullBackOff")
    s.objects.append(_event(p, "Failed", 'Back-off pulling image "docker.io/grafana/grafana:13.2.0"'))
    return "K07-pod-failures"


def m_err_image_pull(s: Scenario) -> str:
    p = s.pods("kube-prometheus-stack-kube-state-metrics-", MONITORING_NAMESPACE)[0]
    _waiting(p, "ErrImagePull")
    s.objects.append(_event(p, "Failed", "Failed to pull image: dial tcp: lookup registry.k8s.io: i/o timeout"))
    return "K07-pod-failures"


def m_pending(s: Scenario) -> str:
    p = s.pods("kube-prometheus-stack-operator-", MONITORING_NAMESPACE)[0]
    p["spec"].pop("nodeName")
    p["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    s.objects.append(_event(p, "FailedScheduling", "0/1 nodes are available: 1 Insufficient memory."))
    return "K07-pod-failures"


def m_node_exporter_port(s: Scenario) -> str:
    p = s.pods("kube-prometheus-stack-prometheus-node-exporter-", MONITORING_NAMESPACE)[0]
    p["spec"].pop("nodeName", None)
    p["spec"]["nodeName"] = s.nodes()[0]["metadata"]["name"]
    p["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
    _ds_degraded(s, "kube-prometheus-stack-prometheus-node-exporter")
    s.objects.append(_event(p, "FailedScheduling", "0/1 nodes are available: 1 node(s) didn't have free ports for the "
                            "requested pod ports. preemption: 0/1 nodes are available"))  # fmt: skip
    return "K08-node-exporter-port"


def m_clusterpolicy_not_ready(s: Scenario) -> str:
    s.find("ClusterPolicy", "cluster-policy")["status"] = {
        "state": "notReady", "namespace": GPU_NAMESPACE,
        "conditions": [{"type": "Ready", "status": "False"},
                       {"type": "Error", "status": "True", "reason": "OperandNotReady",
                        "message": "ClusterPolicy is not ready, states not ready: [state-device-plugin]"}],
    }  # fmt: skip
    return "G01-clusterpolicy-ready"


def m_gpu_operator_missing(s: Scenario) -> str:
    s.objects[:] = [o for o in s.objects if o["kind"] != "ClusterPolicy"]
    return "G01-clusterpolicy-ready"


def m_operand_not_ready(s: Scenario) -> str:
    _ds_degraded(s, "nvidia-device-plugin-daemonset")
    _crashloop(s.pods("nvidia-device-plugin-daemonset-", GPU_NAMESPACE)[0])
    return "G02-operands-ready"


def _validator_stuck(stage: str) -> Callable[[Scenario], str]:
    def mutate(s: Scenario) -> str:
        p = s.pods("nvidia-operator-validator-", GPU_NAMESPACE)[0]
        st = p["status"]
        st.update(
            phase="Pending",
            conditions=[{"type": "Initialized", "status": "False"}, {"type": "Ready", "status": "False"}],
        )
        idx = VALIDATION_STAGES.index(stage)
        for j, cs in enumerate(st["initContainerStatuses"]):
            if j == idx:
                cs.update(ready=False, restartCount=0, state={"running": {"startedAt": STAMP}})
            elif j > idx:
                cs.update(ready=False, state={"waiting": {"reason": "PodInitializing"}})
        for cs in st["containerStatuses"]:
            cs.update(ready=False, state={"waiting": {"reason": "PodInitializing"}})
        s.logs[(GPU_NAMESPACE, p["metadata"]["name"], stage)] = (
            f"running {stage}\nwaiting for {stage.split('-')[0]} ...\n"
        )
        _ds_degraded(s, "nvidia-operator-validator")
        return "G03-validator-stage"

    return mutate


def m_no_nvidia_runtime(s: Scenario) -> str:
    p = s.pods("gpu-feature-discovery-", GPU_NAMESPACE)[0]
    _waiting(p, "ContainerCreating")
    s.objects.append(_event(p, "FailedCreatePodSandBox", "Failed to create pod sandbox: rpc error: code = Unknown desc = "
                            "failed to get sandbox runtime: no runtime for \"nvidia\" is configured"))  # fmt: skip
    return "G04-nvidia-runtime"


def m_driver_preinstalled(s: Scenario) -> str:
    for n in s.nodes():
        s.hosts[n["metadata"]["name"]] = {"nvidia_driver_version": "580.95.05", "nvidia_smi": True,
                                          "nvidia_pci_devices": [{"slot": f"0000:{i:02x}:00.0"} for i in range(GPUS)]}  # fmt: skip
    return "G05-driver-preinstalled"


def m_no_allocatable_gpus(s: Scenario) -> str:
    n = s.nodes()[-1]
    n["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    return "G06-gpu-allocatable"


def m_duplicate_exporters(s: Scenario) -> str:
    other = "operator" if s.exporter == "standalone" else "standalone"
    labels = dict(EXPORTER_TARGETS[other].labels)
    ds = "nvidia-dcgm-exporter" if other == "operator" else "dcgm-exporter"
    n = s.nodes()[0]["metadata"]["name"]
    s.objects.append(pod(f"{ds}-dup00", GPU_NAMESPACE, n, labels=labels, owner=("DaemonSet", ds)))
    return "G07-duplicate-exporters"


def _exporter_pod(s: Scenario) -> Obj:
    return s.pods("dcgm-exporter-" if s.exporter == "standalone" else "nvidia-dcgm-exporter-", GPU_NAMESPACE)[0]


def m_exporter_oomkilled(s: Scenario) -> str:
    p = _exporter_pod(s)
    cs = p["status"]["containerStatuses"][0]
    cs.update(restartCount=7, lastState={"terminated": {"exitCode": 137, "reason": "OOMKilled"}})
    return "G08-exporter-health"


def m_exporter_crashloop(s: Scenario) -> str:
    p = _exporter_pod(s)
    _crashloop(p)
    s.logs[(GPU_NAMESPACE, p["metadata"]["name"], p["status"]["containerStatuses"][0]["name"])] = (
        'time=... level=FATAL msg="Error starting nv-hostengine: DCGM initialization error"\n'
    )
    return "G08-exporter-health"


def m_nvml_unknown_error(s: Scenario) -> str:
    p = _exporter_pod(s)
    _crashloop(p)
    s.logs[(GPU_NAMESPACE, p["metadata"]["name"], p["status"]["containerStatuses"][0]["name"])] = (
        'level=info msg="Starting dcgm-exporter"\nFailed to initialize NVML: Unknown Error\n'
    )
    return "G09-nvml-unknown-error"


def m_driver_upgrade_failed(s: Scenario) -> str:
    """The GPU Operator's upgrade controller gave up on the last node: label upgrade-failed, the node left cordoned,
    its new driver pod crash-looping (the kernel module cannot be built)."""
    n = s.nodes()[-1]
    n["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] = "upgrade-failed"
    n["spec"]["unschedulable"] = True
    name = n["metadata"]["name"]
    p = next(p for p in s.pods("nvidia-driver-daemonset-", GPU_NAMESPACE) if p["spec"]["nodeName"] == name)
    _crashloop(p)
    s.logs[(GPU_NAMESPACE, p["metadata"]["name"], "nvidia-driver-ctr")] = (
        "Installing NVIDIA driver kernel modules...\nCould not resolve Linux kernel version\n"
    )
    _ds_degraded(s, "nvidia-driver-daemonset")
    return "G11-driver-upgrade-failed"


#: failure name -> (nodes the base cluster needs, mutation returning the id that must fail)
FAILURES: dict[str, tuple[int, Callable[[Scenario], str]]] = {
    "node-not-ready": (3, m_node_not_ready),
    "node-disk-pressure": (1, m_node_disk_pressure),
    "control-plane-taint": (1, m_control_plane_taint),
    "scheduler-crashloop": (1, m_scheduler_crashloop),
    "flannel-not-ready": (3, m_flannel_not_ready),
    "pod-cidr-missing": (3, m_pod_cidr_missing),
    "coredns-not-ready": (1, m_coredns_not_ready),
    "coredns-loop": (1, m_coredns_loop),
    "pod-to-api-timeout": (1, m_pod_to_api_timeout),
    "crashloop": (1, m_crashloop),
    "image-pull-backoff": (1, m_image_pull_backoff),
    "err-image-pull": (1, m_err_image_pull),
    "pending": (1, m_pending),
    "node-exporter-port": (1, m_node_exporter_port),
    "clusterpolicy-not-ready": (1, m_clusterpolicy_not_ready),
    "gpu-operator-missing": (1, m_gpu_operator_missing),
    "operand-not-ready": (3, m_operand_not_ready),
    **{f"validator-{st}": (1, _validator_stuck(st)) for st in VALIDATION_STAGES},
    "no-nvidia-runtime": (1, m_no_nvidia_runtime),
    "driver-preinstalled": (1, m_driver_preinstalled),
    "no-allocatable-gpus": (3, m_no_allocatable_gpus),
    "duplicate-exporters": (1, m_duplicate_exporters),
    "exporter-oomkilled": (1, m_exporter_oomkilled),
    "exporter-crashloop": (1, m_exporter_crashloop),
    "nvml-unknown-error": (1, m_nvml_unknown_error),
    "driver-upgrade-failed": (3, m_driver_upgrade_failed),
}
# GPU sharing (MIG, time-slicing): tests/fakes/sharing_scenarios.py (its builders use this module's)
FAILURES.update(SHARING_FAILURES)


def failure(name: str) -> tuple[Scenario, str]:
    """A healthy cluster with one failure applied, and the check id that must fail."""
    nodes, mutate = FAILURES[name]
    s = healthy(nodes)
    return s, mutate(s)


def clone(s: Scenario) -> Scenario:
    return copy.deepcopy(s)


# --- running a scenario through the real client, the collector and the checks ---------------------

MY_LAYERS = ("kubernetes", "gpu-operator")


def collect_kube(api: FakeKubeAPI, kubeconfig: Any, *, hosts: dict[str, Obj] | None = None,
                 timeout: float = 30.0, extra: dict[str, Any] | None = None) -> Any:  # fmt: skip
    """Run the ``kubernetes`` source (real ``kubernetes`` client -> ``api``) through the collect engine."""
    from gpustack.diagnose.collect import CollectContext, collect

    ctx = CollectContext(cfg=Config.model_validate({}), command="doctor", kubeconfig=kubeconfig, timeout=timeout,
                         workload=False, layers=MY_LAYERS, extra=dict(extra or {}))  # fmt: skip
    snap = collect(ctx, sources=["kubernetes"])
    snap.hosts = dict(hosts or {})
    return snap


def my_specs(command: str = "doctor") -> list[Any]:
    """The K../G.. checks (other engineers' checks may live in the same layers)."""
    from gpustack.diagnose import registry

    return [s for s in registry.select(command, layers=MY_LAYERS) if s.id[0] in "KG"]


def run_checks(snap: Any, command: str = "doctor") -> list[Any]:
    from gpustack.diagnose import registry

    return registry.run(my_specs(command), snap)
