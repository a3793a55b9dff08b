"""GPU Operator checks (G01..G11): ClusterPolicy, operands, validator stages, runtime, driver,
allocatable GPUs, exporters, NVML, the CUDA test pod, failed driver upgrades. Pure functions of the snapshot (see checks_kubernetes for the
tolerant object helpers they share)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpustack.checks.hostrules import DEV_CHAR_FIX
from gpustack.checks.model import Finding
from gpustack.constants import GPU_NAMESPACE
from gpustack.diagnose.objects import (
    MAX_LISTED,
    as_dict,
    as_int,
    as_list,
    container_statuses,
    daemonset_counts,
    event_index,
    event_messages,
    finding,
    items,
    labels_of,
    last_event,
    last_line_matching,
    listed,
    logs,
    name_of,
    node_of,
    ns_of,
    owner_name,
    pod_problem,
    ref,
)
from gpustack.diagnose.registry import register
from gpustack.diagnose.snapshot import Snapshot

LAYER = "gpu-operator"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
VALIDATOR_APP = "nvidia-operator-validator"
VALIDATION_STAGES = ("driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation")
NO_RUNTIME = re.compile(r'no runtime for "?nvidia"? is configured')
NVML_UNKNOWN = re.compile(r"Failed to initialize NVML: Unknown Error")
STANDALONE_EXPORTER = ("app.kubernetes.io/name", "dcgm-exporter")
OPERATOR_EXPORTER = ("app", "nvidia-dcgm-exporter")
UPGRADE = f"helm upgrade gpu-operator nvidia/gpu-operator -n {GPU_NAMESPACE} --reuse-values"

STAGE_FIX = {
    "driver-validation": (
        f"kubectl -n {GPU_NAMESPACE} logs ds/nvidia-driver-daemonset --all-containers --tail 50\n"
        "# on {node}: nouveau loaded? lsmod | grep nouveau (gpustack up --only os blacklists it); Secure Boot "
        "rejecting the module? mokutil --sb-state; headers? dpkg -l linux-headers-$(uname -r)\n"
        "# nvidia-smi already works on the host: the driver is preinstalled, set driver.enabled=false "
        "(see G05-driver-preinstalled; gpustack up --only cluster)"
    ),
    "toolkit-validation": (
        f"kubectl -n {GPU_NAMESPACE} logs ds/nvidia-container-toolkit-daemonset --all-containers --tail 50\n"
        "ssh {node} 'grep -n nvidia /etc/containerd/config.toml /etc/containerd/conf.d/* 2>/dev/null; "
        "sudo systemctl restart containerd'"
    ),
    "cuda-validation": (
        f"kubectl -n {GPU_NAMESPACE} logs -l app=nvidia-cuda-validator --tail 50\n"
        "kubectl get runtimeclass nvidia   # the operator's runtime class must exist"
    ),
    "plugin-validation": (
        f"kubectl -n {GPU_NAMESPACE} logs ds/nvidia-device-plugin-daemonset --all-containers --tail 50\n"
        "kubectl describe node {node} | grep -A2 nvidia.com/gpu"
    ),
}


def _cluster_policies(snap: Snapshot) -> list[dict[str, Any]]:
    return items(snap, "ClusterPolicy")


def _driver_enabled(policy: dict[str, Any]) -> bool:
    """ClusterPolicy spec.driver.enabled (the chart's default is true)."""
    enabled = as_dict(as_dict(policy.get("spec")).get("driver")).get("enabled", True)
    return enabled is not False and str(enabled).lower() != "false"


def gpu_nodes(snap: Snapshot) -> dict[str, int]:
    """GPU node name -> NVIDIA PCI devices seen on the host (0 when unknown): nodes labelled
    ``nvidia.com/gpu.present=true``, with nvidia.com/gpu capacity, or with NVIDIA PCI devices in host facts."""
    hosts = as_dict(snap.hosts)
    out: dict[str, int] = {}
    for n in items(snap, "Node"):
        name = name_of(n)
        facts = as_dict(hosts.get(name))
        pci = len(as_list(facts.get("nvidia_pci_devices")))
        capacity = as_int(as_dict(as_dict(n.get("status")).get("capacity")).get(GPU_RESOURCE))
        if str(labels_of(n).get(GPU_PRESENT_LABEL)).lower() == "true" or pci or capacity:
            out[name] = pci
    return out


# --- G01 ------------------------------------------------------------------------------------------


@register("G01-clusterpolicy-ready", LAYER, title="GPU Operator ClusterPolicy state ready",
          reads="clusterpolicies", commands=("doctor", "verify"), needs=("ClusterPolicy",))  # fmt: skip
def clusterpolicy_ready(snap: Snapshot) -> list[Finding]:
    """The ClusterPolicy exists and reports ``status.state: ready``."""
    policies = _cluster_policies(snap)
    if not policies:
        return [finding("G01-clusterpolicy-ready", "fail", "the GPU Operator is not installed (no ClusterPolicy)",
                        fix=f"gpustack up --only cluster\nhelm -n {GPU_NAMESPACE} status gpu-operator", layer=LAYER)]  # fmt: skip
    out = []
    for p in policies:
        st = as_dict(p.get("status"))
        state = st.get("state")
        if state == "ready":
            continue
        conds = [as_dict(c) for c in as_list(st.get("conditions"))]
        why = "; ".join(f"{c.get('type')}: {c.get('reason') or ''} {c.get('message') or ''}".strip()
                        for c in conds if c.get("status") == "True" and c.get("type") != "Ready")  # fmt: skip
        out.append(finding("G01-clusterpolicy-ready", "fail", f"ClusterPolicy {name_of(p)} is {state or 'not reporting a state'}",
                           evidence=f"status.state={state!r}" + (f"; {why}" if why else ""),
                           fix=f"kubectl -n {GPU_NAMESPACE} get pods -o wide   # see G02/G03 for the operand that is not ready\n"
                               f"kubectl -n {GPU_NAMESPACE} logs deploy/gpu-operator --tail 50", layer=LAYER))  # fmt: skip
    return out


# --- G02 ------------------------------------------------------------------------------------------


@register("G02-operands-ready", LAYER, title="every GPU Operator operand DaemonSet fully ready",
          reads="daemonsets, pods, events (gpu-operator)", commands=("doctor", "verify"), needs=("DaemonSet", "Pod"))  # fmt: skip
def operands_ready(snap: Snapshot) -> list[Finding]:
    """Each DaemonSet in the operator namespace has desired == ready == available."""
    dss = [d for d in items(snap, "DaemonSet") if ns_of(d) == GPU_NAMESPACE]
    if not dss:
        if _cluster_policies(snap):
            return [finding("G02-operands-ready", "fail", f"no operand DaemonSet in {GPU_NAMESPACE}",
                            fix=f"kubectl -n {GPU_NAMESPACE} logs deploy/gpu-operator --tail 50", layer=LAYER)]  # fmt: skip
        return [finding("G02-operands-ready", "skip", "the GPU Operator is not installed (see G01)", layer=LAYER)]
    by_owner: dict[str, list[dict[str, Any]]] = {}
    for p in items(snap, "Pod"):
        if ns_of(p) == GPU_NAMESPACE:
            by_owner.setdefault(owner_name(p), []).append(p)
    evidx = event_index(snap)
    out = []
    for d in sorted(dss, key=name_of):
        desired, ready, available = daemonset_counts(d)
        if desired == ready == available:
            continue
        name = name_of(d)
        pods = by_owner.get(name) or [p for p in by_owner.get("", []) if name_of(p).startswith(name + "-")]
        lines = [f"DaemonSet {ref(d)}: desired {desired}, ready {ready}, available {available}"]
        bad_nodes = []
        for p in pods:
            prob = pod_problem(p)
            if prob is None:
                continue
            bad_nodes.append(node_of(p))
            if len(lines) <= MAX_LISTED:
                ev = last_event(evidx, "Pod", GPU_NAMESPACE, name_of(p))
                lines.append(f"pod {name_of(p)} on {node_of(p) or '?'}: {prob}" + (f"; last event {ev}" if ev else ""))
        out.append(finding("G02-operands-ready", "fail", f"{name}: {ready}/{desired} ready, {available} available",
                           evidence="\n".join(lines),
                           fix=f"kubectl -n {GPU_NAMESPACE} describe ds {name}\n"
                               f"kubectl -n {GPU_NAMESPACE} logs ds/{name} --all-containers --tail 50",
                           host=bad_nodes[0] if len(set(bad_nodes)) == 1 and bad_nodes[0] else None, layer=LAYER))  # fmt: skip
    return out


# --- G03 ------------------------------------------------------------------------------------------


def stuck_stage(pod: dict[str, Any]) -> str | None:
    """The first validation init container of a validator pod that has not completed, or None."""
    statuses = {str(c.get("name")): c for c in container_statuses(pod, init=True)}
    for stage in VALIDATION_STAGES:
        cs = statuses.get(stage)
        if cs is None:
            continue
        term = as_dict(as_dict(cs.get("state")).get("terminated"))
        if not term or as_int(term.get("exitCode")) != 0:
            return stage
    return None


@register("G03-validator-stage", LAYER, title="nvidia-operator-validator passed every stage (driver, toolkit, cuda, plugin)",
          reads="pods (gpu-operator), logs", commands=("doctor",), needs=("Pod",))  # fmt: skip
def validator_stage(snap: Snapshot) -> list[Finding]:
    """Which validation init container (driver/toolkit/cuda/plugin) each validator pod is stuck in."""
    stuck: dict[str, list[dict[str, Any]]] = {}
    for p in items(snap, "Pod"):
        if labels_of(p).get("app") == VALIDATOR_APP and (stage := stuck_stage(p)):
            stuck.setdefault(stage, []).append(p)
    out = []
    for stage in VALIDATION_STAGES:
        pods = stuck.get(stage)
        if not pods:
            continue
        nodes = [node_of(p) or "?" for p in pods]
        lines = []
        for p in pods[:MAX_LISTED]:
            cs = next((c for c in container_statuses(p, init=True) if c.get("name") == stage), {})
            state = as_dict(cs.get("state"))
            detail = next(iter(state), "unknown")
            reason = as_dict(state.get(detail)).get("reason") if detail != "unknown" else None
            lines.append(f"pod {ref(p)} on {node_of(p) or '?'}: {stage} {detail}" + (f" ({reason})" if reason else "")
                         + f", {as_int(cs.get('restartCount'))} restarts")  # fmt: skip
            text = as_dict(snap.pod_logs).get(f"{ref(p)}/{stage}")
            if isinstance(text, str) and text.strip():
                lines.append(f"  log: {text.strip().splitlines()[-1][:300]}")
        out.append(finding("G03-validator-stage", "fail", f"validator stuck in {stage} on {listed(nodes)}",
                           evidence="\n".join(lines), fix=STAGE_FIX[stage].replace("{node}", nodes[0]),
                           host=nodes[0] if len(nodes) == 1 else None, layer=LAYER))  # fmt: skip
    return out


# --- G04 ------------------------------------------------------------------------------------------


@register("G04-nvidia-runtime", LAYER, title='containerd has the "nvidia" runtime handler',
          reads="events, logs", commands=("doctor",), needs=("Pod",))  # fmt: skip
def nvidia_runtime(snap: Snapshot) -> list[Finding]:
    """Events ``no runtime for "nvidia" is configured``: pods with runtimeClassName nvidia cannot start."""
    hits = [(f"{kind} {ns}/{name}".replace(" /", " "), m) for (kind, ns, name), m in event_messages(snap)
            if NO_RUNTIME.search(m)]  # fmt: skip
    hits += [(k, line) for k, t in logs(snap) if (line := last_line_matching(t, NO_RUNTIME))]
    if not hits:
        return []
    pods = {(p_ns, p_name): p for p in items(snap, "Pod") if (p_ns := ns_of(p)) and (p_name := name_of(p))}
    nodes = sorted({node_of(pods[(ns, name)]) for (kind, ns, name), m in event_messages(snap)
                    if NO_RUNTIME.search(m) and (ns, name) in pods and node_of(pods[(ns, name)])})  # fmt: skip
    node = nodes[0] if nodes else "<node>"
    return [finding("G04-nvidia-runtime", "fail", 'no runtime for "nvidia" is configured in containerd'
                    + (f" on {listed(nodes)}" if nodes else ""),
                    evidence="\n".join(f"{k}: {m[:300]}" for k, m in hits[:MAX_LISTED]),
                    fix=f"kubectl -n {GPU_NAMESPACE} logs ds/nvidia-container-toolkit-daemonset --all-containers --tail 50\n"
                        "# toolkit.enabled must be true unless the toolkit is preinstalled and configured: gpustack up --only cluster\n"
                        f"# toolkit preinstalled on the host: ssh {node} 'sudo nvidia-ctk runtime configure --runtime=containerd "
                        "&& sudo systemctl restart containerd'",
                    host=nodes[0] if len(nodes) == 1 else None, layer=LAYER)]  # fmt: skip


# --- G05 ------------------------------------------------------------------------------------------


@register("G05-driver-preinstalled", LAYER, title="driver.enabled=false when the hosts already have a driver",
          reads="clusterpolicies, host facts", commands=("doctor",), needs=("ClusterPolicy",))  # fmt: skip
def driver_preinstalled(snap: Snapshot) -> list[Finding]:
    """ClusterPolicy ``spec.driver.enabled`` true while a GPU host reports ``nvidia_driver_version``."""
    hosts = as_dict(snap.hosts)
    if not hosts:
        return [finding("G05-driver-preinstalled", "skip", "host facts not collected", layer=LAYER)]
    with_driver = sorted((str(n), str(as_dict(f).get("nvidia_driver_version")))
                         for n, f in hosts.items() if as_dict(f).get("nvidia_driver_version"))  # fmt: skip
    policies = [p for p in _cluster_policies(snap) if _driver_enabled(p)]
    if not with_driver or not policies:
        return []
    return [finding("G05-driver-preinstalled", "fail",
                    f"the operator installs a driver but {listed(n for n, _ in with_driver)} already have one",
                    evidence=f"ClusterPolicy {name_of(policies[0])}: spec.driver.enabled=true; "
                             + ", ".join(f"{n}: driver {v}" for n, v in with_driver[:MAX_LISTED]),
                    fix="gpustack up --only cluster   # gpu.driver: auto turns driver.enabled off when the hosts have a driver\n"
                        f"# or by hand: {UPGRADE} --set driver.enabled=false",
                    host=with_driver[0][0] if len(with_driver) == 1 else None, layer=LAYER)]  # fmt: skip


# --- G06 ------------------------------------------------------------------------------------------


@register("G06-gpu-allocatable", LAYER, title="nvidia.com/gpu (or MIG devices) allocatable on every GPU node",
          reads="nodes, host facts", commands=("doctor", "verify"), needs=("Node",))  # fmt: skip
def gpu_allocatable(snap: Snapshot) -> list[Finding]:
    """Every GPU node advertises ``nvidia.com/gpu`` (as many as the host has NVIDIA PCI devices), or MIG devices
    (``nvidia.com/mig-<profile>``, the mixed strategy)."""
    nodes = {name_of(n): n for n in items(snap, "Node")}
    gpus = gpu_nodes(snap)
    if not gpus:
        return [finding("G06-gpu-allocatable", "fail", "no GPU node found",
                        evidence=f"no node is labelled {GPU_PRESENT_LABEL}=true or advertises {GPU_RESOURCE}, "
                                 "and no host reports NVIDIA PCI devices",
                        fix=f"kubectl get nodes -L {GPU_PRESENT_LABEL}\n"
                            f"kubectl -n {GPU_NAMESPACE} get pods   # node-feature-discovery and gpu-feature-discovery label GPU nodes",
                        layer=LAYER)]  # fmt: skip
    zero, short = [], []
    for name, pci in sorted(gpus.items()):
        allocatable = as_dict(as_dict(nodes[name].get("status")).get("allocatable"))
        alloc = as_int(allocatable.get(GPU_RESOURCE))
        # MIG under the mixed strategy: the GPUs are advertised as nvidia.com/mig-<profile> (G15 checks the counts)
        mig_devices = sum(as_int(v) for k, v in allocatable.items() if str(k).startswith("nvidia.com/mig-"))
        if alloc <= 0 and mig_devices <= 0:
            zero.append(name)
        elif (
            pci
            and alloc < pci
            and not mig_devices
            and "-MIG-" not in str(labels_of(nodes[name]).get("nvidia.com/gpu.product"))
        ):
            short.append(f"{name}: {alloc} allocatable of {pci} GPUs")
    out = []
    if zero:
        out.append(finding("G06-gpu-allocatable", "fail", f"no allocatable {GPU_RESOURCE} on {listed(zero)}",
                           evidence=f"{len(zero)} of {len(gpus)} GPU node(s) advertise 0 {GPU_RESOURCE}",
                           fix=f"kubectl -n {GPU_NAMESPACE} get pods -o wide --field-selector spec.nodeName={zero[0]}\n"
                               f"kubectl -n {GPU_NAMESPACE} logs ds/nvidia-device-plugin-daemonset --all-containers --tail 50\n"
                               "# the device plugin starts after the validator: see G03-validator-stage",
                           host=zero[0] if len(zero) == 1 else None, layer=LAYER))  # fmt: skip
    if short:
        out.append(finding("G06-gpu-allocatable", "warn", "fewer allocatable GPUs than the hosts have",
                           evidence="\n".join(short[:MAX_LISTED]),
                           fix="nvidia-smi -L on the node; a GPU lost from the bus (XID 79) or marked unhealthy by the "
                               "device plugin needs a reboot or RMA", layer=LAYER))  # fmt: skip
    return out


# --- G07 ------------------------------------------------------------------------------------------


def exporter_kind(pod: dict[str, Any]) -> str | None:
    """'standalone', 'operator' or None by the pod's labels."""
    lbl = labels_of(pod)
    if lbl.get(STANDALONE_EXPORTER[0]) == STANDALONE_EXPORTER[1]:
        return "standalone"
    if lbl.get(OPERATOR_EXPORTER[0]) == OPERATOR_EXPORTER[1]:
        return "operator"
    return None


@register("G07-duplicate-exporters", LAYER, title="one dcgm-exporter per GPU node",
          reads="pods", commands=("doctor",), needs=("Pod",))  # fmt: skip
def duplicate_exporters(snap: Snapshot) -> list[Finding]:
    """The standalone exporter and the operator's on the same node (each embeds a DCGM host engine)."""
    per_node: dict[str, dict[str, str]] = {}
    for p in items(snap, "Pod"):
        kind = exporter_kind(p)
        phase = as_dict(p.get("status")).get("phase")
        if kind and node_of(p) and phase not in ("Succeeded", "Failed"):
            per_node.setdefault(node_of(p), {})[kind] = ref(p)
    both = {n: k for n, k in sorted(per_node.items()) if len(k) == 2}
    if not both:
        return []
    return [finding("G07-duplicate-exporters", "fail", f"two dcgm-exporters on {listed(both)}",
                    evidence="\n".join(f"{n}: {k['standalone']} and {k['operator']}" for n, k in list(both.items())[:MAX_LISTED]),
                    fix="keep one: gpu.exporter in gpustack.yaml chooses it; gpustack up --only cluster\n"
                        f"# by hand: helm -n {GPU_NAMESPACE} uninstall dcgm-exporter   (keeps the operator's)\n"
                        f"#      or: {UPGRADE} --set dcgmExporter.enabled=false",
                    host=next(iter(both)) if len(both) == 1 else None, layer=LAYER)]  # fmt: skip


# --- G08 ------------------------------------------------------------------------------------------


@register("G08-exporter-health", LAYER, title="dcgm-exporter not OOMKilled or crash-looping",
          reads="pods, logs", commands=("doctor",), needs=("Pod",))  # fmt: skip
def exporter_health(snap: Snapshot) -> list[Finding]:
    """Exporter containers whose last termination was OOMKilled, or that crash-loop."""
    gpu = gpu_nodes(snap)
    oom, crash = [], []
    for p in items(snap, "Pod"):
        if not exporter_kind(p):
            continue
        for cs in container_statuses(p, init=False):
            last = as_dict(as_dict(cs.get("lastState")).get("terminated"))
            now = as_dict(as_dict(cs.get("state")).get("terminated"))
            waiting = as_dict(as_dict(cs.get("state")).get("waiting"))
            if "OOMKilled" in (last.get("reason"), now.get("reason")):
                oom.append(p)
                break
            if waiting.get("reason") == "CrashLoopBackOff" or (now and as_int(now.get("exitCode")) != 0):
                crash.append(p)
                break
    out = []
    if oom:
        nodes = sorted({node_of(p) for p in oom if node_of(p)})
        out.append(finding("G08-exporter-health", "fail", f"dcgm-exporter OOMKilled on {listed(nodes) or 'some node'}",
                           evidence="\n".join(f"pod {ref(p)}: lastState.terminated.reason=OOMKilled, "
                                              f"{sum(as_int(c.get('restartCount')) for c in container_statuses(p))} restarts"
                                              for p in oom[:MAX_LISTED]),
                           fix="raise the exporter's memory limit to 1Gi (512Mi is too small on 8-GPU nodes):\n"
                               f"helm upgrade dcgm-exporter dcgm-exporter/dcgm-exporter -n {GPU_NAMESPACE} --reuse-values "
                               "--set resources.limits.memory=1Gi   # standalone\n"
                               f"{UPGRADE} --set dcgmExporter.resources.limits.memory=1Gi   # operator's",
                           host=nodes[0] if len(nodes) == 1 else None, layer=LAYER))  # fmt: skip
    if crash:
        cpu_only = sorted({node_of(p) for p in crash if node_of(p) and node_of(p) not in gpu})
        lines = []
        for p in crash[:MAX_LISTED]:
            line = ""
            for k, t in logs(snap):
                if k.startswith(ref(p) + "/") and t.strip():
                    line = t.strip().splitlines()[-1][:300]
            lines.append(
                f"pod {ref(p)} on {node_of(p) or '?'}: {pod_problem(p) or 'crashing'}"
                + (f"; log: {line}" if line else "")
            )
        fix = (f"kubectl -n {GPU_NAMESPACE} logs {name_of(crash[0])} --previous --tail 50\n"
               f"kubectl -n {GPU_NAMESPACE} rollout restart ds/{owner_name(crash[0]) or 'nvidia-dcgm-exporter'}")  # fmt: skip
        if cpu_only:
            fix = (f"the exporter runs on node(s) without GPUs ({listed(cpu_only)}): restrict it to GPU nodes:\n"
                   f"helm upgrade dcgm-exporter dcgm-exporter/dcgm-exporter -n {GPU_NAMESPACE} --reuse-values "
                   f"--set nodeSelector.{GPU_PRESENT_LABEL.replace('.', chr(92) + '.')}=true   # or gpustack up --only cluster\n" + fix)  # fmt: skip
        out.append(finding("G08-exporter-health", "fail", f"dcgm-exporter crash-looping ({len(crash)} pod(s))",
                           evidence="\n".join(lines), fix=fix, layer=LAYER))  # fmt: skip
    return out


# --- G09 ------------------------------------------------------------------------------------------


@register("G09-nvml-unknown-error", LAYER, title='no "Failed to initialize NVML: Unknown Error" in GPU pods',
          reads="logs, events", commands=("doctor",), needs=("Pod",))  # fmt: skip
def nvml_unknown_error(snap: Snapshot) -> list[Finding]:
    """Long-running GPU pods losing device access (missing /dev/char symlinks under systemd cgroups)."""
    hits = [(k, line) for k, t in logs(snap) if (line := last_line_matching(t, NVML_UNKNOWN))]
    hits += [(f"{kind} {ns}/{name}", m[:300]) for (kind, ns, name), m in event_messages(snap) if NVML_UNKNOWN.search(m)]
    if not hits:
        return []
    pods = {ref(p): p for p in items(snap, "Pod")}
    nodes = sorted({node_of(pods[k.rsplit("/", 1)[0]]) for k, _ in hits
                    if k.rsplit("/", 1)[0] in pods and node_of(pods[k.rsplit("/", 1)[0]])})  # fmt: skip
    node = nodes[0] if nodes else "<node>"
    first = hits[0][0].rsplit("/", 1)[0] if "/" in hits[0][0] else "<pod>"
    return [finding("G09-nvml-unknown-error", "fail",
                    "GPU pods lost access to the devices (Failed to initialize NVML: Unknown Error)"
                    + (f" on {listed(nodes)}" if nodes else ""),
                    evidence="\n".join(f"{k}: {line}" for k, line in hits[:MAX_LISTED]),
                    fix=f"on {node}: {DEV_CHAR_FIX.split('   (', 1)[0]}\n"
                        f"kubectl -n {first.split('/')[0]} delete pod {first.split('/')[-1]}   # the recreated pod "
                        "gets its GPUs back",
                    host=nodes[0] if len(nodes) == 1 else None, layer=LAYER)]  # fmt: skip


# --- G11 ------------------------------------------------------------------------------------------

#: the GPU Operator's driver upgrade controller records each node's state in this label (k8s-operator-libs
#: upgrade/consts.go: "nvidia.com/%s-driver-upgrade-state" with "gpu"); "upgrade-failed" stays until the node's
#: driver pod is Ready again, then the controller moves the node on (uncordon-required)
UPGRADE_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
DRIVER_APP = "nvidia-driver-daemonset"


@register("G11-driver-upgrade-failed", LAYER, title="no node whose GPU driver upgrade failed (upgrade-failed label)",
          reads="nodes (label nvidia.com/gpu-driver-upgrade-state), driver pods", commands=("doctor",),
          needs=("Node",))  # fmt: skip
def driver_upgrade_failed(snap: Snapshot) -> list[Finding]:
    drivers = {node_of(p): p for p in items(snap, "Pod") if labels_of(p).get("app") == DRIVER_APP}
    out = []
    for node in items(snap, "Node"):
        if labels_of(node).get(UPGRADE_STATE_LABEL) != "upgrade-failed":
            continue
        name = name_of(node)
        cordoned = bool(as_dict(node.get("spec")).get("unschedulable"))
        pod = drivers.get(name)
        if pod is not None:
            state = pod_problem(pod) or "Running and Ready"
            where = f"driver pod {ref(pod)}: {state}"
            fix = (f"kubectl -n {ns_of(pod)} logs {name_of(pod)} --all-containers --tail=50   # why the new driver did "
                   f"not come up; fix that, then restart it: kubectl -n {ns_of(pod)} delete pod {name_of(pod)}   "
                   "(once it is Ready the upgrade controller moves the node on and uncordons it)")  # fmt: skip
        else:
            where = f"no {DRIVER_APP} pod on the node"
            fix = (f"kubectl -n {GPU_NAMESPACE} get pods -l app={DRIVER_APP} -o wide --field-selector "
                   f"spec.nodeName={name}; kubectl -n {GPU_NAMESPACE} get ds {DRIVER_APP}   # the driver DaemonSet "
                   "must schedule a pod there; once it is Ready the upgrade controller moves the node on")  # fmt: skip
        out.append(finding("G11-driver-upgrade-failed", "fail",
                           f"{name}: the GPU Operator's driver upgrade failed"
                           + (" (the node stays cordoned)" if cordoned else ""),
                           evidence=f"label {UPGRADE_STATE_LABEL}=upgrade-failed; {where}"
                           + ("; spec.unschedulable=true" if cordoned else ""), fix=fix, host=name))  # fmt: skip
    return out


# --- G10 ------------------------------------------------------------------------------------------


@register("G10-cuda-test-pod", LAYER, title="a CUDA test pod requesting one GPU completes",
          reads="verify's test pod", commands=("verify",))  # fmt: skip
def cuda_test_pod(snap: Snapshot) -> list[Finding]:
    if "workload" in snap.errors:
        return [Finding("", "", "fail", "the CUDA test pod could not be run", evidence=snap.errors["workload"])]
    rec, busy = snap.workload.get("cuda"), snap.workload.get("cuda_skipped")  # busy: every GPU allocated
    if not isinstance(rec, Mapping):
        why = "every GPU it may use is allocated" if busy else snap.workload.get("skipped", "not run")
        return [Finding("", "", "skip", f"CUDA test pod not run ({why})", evidence=str(busy or ""),
                        fix="gpustack verify --check G10 once a GPU is free" if busy else "")]  # fmt: skip
    out = []
    if rec.get("phase") != "Succeeded":
        how = "timed out" if rec.get("timed_out") else "stuck" if rec.get("stuck") else "did not complete"
        reason = f"{rec.get('reason', '')} {rec.get('message', '')}".strip()
        fix = ("kubectl describe node | grep -A5 Allocatable; gpustack doctor --layer gpu-operator"
               if "nvidia.com/gpu" in reason or rec.get("reason") == "Unschedulable"
               else "gpustack doctor --layer gpu-operator --layer runtime")  # fmt: skip
        out.append(Finding("", "", "fail", f"CUDA test pod {how}: phase {rec.get('phase') or '?'}",
                           evidence="; ".join(x for x in (reason, str(rec.get("error") or ""),
                                                          str(rec.get("logs") or "")[-300:]) if x),
                           fix=fix, host=str(rec.get("node") or "") or None))  # fmt: skip
    if rec.get("pod") and not rec.get("deleted"):
        out.append(Finding("", "", "warn", f"the test pod {rec.get('pod')} was not deleted",
                           evidence=str(rec.get("error") or ""),
                           fix=f"kubectl -n {rec.get('namespace')} delete pod {rec.get('pod')}"))  # fmt: skip
    return out
