"""GPU sharing checks (G12..G18): MIG state, profiles, what the device plugin advertises, the device plugin's
configuration, the exporter around MIG changes, verify's test pods on shared GPUs. Pure functions of the snapshot;
what is configured is read from the cluster (:mod:`gpustack.diagnose.sharing`).

Each fix is the GPU Operator's own (NVIDIA/cloud-native-docs gpu-operator-v26.7: gpu-operator-mig.rst, gpu-sharing.rst,
release-notes.rst 26.7.0) or the upstream source's (mig-parted v0.15.0, k8s-device-plugin v0.20.0; the messages are
kept in tests/contract/upstream/gpu_sharing.yaml)."""

from __future__ import annotations

import re
from typing import Any

from gpustack.checks.model import Finding
from gpustack.config import mig
from gpustack.constants import GPU_NAMESPACE
from gpustack.diagnose import sharing as sh
from gpustack.diagnose.objects import (
    MAX_LISTED,
    as_dict,
    event_messages,
    finding,
    items,
    labels_of,
    listed,
    logs,
    name_of,
    node_of,
    ns_of,
    ref,
    requests_gpus,
)
from gpustack.diagnose.registry import register
from gpustack.diagnose.snapshot import Snapshot

LAYER = "gpu-operator"
MIG_LOGS = f"kubectl logs -n {GPU_NAMESPACE} -l app=nvidia-mig-manager -c nvidia-mig-manager"
RETRY = (f"kubectl -n {GPU_NAMESPACE} delete pod -l app=nvidia-mig-manager --field-selector spec.nodeName={{node}}   "
         "# the MIG manager applies the node's label again when it starts")  # fmt: skip
RESTART_PLUGIN = (f"kubectl rollout restart -n {GPU_NAMESPACE} daemonset/nvidia-device-plugin-daemonset "
                  f"daemonset/gpu-feature-discovery")  # fmt: skip
STANDALONE_EXPORTER = ("app.kubernetes.io/name", "dcgm-exporter")
# mig-parted v0.15.0: what the MIG manager logs for each cause (tests/contract/upstream/gpu_sharing.yaml)
NOT_PRESENT = re.compile(r"selected mig-config not present|failed to validate MIG configuration")
IN_USE = re.compile(r"In use by another client|failed to apply MIG configuration")
MODE = re.compile(r"failed to apply MIG mode change|did not take effect after rebooting|[Mm]ode change pending")
CLIENTS = re.compile(r"failed to wait for pods to be deleted|did not shutdown")
CM_NOT_FOUND = re.compile(r'configmap "?(?P<name>[^" ]+)"? not found')
KEY_MISSING = re.compile(r"specified config (?P<key>\S*) does not exist")
PLUGIN_ERROR = re.compile(r"unable to load config|replicas must be >= 2|not supported with MPS|"
                          r"not supported for MIG devices|maximum allowed replicas exceeded|unknown version")  # fmt: skip


def _f(id_: str, status: str, summary: str, **kw: Any) -> Finding:
    return finding(id_, status, summary, layer=LAYER, **kw)  # type: ignore[arg-type]


def _pods_by_node(snap: Snapshot) -> dict[str, list[dict[str, Any]]]:
    """Every pod under the node it runs on: one pass over the pods (G12 looks up one node at a time; a pass per
    node was quadratic, 27.7 of 31 s at 1,000 nodes, issue 32)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for p in items(snap, "Pod"):
        out.setdefault(node_of(p) or "", []).append(p)
    return out


def _logs_by_pod(snap: Snapshot) -> dict[str, list[str]]:
    """The collected log tails under their pod's name (keys ``ns/pod/container``), in collection order."""
    out: dict[str, list[str]] = {}
    for key, text in logs(snap):
        parts = key.split("/")
        if len(parts) > 1:
            out.setdefault(parts[1], []).append(text)
    return out


def _mig_log(log_by_pod: dict[str, list[str]], pods: list[dict[str, Any]]) -> str:
    """The MIG manager's log tail among ``pods`` (one node's; collected for nodes whose state is failed or
    pending)."""
    names = sorted({name_of(p) for p in pods if labels_of(p).get("app") == "nvidia-mig-manager"})
    return "\n".join(t for n in names for t in log_by_pod.get(n, []))


