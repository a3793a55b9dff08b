"""Monitoring-path checks (M01..M11): exporter Service -> /metrics -> ServiceMonitor -> Prometheus
target -> queryable metrics -> rules, plus node-exporter conflicts and verify's workload results.
Pure functions of the snapshot."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gpustack.checks.model import Finding
from gpustack.config.pins import version_tuple
from gpustack.diagnose.collect_prometheus import EXPORTER_UP, QUERIES, SCRAPE_POOL_FILTER
from gpustack.diagnose.registry import register
from gpustack.diagnose.snapshot import Obj, Snapshot
from gpustack.monitoring import gpu_models
from gpustack.monitoring.rules import EXPORTER_JOB, rule_group_names
from gpustack.render.manifests import EXPORTER_TARGETS

BOTH = ("doctor", "verify")
LOAD_MIN = 0.2  # Tensor Core activity a 1004 GEMM run must at least reach (it drives ~0.9 on datacenter GPUs)
NODE_EXPORTER_LABEL = ("app.kubernetes.io/name", "prometheus-node-exporter")
NODE_EXPORTER_FIX = (
    "gpustack up --only cluster  # moves node-exporter to 9101 when preflight sees a host node_exporter on 9100; "
    "or stop the host one: sudo systemctl disable --now node_exporter"
)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = _meta(obj).get("labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def _ref(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A Kubernetes LabelSelector (matchLabels + matchExpressions) against labels. ``{}`` matches all;
    None matches nothing (as prometheus-operator treats a nil selector)."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(str(k)) != str(v):
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = str(expr.get("key")), str(expr.get("operator")), [str(v) for v in expr.get("values") or []]
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def exporter_services(snap: Snapshot) -> list[Obj]:
    """Services that look like dcgm-exporter (a known gpustack target's labels, or a port 9400)."""
    out = []
    for svc in snap.items("Service"):
        labels = _labels(svc)
        known = any(t.labels.items() <= labels.items() for t in EXPORTER_TARGETS.values())
        ports = (svc.get("spec") or {}).get("ports") or []
        if known or any(isinstance(p, Mapping) and p.get("port") == 9400 for p in ports):
            out.append(svc)
    return out


def _ready_addresses(snap: Snapshot, svc: Obj) -> tuple[int, int]:
    meta = _meta(svc)
    for ep in snap.items("Endpoints"):
        em = _meta(ep)
        if em.get("name") == meta.get("name") and em.get("namespace") == meta.get("namespace"):
            ready = sum(len(s.get("addresses") or []) for s in ep.get("subsets") or [])
            not_ready = sum(len(s.get("notReadyAddresses") or []) for s in ep.get("subsets") or [])
            return ready, not_ready
    return 0, 0


@register("M01-exporter-endpoints", "monitoring", title="dcgm-exporter Service has ready endpoints",
          reads="Services, Endpoints", commands=BOTH, needs=("Service", "Endpoints"))  # fmt: skip
def exporter_endpoints(snap: Snapshot) -> list[Finding]:
    services = exporter_services(snap)
    if not services:
        return [Finding("", "", "fail", "no dcgm-exporter Service found",
                        evidence="no Service labelled app.kubernetes.io/name=dcgm-exporter or app=nvidia-dcgm-exporter, "
                                 "and none exposing port 9400",
                        fix="gpustack up --only cluster  # installs dcgm-exporter (gpu.exporter)")]  # fmt: skip
    out = []
    for svc in services:
        ready, not_ready = _ready_addresses(snap, svc)
        if not ready:
            sel = (svc.get("spec") or {}).get("selector") or {}
            sel_text = ",".join(f"{k}={v}" for k, v in sel.items())
            out.append(Finding("", "", "fail", f"Service {_ref(svc)} has no ready endpoints",
                               evidence=f"ready=0 notReady={not_ready}; selector {sel_text or '(none)'}",
                               fix=f"kubectl -n {_meta(svc).get('namespace')} get pods -l {sel_text} -o wide; "
                                   "gpustack doctor --layer gpu-operator  # why the exporter pods are not ready"))  # fmt: skip
    return out


def _exporter_targets(snap: Snapshot) -> list[Obj]:
    """Exporter targets from a snapshot saved before the target queries existed (every active target)."""
    return [t for t in snap.prometheus.targets
            if (t.get("labels") or {}).get("job") == EXPORTER_JOB or "dcgm" in str(t.get("scrapePool", ""))]  # fmt: skip


def down_exporters(snap: Snapshot) -> list[Obj]:
    """The exporter targets that are not up, as ``{"labels", "scrapeUrl", "lastError", "detail"}``: from the
    ``up == 0`` series, with the scrape error of the same target when its scrape pool was read."""
    if "exporter_down" not in snap.prometheus.queries:  # an older snapshot: the whole target list
        return [{**t, "detail": ""} for t in _exporter_targets(snap) if t.get("health") != "up"]
    details = {str((t.get("labels") or {}).get("instance")): t for t in snap.prometheus.targets}
    old = version_tuple(snap.prometheus.version) < SCRAPE_POOL_FILTER
    why_not = snap.prometheus.query_errors.get("targets") or (
        f"Prometheus {snap.prometheus.version or '(version unknown)'} cannot list one scrape pool's targets "
        f"(needs {'.'.join(map(str, SCRAPE_POOL_FILTER))} or newer)" if old else "no scrape error recorded")  # fmt: skip
    out = []
    for row in snap.prometheus.queries["exporter_down"]:
        labels = {str(k): str(v) for k, v in (row.get("metric") or {}).items()}
        found = details.get(labels.get("instance", ""))
        if found is not None:
            out.append({**found, "labels": {**labels, **(found.get("labels") or {})}, "detail": ""})
        else:
            out.append({"labels": labels, "scrapeUrl": labels.get("instance"), "health": "down", "lastError": "",
                        "detail": why_not})  # fmt: skip
    return out


def _target_query_error(snap: Snapshot) -> str:
    errors = snap.prometheus.query_errors
    return "; ".join(errors[k] for k in ("exporter_targets", "exporter_down") if k in errors)


DIRECT_QUERY = ("kubectl -n monitoring port-forward svc/kube-prometheus-stack-prometheus 9090:9090 & "
                "curl -sG localhost:9090/api/v1/query --data-urlencode 'query={q}'")  # fmt: skip
NO_TARGET_FIX = ("gpustack doctor --check M06,M07  # the ServiceMonitor is missing, does not match the Service, or "
                 "is not selected by Prometheus")  # fmt: skip


@register("M03-exporter-target-up", "monitoring", title="Prometheus scrapes dcgm-exporter (targets up)",
          reads="Prometheus up{job=~\".*dcgm.*\"} (count, == 0); the down targets' scrape pool", commands=BOTH)  # fmt: skip
def exporter_target_up(snap: Snapshot) -> list[Finding]:
    if not snap.prometheus.reachable:
        why = snap.errors.get("prometheus", "Prometheus was not queried")
        return [Finding("", "", "fail", "Prometheus could not be reached", evidence=why,
                        fix="kubectl -n monitoring get pods -l app.kubernetes.io/name=prometheus; "
                            "kubectl -n monitoring get svc kube-prometheus-stack-prometheus")]  # fmt: skip
    failed = _target_query_error(snap)
    if failed:
        return [Finding("", "", "fail", "Prometheus did not answer the exporter-target queries", evidence=failed,
                        fix=DIRECT_QUERY.format(q=QUERIES["exporter_down"]))]  # fmt: skip
    if "exporter_targets" in snap.prometheus.queries:
        if not sum(_by_node(snap.prometheus.queries["exporter_targets"], "job").values()):
            return [Finding("", "", "fail", "Prometheus has no dcgm-exporter target",
                            evidence=f"{EXPORTER_UP} matches no series", fix=NO_TARGET_FIX)]  # fmt: skip
    elif not _exporter_targets(snap):
        return [Finding("", "", "fail", "Prometheus has no dcgm-exporter target",
                        evidence=f"{len(snap.prometheus.targets)} active targets, none with job={EXPORTER_JOB}",
                        fix=NO_TARGET_FIX)]  # fmt: skip
    out = []
    for t in down_exporters(snap):
        labels = t.get("labels") or {}
        where = labels.get("node") or labels.get("instance") or t.get("scrapeUrl")
        error = (
            f"scrape error not read: {t['detail']}"
            if t.get("detail")
            else f"lastError={t.get('lastError') or '(none)'}"
        )
        out.append(Finding("", "", "fail", f"dcgm-exporter target down on {where}",
                           evidence=f"{t.get('scrapeUrl')}: health={t.get('health', 'down')} {error}",
                           fix=f"kubectl -n {labels.get('namespace', 'gpu-operator')} describe pod "
                               f"{labels.get('pod', '<exporter pod>')}; check the firewall allows "
                               "port 9400 from the pod network", host=str(labels.get("node") or "") or None))  # fmt: skip
    return out


def _by_node(rows: list[Obj], label: str = "node") -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rows:
        try:
            out[str((r.get("metric") or {}).get(label, ""))] = float(r["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return out


@register("M05-alert-rules-loaded", "monitoring", title="gpustack's GPU alert and usage recording rules are loaded",
          reads="Prometheus /api/v1/rules, PrometheusRules", commands=BOTH, needs=("prometheus",))  # fmt: skip
def alert_rules_loaded(snap: Snapshot) -> list[Finding]:
    if "rules" in snap.prometheus.query_errors:
        return [Finding("", "", "fail", "Prometheus rules could not be read",
                        evidence=snap.prometheus.query_errors["rules"])]  # fmt: skip
    wanted = rule_group_names()
    loaded = {str(g.get("name")) for g in snap.prometheus.rule_groups}
    missing = [g for g in wanted if g not in loaded]
    if missing:
        return [Finding("", "", "fail", f"{len(missing)} of {len(wanted)} gpustack rule groups not loaded",
                        evidence=f"missing: {', '.join(missing)}; loaded groups: {len(loaded)}",
                        fix="kubectl -n monitoring get prometheusrule gpustack-gpu-alerts gpustack-gpu-usage --show-labels; "
                            "gpustack up --only cluster  # re-applies the PrometheusRule (label release: "
                            "kube-prometheus-stack, ruleSelector)")]  # fmt: skip
    broken = [f"{g.get('name')}/{r.get('name')}: {r.get('lastError')}" for g in snap.prometheus.rule_groups
              if str(g.get("name")) in wanted for r in g.get("rules") or [] if r.get("health") == "err"]  # fmt: skip
    if broken:
        return [Finding("", "", "fail", f"{len(broken)} gpustack rule(s) fail to evaluate", evidence="; ".join(broken[:3]),
                        fix="promtool check rules gpustack/templates/monitoring/gpu-alerts.rules.yaml "
                            "gpustack/templates/monitoring/gpu-usage.rules.yaml")]  # fmt: skip
    return []


def _service_monitors_for(snap: Snapshot, svc: Obj) -> list[Obj]:
    """ServiceMonitors whose namespaceSelector and selector pick ``svc``."""
    ns = str(_meta(svc).get("namespace"))
    out = []
    for sm in snap.items("ServiceMonitor"):
        spec = sm.get("spec") or {}
        nss = spec.get("namespaceSelector") or {}
        ns_ok = bool(nss.get("any")) or ns in (nss.get("matchNames") or [_meta(sm).get("namespace")])
        if ns_ok and selector_matches(spec.get("selector") or {}, _labels(svc)):
            out.append(sm)
    return out


def _candidate_monitors(snap: Snapshot) -> list[Obj]:
    return [sm for sm in snap.items("ServiceMonitor")
            if "dcgm" in str(_meta(sm).get("name", "")) or "dcgm" in str((sm.get("spec") or {}).get("selector"))]  # fmt: skip


@register("M06-servicemonitor-matches", "monitoring",
          title="a ServiceMonitor matches the exporter Service (namespace, labels, port name)",
          reads="ServiceMonitors, Services", commands=BOTH, needs=("Service", "ServiceMonitor"))  # fmt: skip
def servicemonitor_matches(snap: Snapshot) -> list[Finding]:
    services = exporter_services(snap)
    if not services:
        return [Finding("", "", "skip", "no dcgm-exporter Service (see M01)")]
    out = []
    fix = "gpustack up --only cluster  # re-applies gpustack's dcgm-exporter ServiceMonitor"
    for svc in services:
        monitors = _service_monitors_for(snap, svc)
        port_names = [str(p.get("name")) for p in (svc.get("spec") or {}).get("ports") or [] if p.get("name")]
        if monitors:
            endpoints = [e for sm in monitors for e in (sm.get("spec") or {}).get("endpoints") or []]
            if not any(str(e.get("port")) in port_names for e in endpoints):
                used = sorted({str(e.get("port") or e.get("targetPort")) for e in endpoints})
                out.append(Finding("", "", "fail", f"ServiceMonitor for {_ref(svc)} names a port the Service lacks",
                                   evidence=f"ServiceMonitor {', '.join(_ref(m) for m in monitors)} endpoints port "
                                            f"{used}; Service ports {port_names}",
                                   fix=fix))  # fmt: skip
            continue
        candidates = _candidate_monitors(snap)
        if not candidates:
            out.append(Finding("", "", "fail", f"no ServiceMonitor selects {_ref(svc)}",
                               evidence=f"{len(snap.items('ServiceMonitor'))} ServiceMonitors, none for dcgm-exporter",
                               fix=fix))  # fmt: skip
            continue
        for sm in candidates:
            spec = sm.get("spec") or {}
            nss = spec.get("namespaceSelector") or {}
            why = []
            ns = str(_meta(svc).get("namespace"))
            if not (nss.get("any") or ns in (nss.get("matchNames") or [_meta(sm).get("namespace")])):
                why.append(f"namespaceSelector {nss or '(own namespace ' + str(_meta(sm).get('namespace')) + ')'} "
                           f"does not include {ns}")  # fmt: skip
            if not selector_matches(spec.get("selector") or {}, _labels(svc)):
                why.append(f"selector {spec.get('selector')} does not match Service labels {_labels(svc)}")
            out.append(Finding("", "", "fail", f"ServiceMonitor {_ref(sm)} does not match {_ref(svc)}",
                               evidence="; ".join(why), fix=fix))  # fmt: skip
    return out


@register("M07-servicemonitor-selected", "monitoring",
          title="Prometheus selects the exporter's ServiceMonitor (release label vs NilUsesHelmValues)",
          reads="Prometheus CRs, ServiceMonitors, Namespaces", commands=BOTH, fixable=True, needs=("Prometheus", "ServiceMonitor"))  # fmt: skip
def servicemonitor_selected(snap: Snapshot) -> list[Finding]:
    proms = snap.items("Prometheus")
    if not proms:
        return [Finding("", "", "fail", "no Prometheus object (kube-prometheus-stack not installed?)",
                        fix="gpustack up --only cluster")]  # fmt: skip
    monitors = [sm for svc in exporter_services(snap) for sm in _service_monitors_for(snap, svc)] or \
        _candidate_monitors(snap)  # fmt: skip
    if not monitors:
        return [Finding("", "", "skip", "no dcgm-exporter ServiceMonitor (see M06)")]
    ns_labels = {str(_meta(n).get("name")): _labels(n) for n in snap.items("Namespace")}
    out = []
    for sm in {_ref(m): m for m in monitors}.values():
        sm_ns = str(_meta(sm).get("namespace"))
        selected_by = []
        reasons = []
        for prom in proms:
            spec = prom.get("spec") or {}
            sel = spec.get("serviceMonitorSelector")
            nsel = spec.get("serviceMonitorNamespaceSelector")
            own_ns = str(_meta(prom).get("namespace"))
            if nsel is None:
                ns_ok = sm_ns == own_ns  # nil namespace selector: only the Prometheus' own namespace
            else:
                ns_ok = sm_ns not in ns_labels or selector_matches(nsel, {**ns_labels.get(sm_ns, {}),
                                                                          "kubernetes.io/metadata.name": sm_ns})  # fmt: skip
            if ns_ok and selector_matches(sel, _labels(sm)):
                selected_by.append(_ref(prom))
                continue
            if sel is None:
                reasons.append(f"Prometheus {_ref(prom)} has no serviceMonitorSelector (selects nothing)")
            elif not selector_matches(sel, _labels(sm)):
                reasons.append(f"Prometheus {_ref(prom)} serviceMonitorSelector {sel} does not match labels "
                               f"{_labels(sm)}")  # fmt: skip
            if not ns_ok:
                reasons.append(f"Prometheus {_ref(prom)} serviceMonitorNamespaceSelector {nsel} excludes {sm_ns}")
        if not selected_by:
            want = (proms[0].get("spec") or {}).get("serviceMonitorSelector") or {}
            labels = " ".join(f"{k}={v}" for k, v in (want.get("matchLabels") or {}).items())
            fix = (f"kubectl -n {sm_ns} label servicemonitor {_meta(sm).get('name')} {labels} --overwrite  "
                   "# or set prometheus.prometheusSpec.serviceMonitorSelectorNilUsesHelmValues=false "
                   "(gpustack up --only cluster does)") if labels else "gpustack up --only cluster"  # fmt: skip
            out.append(Finding("", "", "fail", f"ServiceMonitor {_ref(sm)} is not selected by any Prometheus",
                               evidence="; ".join(reasons), fix=fix))  # fmt: skip
    return out


def gpu_models_by_node(snap: Snapshot) -> dict[str, set[str]]:
    """Node -> the GPU models on it: dcgm-exporter's ``modelName`` as Prometheus has it (``gpu_models``; a row without
    a ``node`` label, from an older snapshot, under ``""``), else GPU feature discovery's ``nvidia.com/gpu.product``
    node label."""
    out: dict[str, set[str]] = {}
    for row in snap.prometheus.queries.get("gpu_models", []):
        metric = row.get("metric") or {}
        if metric.get("modelName"):
            out.setdefault(str(metric.get("node") or ""), set()).add(str(metric["modelName"]))
    if out:
        return out
    for node in snap.items("Node"):
        meta = node.get("metadata") or {}
        product = (meta.get("labels") or {}).get("nvidia.com/gpu.product")
        if product:
            out.setdefault(str(meta.get("name") or ""), set()).add(str(product))
    return out


def cluster_gpu_models(snap: Snapshot) -> set[str]:
    """Every GPU model the cluster reports (:func:`gpu_models_by_node`)."""
    return {m for models in gpu_models_by_node(snap).values() for m in models}


def profiling_unsupported(snap: Snapshot) -> bool:
    """Every GPU model of the cluster is one DCGM cannot profile (GeForce, TITAN: gpustack/monitoring/gpu_models.py):
    no DCGM_FI_PROF_* there."""
    return gpu_models.profiling_unsupported(cluster_gpu_models(snap))


@register("M08-profiling-metrics", "monitoring", title="DCGM profiling metrics (DCGM_FI_PROF_*) are collected",
          reads="Prometheus queries", commands=BOTH, needs=("prometheus",))  # fmt: skip
def profiling_metrics(snap: Snapshot) -> list[Finding]:
    """Each node with GPU_UTIL but no profiling series fails, unless its GPU models have no profiling fields (issue
    32: a GeForce node beside an H100 is excused by its own model, not only when every GPU is a GeForce)."""
    dev = _by_node(snap.prometheus.queries.get("gpu_util_by_node", []))
    prof = _by_node(snap.prometheus.queries.get("gr_engine_by_node", []))
    tensor = _by_node(snap.prometheus.queries.get("tensor_by_node", []))
    if not dev and not prof:  # all-MIG: no GPU_UTIL, but the instances' profiling series (M04)
        return [Finding("", "", "skip", "no DCGM device metrics at all (see M04)")]
    missing = sorted(n for n in dev if not prof.get(n) and not tensor.get(n))
    if not missing:
        return []
    by_node = gpu_models_by_node(snap)
    everywhere = by_node.get("", set())  # models not known per node: they stand for every node
    excused = [n for n in missing if gpu_models.profiling_unsupported(by_node.get(n, set()) | everywhere)]
    failing = [n for n in missing if n not in excused]
    shown = failing or excused
    models = sorted({m for n in shown for m in by_node.get(n, set()) | everywhere})
    evidence = (
        f"DCGM_FI_DEV_GPU_UTIL present but DCGM_FI_PROF_GR_ENGINE_ACTIVE/PIPE_TENSOR_ACTIVE absent on "
        f"{', '.join(shown[:5])}{' ...' if len(shown) > 5 else ''}; GPU models: {', '.join(models) or '?'}"
    )
    if not failing:
        return [Finding("", "", "warn", "profiling metrics unavailable (not supported on these GPUs)",
                        evidence=f"{evidence} ({gpu_models.WHY_PROFILING})",
                        fix="none needed: their profiling panels stay empty and R04 accepts that")]  # fmt: skip
    if excused:
        evidence += f"; not supported on {', '.join(excused[:5])}{' ...' if len(excused) > 5 else ''} (excused)"
    fix = ("profiling fields need a datacenter GPU (A100/H100/L40...), SYS_ADMIN for the exporter, and exactly one "
           "DCGM consumer per node: gpustack doctor --check G  # two exporters? ; kubectl -n gpu-operator logs "
           "-l app.kubernetes.io/name=dcgm-exporter | grep -i prof")  # fmt: skip
    return [Finding("", "", "fail", "profiling metrics unavailable", evidence=evidence, fix=fix)]


def _pod_messages(snap: Snapshot, pod: Obj) -> list[str]:
    meta = _meta(pod)
    msgs = []
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        for st in ((cs or {}).get("state") or {}, (cs or {}).get("lastState") or {}):
            for v in st.values():
                if isinstance(v, Mapping):
                    msgs.append(f"{v.get('reason', '')} {v.get('message', '')}")
    for cond in status.get("conditions") or []:
        msgs.append(str(cond.get("message") or ""))
    for ev in snap.events:
        inv = ev.get("involvedObject") or {}
        if inv.get("name") == meta.get("name") and inv.get("namespace") == meta.get("namespace"):
            msgs.append(str(ev.get("message") or ""))
    for key, text in snap.pod_logs.items():
        if key.startswith(f"{meta.get('namespace')}/{meta.get('name')}/"):
            msgs.append(text[-2000:])
    return msgs


@register("M09-node-exporter-port", "monitoring", title="node-exporter is not blocked by a port conflict",
          reads="Pods, Events, failing pods' logs", commands=BOTH, fixable=True, needs=("Pod",))  # fmt: skip
def node_exporter_port(snap: Snapshot) -> list[Finding]:
    out = []
    key, value = NODE_EXPORTER_LABEL
    for pod in snap.items("Pod"):
        if _labels(pod).get(key) != value and "node-exporter" not in str(_meta(pod).get("name", "")):
            continue
        msgs = _pod_messages(snap, pod)
        bind = next((m for m in msgs if "address already in use" in m), None)
        ports = next((m for m in msgs if "free ports" in m), None)
        hit = bind or ports
        if hit:
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            out.append(Finding("", "", "fail", f"node-exporter {_ref(pod)} cannot use its port (host node_exporter on 9100?)",
                               evidence=" ".join(hit.split())[:300], fix=NODE_EXPORTER_FIX, host=node or None))  # fmt: skip
    return out


def _number(value: Any) -> float | None:
    """A finite float, or None (missing or not a number, e.g. in a hand-edited snapshot)."""
    if isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


@register("M11-load-metrics-move", "monitoring", title="--load: Tensor Core activity rises under dcgmproftester",
          reads="verify --load results, Prometheus", commands=("verify",))  # fmt: skip
def load_metrics_move(snap: Snapshot) -> list[Finding]:
    rec = snap.workload.get("load")
    if not isinstance(rec, Mapping):
        return [Finding("", "", "skip", "load test not run (verify --load)")]
    before, during = rec.get("before"), rec.get("during")
    raw_pod = rec.get("pod")
    pod: Mapping[str, Any] = raw_pod if isinstance(raw_pod, Mapping) else {}
    lo, hi = _number(before) or 0.0, _number(during)
    if hi is None or hi < LOAD_MIN or hi <= lo:
        return [Finding("", "", "fail", "Tensor Core activity did not rise under load",
                        evidence=f"max DCGM_FI_PROF_PIPE_TENSOR_ACTIVE before={before} during={during}; load pod "
                                 f"phase={pod.get('phase')} {pod.get('reason', '')} {rec.get('error', '')}".strip(),
                        fix="gpustack doctor --check M08  # profiling metrics; check the load pod ran "
                            "(privileged, nvidia.com/gpu: 1)")]  # fmt: skip
    return []
