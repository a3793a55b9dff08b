"""The GPU metrics themselves (M02, M04): the exporter serves them, Prometheus holds them for every GPU node.

Under MIG, ``DCGM_FI_DEV_GPU_UTIL`` (and ``MEM_COPY_UTIL``) is not reported: DCGM leaves the field blank for MIG
instances and dcgm-exporter drops blank values. NVIDIA's answer (NVIDIA/dcgm-exporter#430, maintainer, 2024-12-12:
"not supported for MIG configurations ... Use DCGM_FI_PROF_GR_ENGINE_ACTIVE and DCGM_FI_PROF_DRAM_ACTIVE, which is
reported for MIG devices"; the same in #216 and #105) is what these checks read there: a MIG node reports through its
GPU instances' series (labels ``GPU_I_PROFILE``/``GPU_I_ID``, dcgm-exporter internal/pkg/rendermetrics/
render_metrics.go) and ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``. Pure functions of the snapshot."""

from __future__ import annotations

from gpustack.checks.model import Finding
from gpustack.diagnose.checks_monitoring import BOTH, DIRECT_QUERY, _by_node, down_exporters
from gpustack.diagnose.collect_prometheus import QUERIES
from gpustack.diagnose.objects import items, labels_of, name_of
from gpustack.diagnose.registry import register
from gpustack.diagnose.sharing import mig_on, shared_nodes
from gpustack.diagnose.snapshot import Snapshot

NOT_UNDER_MIG = "DCGM_FI_DEV_GPU_UTIL is not reported under MIG (NVIDIA/dcgm-exporter#430)"


def mig_nodes(snap: Snapshot) -> set[str]:
    """Nodes asked for a MIG layout (``nvidia.com/mig.config``): their GPUs report per instance, without GPU_UTIL."""
    return {name_of(n) for n in items(snap, "Node") if mig_on(labels_of(n))}


@register("M02-exporter-metrics", "monitoring",
          title="dcgm-exporter /metrics serves DCGM_FI_DEV_GPU_UTIL (under MIG: its GPU instances' series)",
          reads="exporter /metrics via the API server proxy", commands=BOTH)  # fmt: skip
def exporter_metrics(snap: Snapshot) -> list[Finding]:
    rec = snap.prometheus.exporter_scrape
    if rec is None:
        return [Finding("", "", "skip", "the exporter's /metrics was not fetched",
                        evidence=snap.errors.get("prometheus", ""))]  # fmt: skip
    if rec.get("error"):
        return [Finding("", "", "fail", "the exporter's /metrics could not be read", evidence=str(rec["error"]),
                        fix="kubectl -n gpu-operator get endpoints; kubectl -n gpu-operator logs -l "
                            "app.kubernetes.io/name=dcgm-exporter --tail=50")]  # fmt: skip
    if not rec.get("gpu_util_series") and not rec.get("mig_instance_series"):
        names = rec.get("dcgm_metrics") or []
        return [Finding("", "", "fail", "the exporter serves no DCGM_FI_DEV_GPU_UTIL (nor MIG instance series)",
                        evidence=f"{rec.get('endpoint')}: {rec.get('bytes')} bytes, DCGM metrics: "
                                 f"{', '.join(names[:8]) or 'none'}",
                        fix="check the counters CSV enables DCGM_FI_DEV_GPU_UTIL (values/dcgm-counters.csv) and the "
                            f"exporter logs; {NOT_UNDER_MIG}: there DCGM_FI_PROF_GR_ENGINE_ACTIVE")]  # fmt: skip
    return []


@register("M04-gpus-reporting", "monitoring",
          title="DCGM_FI_DEV_GPU_UTIL queryable for every allocatable GPU (MIG nodes: DCGM_FI_PROF_GR_ENGINE_ACTIVE)",
          reads="Prometheus queries; nodes (MIG labels)", commands=BOTH, needs=("prometheus",))  # fmt: skip