def _lines(text: str, pattern: re.Pattern[str], limit: int = 3) -> list[str]:
    return [line.strip()[:300] for line in text.splitlines() if pattern.search(line)][-limit:]


def _gpu_pods(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(ref(p) for p in pods if requests_gpus(p)
                  and as_dict(p.get("status")).get("phase") not in ("Succeeded", "Failed"))  # fmt: skip


def _valid_names(snap: Snapshot, node: str) -> str:
    configs = sh.node_mig_configs(snap, node)
    if configs is None:
        return ""
    names = sorted(n for n in configs.configs if n not in (mig.ALL_DISABLED, mig.ALL_ENABLED))
    return f"{', '.join(names)} (from {configs.source})"


# --- G12 ------------------------------------------------------------------------------------------------


@register("G12-mig-config-state", LAYER, title="no node's MIG change failed or is stuck (nvidia.com/mig.config.state)",
          reads="nodes (MIG labels), the MIG manager's log, pods", commands=("doctor", "verify"), needs=("Node",))  # fmt: skip
def mig_config_state(snap: Snapshot) -> list[Finding]:
    out = []
    index: tuple[dict[str, list[dict[str, Any]]], dict[str, list[str]]] | None = None  # built once, when needed
    for node in items(snap, "Node"):
        labels = labels_of(node)
        state, config, name = labels.get(sh.MIG_STATE), labels.get(sh.MIG_CONFIG), name_of(node)
        paused = sorted(k for k, v in labels.items() if v == sh.PAUSED)
        if state not in ("failed", "pending") and not paused:
            continue  # nothing to report: no log or pod is read
        index = (_pods_by_node(snap), _logs_by_pod(snap)) if index is None else index
        pods = index[0].get(name, [])
        text = _mig_log(index[1], pods)
        evidence = f"{sh.MIG_CONFIG}={config}, {sh.MIG_STATE}={state}" + (
            f"; paused: {', '.join(paused)}" if paused else ""
        )
        if state == "failed":
            out.append(_failed(snap, name, str(config), pods, text, evidence))
        elif paused and (state != "pending" or _lines(text, CLIENTS)):
            out.append(_stuck(name, pods, text, evidence))
        elif state == "pending":
            out.append(_f("G12-mig-config-state", "warn", f"{name}: MIG change to {config} in progress (pending)",
                          evidence=evidence, host=name,
                          fix=f"{MIG_LOGS}   # the MIG manager stops the GPU operands, applies {config}, starts them "
                              "again; if it stays pending, see what it waits for there"))  # fmt: skip
    return out


def _failed(snap: Snapshot, node: str, config: str, pods: list[dict[str, Any]], text: str, evidence: str) -> Finding:
    retry = RETRY.format(node=node)
    if _lines(text, NOT_PRESENT):
        valid = _valid_names(snap, node)
        why, fix = (f"the GPU does not offer {config}",
                    f"pick one the node offers{': ' + valid if valid else ''}; set gpu_sharing.profile of {node} in "
                    f"gpustack.yaml and run gpustack up --only cluster (by hand: kubectl label node {node} "
                    f"{sh.MIG_CONFIG}=<name> --overwrite)")  # fmt: skip
    elif _lines(text, IN_USE):
        gpu_pods = _gpu_pods(pods)
        why, fix = ("a process still used the GPU (In use by another client)",
                    (f"GPU pods on the node: {listed(gpu_pods)}; evict them (gpustack up drains GPU pods before a MIG "
                     "change) " if gpu_pods else "no GPU pod on the node: a host GPU client (nvidia-dcgm, nvsm: ConfigMap "
                     "default-gpu-clients) or a DaemonSet without the nvidia.com/gpu.deploy.client nodeSelector "
                     "(G17) holds it; ") + f"then retry:\n{retry}")  # fmt: skip
    elif _lines(text, MODE):
        why, fix = ("the MIG mode change needs a GPU reset or a reboot",
                    f"reboot {node} (cordon and drain it first), or set gpu.mig_reboot: true (WITH_REBOOT) and run gpustack "
                    "up --only cluster; a loaded nvidia_drm module blocks the reset (mig-parted README, known issues)")  # fmt: skip
    else:
        why, fix = ("see the MIG manager's log", f"{MIG_LOGS}\n{retry}")
    lines = _lines(text, re.compile("|".join(p.pattern for p in (NOT_PRESENT, IN_USE, MODE))))
    return _f("G12-mig-config-state", "fail", f"{node}: MIG configuration {config} failed: {why}",
              evidence=evidence + ("\n" + "\n".join(lines) if lines else ""), fix=fix, host=node)  # fmt: skip


def _stuck(node: str, pods: list[dict[str, Any]], text: str, evidence: str) -> Finding:
    """Operands paused: the MIG manager's wait for GPU clients timed out (reconfigure.go returns without a state)."""
    # what reconfigure.go waits for: the operands by app label, and DaemonSet pods selecting gpu.deploy.client
    operands = ("nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-dcgm-exporter", "nvidia-dcgm")
    holders = sorted(ref(p) for p in pods if (
        "nvidia.com/gpu.deploy.client" in as_dict(as_dict(p.get("spec")).get("nodeSelector"))
        or (ns_of(p) == GPU_NAMESPACE and labels_of(p).get("app") in operands)))  # fmt: skip
    lines = _lines(text, CLIENTS)
    return _f("G12-mig-config-state", "fail",
              f"{node}: MIG change stuck: GPU operands paused for it and not resumed",
              evidence=evidence + ("\n" + "\n".join(lines) if lines else "")
              + (f"\nstill running: {listed(holders)}" if holders else ""),
              fix=(f"delete what did not stop ({listed(holders)}), then " if holders else "")
              + "restart the MIG manager on the node to retry:\n" + RETRY.format(node=node), host=node)  # fmt: skip


# --- G13 ------------------------------------------------------------------------------------------------


@register("G13-mig-profile-supported", LAYER, title="each node's MIG configuration is one its GPUs offer",
          reads="nodes, ConfigMaps <node>-mig-config / default-mig-parted-config (gpu-operator), host facts",
          commands=("doctor", "verify"), needs=("Node", "ConfigMap"))  # fmt: skip
def mig_profile_supported(snap: Snapshot) -> list[Finding]:
    out = []
    for node in items(snap, "Node"):
        labels, name = labels_of(node), name_of(node)
        if not sh.mig_on(labels):
            continue
        config = str(labels.get(sh.MIG_CONFIG))
        configs = sh.node_mig_configs(snap, name)
        if configs is None or config in configs.configs:
            continue
        out.append(_f("G13-mig-profile-supported", "fail", f"{name}: the GPUs cannot take MIG configuration {config}",
                      evidence=f"{sh.MIG_CONFIG}={config}; not in {configs.source}",
                      fix=f"use one of {_valid_names(snap, name)} as gpu_sharing.profile of {name}; gpustack up "
                          "--only cluster", host=name))  # fmt: skip
    return out


# --- G14 ------------------------------------------------------------------------------------------------


@register("G14-mig-devices-advertised", LAYER, title="MIG nodes advertise MIG devices, not whole GPUs",
          reads="nodes (allocatable, GFD labels), clusterpolicies", commands=("doctor", "verify"),
          needs=("Node", "ClusterPolicy"))  # fmt: skip
def mig_devices_advertised(snap: Snapshot) -> list[Finding]:
    out = []
    strategy = sh.strategy(snap)
    for node in items(snap, "Node"):
        labels, name = labels_of(node), name_of(node)
        if not sh.mig_on(labels) or labels.get(sh.MIG_STATE) != "success":
            continue
        product = str(labels.get(sh.PRODUCT) or "")
        alloc = sh.allocatable(node)
        if product.endswith("-MIG-INVALID"):
            out.append(_f("G14-mig-devices-advertised", "fail",
                          f"{name}: the device plugin refuses the MIG layout under mig.strategy single",
                          evidence=f"{sh.PRODUCT}={product}; {sh.MIG_CONFIG}={labels.get(sh.MIG_CONFIG)} (the plugin: "
                                   "more than one MIG device type present on node)",
                          fix="single needs one profile per node (all-<profile>); or set gpu.mig_strategy: mixed; "
                              "gpustack up --only cluster", host=name))  # fmt: skip
        elif not any(k.startswith(sh.MIG_PREFIX) for k in alloc) and "-MIG-" not in product:
            unset = strategy in ("", "none")
            out.append(_f("G14-mig-devices-advertised", "fail",
                          f"{name}: MIG is on but the device plugin still advertises whole GPUs",
                          evidence=f"{sh.MIG_CONFIG}={labels.get(sh.MIG_CONFIG)} applied; allocatable "
                                   f"{dict(sorted(alloc.items()))}; {sh.PRODUCT}={product or '(none)'}; "
                                   f"ClusterPolicy spec.mig.strategy={strategy or '(unset)'}",
                          fix=("set the MIG strategy: gpustack up --only cluster (gpustack sets it when a node uses MIG); "
                               "by hand: kubectl patch clusterpolicies.nvidia.com/cluster-policy --type=json "
                               "-p='[{\"op\":\"replace\", \"path\":\"/spec/mig/strategy\", \"value\":\"mixed\"}]'")
                              if unset else RESTART_PLUGIN + "   # the plugin started before the MIG change",
                          host=name))  # fmt: skip
    return out


# --- G15 ------------------------------------------------------------------------------------------------


@register("G15-sharing-allocatable", LAYER, title="shared GPUs: allocatable matches the MIG / time-slicing configuration",
          reads="nodes, ConfigMaps (gpu-operator), clusterpolicies, host facts", commands=("doctor", "verify"),
          needs=("Node", "ConfigMap", "ClusterPolicy"))  # fmt: skip
def sharing_allocatable(snap: Snapshot) -> list[Finding]:
    out = []
    for node in items(snap, "Node"):
        labels, name = labels_of(node), name_of(node)
        alloc = sh.allocatable(node)
        problems: list[str] = []
        if sh.mig_on(labels) and labels.get(sh.MIG_STATE) == "success":
            want = sh.expected_mig(snap, node)
            fix = (f"{RESTART_PLUGIN}   # after a MIG change the plugin re-reads the devices; a GPU missing from "
                   f"nvidia-smi -L on {name} needs a reboot")  # fmt: skip
        elif labels.get(sh.PLUGIN_CONFIG):
            want, setting = sh.expected_shared(snap, node)
            fix = f"{RESTART_PLUGIN}   # the operator does not watch the ConfigMap's content (gpu-sharing.rst)"
            got = (str(labels.get(sh.REPLICAS)), str(labels.get(sh.SHARING_STRATEGY)))
            if setting is not None and want is not None and got != (str(setting.replicas), setting.strategy):
                problems.append(f"GPU feature discovery reports another sharing setting: {sh.REPLICAS}={got[0]}, "
                                f"{sh.SHARING_STRATEGY}={got[1]}")  # fmt: skip
        else:
            continue
        if want is None:
            continue
        problems += [f"{k}: want {v}, allocatable {alloc.get(k, 0)}" for k, v in sorted(want.resources.items())
                     if alloc.get(k, 0) != v]  # fmt: skip
        if problems:
            out.append(_f("G15-sharing-allocatable", "fail", f"{name}: what the node advertises does not match its GPU "
                          "sharing", evidence=f"{want.why}; " + "; ".join(problems), fix=fix, host=name))  # fmt: skip
    return out


# --- G16 ------------------------------------------------------------------------------------------------


@register("G16-device-plugin-config", LAYER, title="the time-slicing / MPS ConfigMap exists, has each node's key and parses",
          reads="clusterpolicies, ConfigMaps (gpu-operator), nodes, events, logs", commands=("doctor", "verify"),
          needs=("ClusterPolicy", "ConfigMap", "Node"))  # fmt: skip
def device_plugin_config(snap: Snapshot) -> list[Finding]:
    name = sh.plugin_configmap_name(snap)
    if not name:
        return []
    data = sh.configmaps(snap).get(name)
    if data is None:
        events = [
            m for (kind, ns, obj), m in event_messages(snap) if (hit := CM_NOT_FOUND.search(m)) and hit["name"] == name
        ]
        return [_f("G16-device-plugin-config", "fail", f"ConfigMap {name} (ClusterPolicy devicePlugin.config) does not exist "
                   f"in {GPU_NAMESPACE}: the device plugin's pods cannot start",
                   evidence="\n".join(events[:MAX_LISTED]) or f"no ConfigMap {GPU_NAMESPACE}/{name}",
                   fix=f"gpustack up --only cluster   # writes {name}; it must be in the operator's namespace "
                       "(gpu-operator issue #412)")]  # fmt: skip
    out = []
    for key, text in sorted(data.items()):
        _, problem = sh.plugin_config(text)
        if problem:
            out.append(_f("G16-device-plugin-config", "fail", f"ConfigMap {name}: key {key} is refused by the device plugin",
                          evidence=problem + _plugin_log(snap),
                          fix=f"fix or remove key {key} (gpustack writes it from gpu_sharing: gpustack up --only "
                              f"cluster), then {RESTART_PLUGIN}"))  # fmt: skip
    missing = sorted((name_of(n), str(labels_of(n).get(sh.PLUGIN_CONFIG))) for n in items(snap, "Node")
                     if labels_of(n).get(sh.PLUGIN_CONFIG) and str(labels_of(n).get(sh.PLUGIN_CONFIG)) not in data)  # fmt: skip
    for node, key in missing:
        out.append(_f("G16-device-plugin-config", "fail", f"{node}: {sh.PLUGIN_CONFIG}={key} names no key of ConfigMap "
                      f"{name} (config-manager: specified config {key} does not exist)",
                      evidence=f"keys: {', '.join(sorted(data)) or '(none)'}" + _plugin_log(snap),
                      fix=f"label it with one of the keys, or remove the label: kubectl label node {node} "
                          f"{sh.PLUGIN_CONFIG}-   (gpustack up --only cluster sets it from gpu_sharing)", host=node))  # fmt: skip
    return out


def _plugin_log(snap: Snapshot) -> str:
    lines = [
        f"{k}: {line}"
        for k, t in logs(snap)
        for line in _lines(t, re.compile(f"{PLUGIN_ERROR.pattern}|{KEY_MISSING.pattern}"), 1)
    ]
    return ("\n" + "\n".join(lines[:3])) if lines else ""


# --- G17 ------------------------------------------------------------------------------------------------


@register("G17-exporter-mig-client", LAYER, title="with MIG, the standalone dcgm-exporter selects nvidia.com/gpu.deploy.client",
          reads="daemonsets, nodes", commands=("doctor", "verify"), needs=("DaemonSet", "Node"))  # fmt: skip
def exporter_mig_client(snap: Snapshot) -> list[Finding]:
    mig_nodes = sorted(name_of(n) for n in items(snap, "Node") if sh.mig_on(labels_of(n)))
    if not mig_nodes:
        return []
    out = []
    for ds in items(snap, "DaemonSet"):
        if labels_of(ds).get(STANDALONE_EXPORTER[0]) != STANDALONE_EXPORTER[1]:
            continue
        selector = as_dict(as_dict(as_dict(as_dict(ds.get("spec")).get("template")).get("spec")).get("nodeSelector"))
        if str(selector.get("nvidia.com/gpu.deploy.client")) == "true":
            continue
        out.append(_f("G17-exporter-mig-client", "fail",
                      f"dcgm-exporter ({ref(ds)}) keeps running through MIG changes on {listed(mig_nodes)}",
                      evidence=f"nodeSelector {selector or '{}'} has no nvidia.com/gpu.deploy.client: the MIG manager "
                               "stops only the DaemonSets that select it (GPU Operator 26.7.0 release notes); the "
                               "exporter's DCGM then holds the GPU and the change fails (In use by another client)",
                      fix="gpustack up --only cluster   # adds it when a node uses MIG\n"
                          f"# by hand: helm upgrade dcgm-exporter dcgm-exporter/dcgm-exporter -n {ns_of(ds) or GPU_NAMESPACE} "
                          "--reuse-values --set-string nodeSelector.nvidia\\.com/gpu\\.deploy\\.client=true"))  # fmt: skip
    return out


# --- G18 ------------------------------------------------------------------------------------------------

#: nvidia-smi -L's device lines: ``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)`` and, under it, one line per MIG
#: device the container holds, ``  MIG 1g.10gb     Device  0: (UUID: MIG-...)`` (NVIDIA/cloud-native-docs
#: gpu-operator/manifests/output/mig-nvidia-smi.txt @1c9e5bc; the real H100's GPU line in
#: tests/fixtures/gpu-probe/ubuntu2404-h100-80gb-hbm3)
SMI_GPU = re.compile(r"^GPU \d+: .+ \(UUID: GPU-[0-9a-fA-F-]+\)$")
SMI_MIG = re.compile(r"^MIG (?P<profile>\S+)\s+Device\s+\d+: \(UUID: MIG-[0-9a-fA-F-]+\)$")
STUCK_PULL = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")


def _pod_fix(node: str, resource: str, pod: dict[str, Any]) -> str:
    """What to do about a test pod that did not complete, by what stopped it."""
    reason = str(pod.get("reason") or "")
    if reason == "Unschedulable":
        return (f"kubectl describe node {node} | grep -A10 Allocatable   # must list {resource} with at least 1\n"
                "gpustack doctor --check G12 --check G14 --check G15 --check G16   # MIG state, what the device "
                "plugin advertises and its configuration")  # fmt: skip
    if reason in STUCK_PULL:
        return f"{node} cannot pull {pod.get('image') or 'the CUDA image'}: gpustack doctor --layer runtime"
    return (f"the container got {resource} on {node} but nvidia-smi failed: check the node's driver and toolkit "
            f"(gpustack doctor --layer runtime --layer gpu-operator); kubectl describe node {node}")  # fmt: skip


@register("G18-shared-gpu-test-pod", LAYER, title="a CUDA test pod runs on a MIG device / shared GPU of each sharing node",
          reads="verify's test pods", commands=("verify",))  # fmt: skip
def shared_gpu_test_pod(snap: Snapshot) -> list[Finding]:
    if "sharing-workload" in snap.errors:
        return [
            Finding(
                "", "", "fail", "the shared-GPU test pods could not be run", evidence=snap.errors["sharing-workload"]
            )
        ]
    records = snap.workload.get("sharing")
    if records is None:
        why = snap.workload.get("skipped", "not run")
        return [Finding("", "", "skip", f"shared-GPU test pods not run ({why})")]
    if not isinstance(records, list) or not records:
        return [Finding("", "", "pass", "no node shares its GPUs")]
    out = []
    for rec in (as_dict(r) for r in records):
        node, resource = str(rec.get("node") or "?"), str(rec.get("resource") or "")
        what = f"{rec.get('mode')} ({resource})"
        pod = as_dict(rec.get("pod"))
        text = str(pod.get("logs") or "")
        lines = [line.strip() for line in text.splitlines()]
        gpus = [line for line in lines if SMI_GPU.match(line)]
        migs = [m["profile"] for line in lines if (m := SMI_MIG.match(line))]
        want = str(rec.get("expect") or "")
        if pod.get("phase") != "Succeeded":
            how = "timed out" if pod.get("timed_out") else "stuck" if pod.get("stuck") else "did not complete"
            reason = f"{pod.get('reason', '')} {pod.get('message', '')}".strip()
            out.append(Finding("", "", "fail", f"{node}: the test pod on {what} {how}: phase {pod.get('phase') or '?'}",
                               evidence="; ".join(x for x in (reason, str(pod.get('error') or ''), text[-300:]) if x),
                               fix=_pod_fix(node, resource, pod), host=node))  # fmt: skip
        elif want.startswith("MIG ") and (migs != [want.removeprefix("MIG ")] or len(gpus) != 1):
            out.append(Finding("", "", "fail", f"{node}: the test pod on {what} did not see exactly one {want.strip()}",
                               evidence=f"nvidia-smi -L: {text[-500:] or '(no output)'}", host=node,
                               fix=f"nvidia-smi -L on {node}; gpustack doctor --check G14 --check G15"))  # fmt: skip
        elif want == "GPU " and (len(gpus) != 1 or migs):
            out.append(Finding("", "", "fail", f"{node}: the test pod on {what} did not see exactly one GPU",
                               evidence=f"nvidia-smi -L: {text[-500:] or '(no output)'}", host=node,
                               fix=f"nvidia-smi -L on {node}; gpustack doctor --check G15 --check G16"))  # fmt: skip
        elif rec.get("pod") is not None and not pod.get("deleted"):
            out.append(Finding("", "", "warn", f"the test pod {pod.get('pod')} was not deleted",
                               fix=f"kubectl -n {pod.get('namespace')} delete pod {pod.get('pod')}", host=node))  # fmt: skip
        else:
            seen = f"MIG {migs[0]}" if migs else gpus[-1] if gpus else "ok"
            out.append(Finding("", "", "pass", f"{node}: a CUDA pod ran on {what}: {seen}", host=node))
    return out