def gpus_reporting(snap: Snapshot) -> list[Finding]:
    mig = mig_nodes(snap)
    keys = ("gpu_util_by_node", "gpu_allocatable", *(("gr_engine_by_node",) if mig else ()))
    errors = {k: v for k, v in snap.prometheus.query_errors.items() if k in keys}
    if errors:
        capped = any("cap of" in v for v in errors.values())
        return [Finding("", "", "fail", "GPU queries failed in Prometheus", evidence="; ".join(errors.values()),
                        fix=DIRECT_QUERY.format(q=QUERIES["gpu_util_by_node"]) if capped else
                        "kubectl -n monitoring logs prometheus-kube-prometheus-stack-prometheus-0 --tail=50")]  # fmt: skip
    reporting = _by_node(snap.prometheus.queries.get("gpu_util_by_node", []))
    # a MIG node reports through its instances' engine activity (the module docstring)
    instances = {n: v for n, v in _by_node(snap.prometheus.queries.get("gr_engine_by_node", [])).items() if n in mig}
    allocatable = {n: v for n, v in _by_node(snap.prometheus.queries.get("gpu_allocatable", [])).items() if v > 0}
    if not reporting and not instances:
        nor = f" nor, on the MIG nodes, DCGM_FI_PROF_GR_ENGINE_ACTIVE ({NOT_UNDER_MIG})" if mig else ""
        summary = "DCGM_FI_DEV_GPU_UTIL returns no series" + (" (nor GR_ENGINE_ACTIVE)" if mig else "")
        return [Finding("", "", "fail", summary,
                        evidence=f"query {QUERIES['gpu_util_by_node']!r} is empty{nor}; allocatable GPUs: "
                                 f"{int(sum(allocatable.values()))}",
                        fix="gpustack doctor --check M01,M02,M03,M06,M07  # follow the path exporter -> target")]  # fmt: skip
    down = {str((t.get("labels") or {}).get("node") or "") for t in down_exporters(snap)}
    out = []
    for node in sorted(mig - set(reporting) - set(instances) - down):  # down: M03 names the target
        out.append(Finding("", "", "fail", f"{node}: the MIG node's GPU instances report no metrics",
                           evidence=f"no DCGM_FI_PROF_GR_ENGINE_ACTIVE series with node={node}; {NOT_UNDER_MIG}",
                           fix=f"kubectl -n gpu-operator logs -l app.kubernetes.io/name=dcgm-exporter --field-selector "
                               f"spec.nodeName={node} --tail=50   # profiling fields need the exporter's DCP "
                               "metrics (values/dcgm-counters.csv) and one DCGM host engine", host=node))  # fmt: skip
    for node in sorted((set(reporting) | set(allocatable)) - shared_nodes(snap)):  # shared: G15 counts them
        got, want = int(reporting.get(node, 0)), int(allocatable.get(node, 0))
        if want and got != want:
            evidence = (
                f"count by (node) (DCGM_FI_DEV_GPU_UTIL)={got}, kube_node_status_allocatable nvidia_com_gpu={want}"
            )
            if node in down:  # nothing is scraped from that node: the target, not the GPUs
                out.append(Finding("", "", "fail", f"{node}: {got} of {want} allocatable GPUs report metrics",
                                   evidence=evidence + f"; the dcgm-exporter target on {node} is down",
                                   fix="see M03-exporter-target-up: Prometheus cannot scrape the exporter on "
                                       f"{node}", host=node))  # fmt: skip
                continue
            out.append(Finding("", "", "fail", f"{node}: {got} of {want} allocatable GPUs report metrics",
                               evidence=evidence,
                               fix=f"kubectl debug node/{node} -it --image=busybox -- chroot /host nvidia-smi -L; "
                                   "check the exporter log on that node (a GPU fell off the bus, XID 79, or "
                                   "the exporter pod is restarting)", host=node))  # fmt: skip
    if allocatable and not any(allocatable.get(n) for n in {*reporting, *instances}):
        out.append(Finding("", "", "warn", "GPU series carry no node label matching kube-state-metrics",
                           evidence=f"nodes in DCGM series: {sorted({*reporting, *instances})[:5]}",
                           fix="the ServiceMonitor must relabel __meta_kubernetes_pod_node_name to node: "
                               "gpustack up --only cluster"))  # fmt: skip
    return out
