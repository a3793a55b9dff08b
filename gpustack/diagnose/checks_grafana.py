"""Grafana checks (R01..R05): healthy (``/api/health``, no login), Prometheus datasource present and answering,
gpustack's DCGM and "GPU capacity and cost" dashboards present, their panels returning data through Grafana,
and gpustack able to log in (credentials from the state file or the Secret Grafana's Deployment references).
Pure functions of the snapshot."""

from __future__ import annotations

from datetime import datetime, timezone

from gpustack.checks.certs import parse_iso
from gpustack.checks.model import Finding
from gpustack.constants import GRAFANA_ADMIN_SECRET, GRAFANA_SERVICE, MONITORING_NAMESPACE, VERIFY_NAMESPACE
from gpustack.diagnose.checks_monitoring import cluster_gpu_models, profiling_unsupported
from gpustack.diagnose.collect_grafana import (
    CAPACITY_PREFIX,
    CAPACITY_UID,
    DASHBOARD_UID,
    dashboard_uid,
    prometheus_datasource,
)
from gpustack.diagnose.objects import GPU_RESOURCE_PREFIXES
from gpustack.diagnose.registry import register
from gpustack.diagnose.sharing import mig_on
from gpustack.diagnose.snapshot import Obj, Snapshot
from gpustack.monitoring import gpu_models
from gpustack.monitoring.dashboard import CAPACITY_DASHBOARD_FILE, DASHBOARD_FILE
from gpustack.monitoring.panels import ALWAYS_MAY_BE_EMPTY, Meaning, panel_fields, titles
from gpustack.monitoring.rules import usage_rules_interval_s
from gpustack.report.inputs import format_duration
from gpustack.report.queries import GROUP as USAGE_GROUP

BOTH = ("doctor", "verify")
GRAFANA_LOGS = "kubectl -n monitoring logs deploy/kube-prometheus-stack-grafana -c grafana --tail=50"
#: How many usage-rule evaluation intervals a GPU pod may run before its per-pod panels must have data (issue 32
#: item 4): its first activity sample needs dcgm-exporter's collection (the pod-resources lookup happens per
#: collection, every scrape interval: values/dcgm-exporter.yaml.j2), Prometheus' scrape (the scrape interval, at
#: most 1m: config/monitoring.py) and the rule group's evaluation (every 1m: gpu-usage.rules.yaml), each up to one
#: interval after the one before.
GRACE_INTERVALS = 3


def gpu_pods(snap: Snapshot, settled_s: float = 0) -> list[str]:
    """``namespace/name`` of the Running pods holding GPUs (a container's ``nvidia.com/gpu*`` or ``nvidia.com/mig-*``
    limit or request;
    verify's own test pods left out: they come and go while the panels are read). ``settled_s``: only those whose
    containers have run for at least that long when collection started (a pod without start times counts)."""
    out = []
    now = parse_iso(snap.collected_at) or datetime.now(timezone.utc)
    for pod in snap.items("Pod"):
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if meta.get("namespace") == VERIFY_NAMESPACE or (pod.get("status") or {}).get("phase") != "Running":
            continue
        if settled_s and _running_s(pod, now) < settled_s:
            continue
        for c in spec.get("containers") or []:
            res = (c or {}).get("resources") or {}
            amounts = [a for k in ("limits", "requests") for r, a in ((res.get(k) or {}).items())
                       if str(r).startswith(GPU_RESOURCE_PREFIXES)]  # whole or shared GPUs, MIG devices  # fmt: skip
            if any(str(a or "0") not in ("0", "") for a in amounts):
                out.append(f"{meta.get('namespace')}/{meta.get('name')}")
                break
    return sorted(out)


def _running_s(pod: Obj, now: datetime) -> float:
    """Seconds since the pod's last container started running (``status.containerStatuses[].state.running
    .startedAt``, else the pod's ``status.startTime``); infinite when it reports neither."""
    status = pod.get("status") or {}
    starts = [parse_iso((((c or {}).get("state") or {}).get("running") or {}).get("startedAt"))
              for c in status.get("containerStatuses") or []]  # fmt: skip
    known = [t for t in starts if t is not None] or [t for t in [parse_iso(status.get("startTime"))] if t is not None]
    return (now - max(known)).total_seconds() if known else float("inf")


def settle_s(snap: Snapshot | None = None) -> float:
    """How long a GPU pod runs before R04 expects its per-pod panels: :data:`GRACE_INTERVALS` evaluation intervals of
    the usage rules, as Prometheus reports the loaded group's (``/api/v1/rules`` ``interval``, seconds), else as
    gpustack ships it (1m)."""
    loaded = [g.get("interval") for g in (snap.prometheus.rule_groups if snap else []) if g.get("name") == USAGE_GROUP]
    seconds = next((float(i) for i in loaded if isinstance(i, (int, float)) and i > 0), None)
    return GRACE_INTERVALS * (seconds or usage_rules_interval_s())


def _titles(meanings: set[Meaning]) -> set[str]:
    """Both dashboards' panel titles (as in ``panel_results``: the capacity one's with :data:`CAPACITY_PREFIX`)
    whose "No data" means one of ``meanings`` (``dashboards/empty-panels.yaml``)."""
    capacity = titles(CAPACITY_DASHBOARD_FILE, meanings)
    return titles(DASHBOARD_FILE, meanings) | {CAPACITY_PREFIX + t for t in capacity}


def allowed_empty(snap: Snapshot) -> set[str]:
    """Panels whose "No data" is healthy on this cluster, from what each panel means: lists of problems and idle
    GPUs' activity always; per-pod and allocation panels while no pod has held a GPU for :func:`settle_s` (when
    the pods could not be read -- K00 says why -- no pod is known to hold one); profiling panels on GPUs DCGM cannot
    profile (M08)."""
    healthy_empty: set[Meaning] = set(ALWAYS_MAY_BE_EMPTY)
    if not gpu_pods(snap, settle_s(snap)):
        healthy_empty.add("gpu-pods")
    if profiling_unsupported(snap):
        healthy_empty.add("profiling")
    mig, whole = mig_nodes(snap)
    if not mig:  # MIG instance panels: empty only where no node has MIG on
        healthy_empty.add("mig")
    if mig and not whole:  # GPU_UTIL is not reported per MIG instance: empty when every GPU node is MIG
        healthy_empty.add("whole-gpu")
    return _titles(healthy_empty) | set(unreported_panels(snap))


def unreported_panels(snap: Snapshot) -> dict[str, str]:
    """DCGM dashboard panels none of whose DCGM fields any GPU model of the cluster reports (memory temperature on
    GeForce, T4 and L4, NVLink on PCIe-only GPUs, row remapping on Turing and GeForce: gpustack/monitoring/
    gpu_models.py), each with why; {} when the models are not known."""
    models = cluster_gpu_models(snap)
    if not models:
        return {}
    return {title: why for title, fields in panel_fields().items() if (why := gpu_models.unreported(fields, models))}


def mig_nodes(snap: Snapshot) -> tuple[list[str], list[str]]:
    """(GPU nodes with MIG on, GPU nodes without), from the nodes' labels (``nvidia.com/mig.config``)."""
    mig: list[str] = []
    whole: list[str] = []
    for node in snap.items("Node"):
        labels = (node.get("metadata") or {}).get("labels") or {}
        if not isinstance(labels, dict) or str(labels.get("nvidia.com/gpu.present")) != "true":
            continue
        name = str((node.get("metadata") or {}).get("name") or "")
        (mig if mig_on(labels) else whole).append(name)
    return mig, whole


@register("R01-grafana-healthy", "grafana", title="Grafana answers and its database is ok",
          reads="Grafana /api/health", commands=BOTH)  # fmt: skip
def grafana_healthy(snap: Snapshot) -> list[Finding]:
    if not snap.grafana.reachable:
        return [Finding("", "", "fail", "Grafana could not be reached",
                        evidence=snap.errors.get("grafana", "not queried"),
                        fix="kubectl -n monitoring get pods -l app.kubernetes.io/name=grafana; " + GRAFANA_LOGS)]  # fmt: skip
    if "grafana" in snap.errors:  # answered /api/health, then an API call failed (not on the login: R05)
        return [Finding("", "", "fail", "Grafana API calls failed", evidence=snap.errors["grafana"], fix=GRAFANA_LOGS)]
    db = str(snap.grafana.health.get("database", ""))
    if db and db != "ok":
        return [Finding("", "", "fail", f"Grafana database is {db!r}", evidence=str(snap.grafana.health),
                        fix=GRAFANA_LOGS)]  # fmt: skip
    return []


@register("R02-prometheus-datasource", "grafana", title="the Prometheus datasource exists and answers queries",
          reads="Grafana /api/datasources, /api/ds/query", commands=BOTH, needs=("grafana",))  # fmt: skip
def prometheus_datasource_works(snap: Snapshot) -> list[Finding]:
    ds = prometheus_datasource(snap.grafana.datasources)
    fix = ("kube-prometheus-stack provisions it (grafana.sidecar.datasources.defaultDatasourceEnabled, uid "
           "prometheus): gpustack up --only cluster; then kubectl -n monitoring rollout restart "
           "deploy/kube-prometheus-stack-grafana")  # fmt: skip
    if ds is None:
        have = ", ".join(f"{d.get('name')} ({d.get('type')})" for d in snap.grafana.datasources) or "none"
        return [Finding("", "", "fail", "no Prometheus datasource in Grafana", evidence=f"datasources: {have}",
                        fix=fix)]  # fmt: skip
    probe = snap.grafana.probe(ds)
    if not probe.get("ok"):
        return [Finding("", "", "fail", f"datasource {ds.get('name')!r} does not answer queries",
                        evidence=f"url {ds.get('url')}: {probe.get('error') or 'no series for vector(1)'}",
                        fix="the URL must reach Prometheus in-cluster: http://kube-prometheus-stack-prometheus."
                            "monitoring:9090/ ; " + GRAFANA_LOGS)]  # fmt: skip
    return []


@register("R03-dcgm-dashboard", "grafana", title="gpustack's DCGM and capacity dashboards are loaded",
          reads="Grafana /api/search (the dashboard API's list where it is gone)", commands=BOTH,
          needs=("grafana",))  # fmt: skip
def dcgm_dashboard(snap: Snapshot) -> list[Finding]:
    loaded = {d.get("uid") for d in snap.grafana.dashboards}
    missing = [uid for uid in (dashboard_uid(), CAPACITY_UID) if uid not in loaded]
    if missing:
        titles = ", ".join(str(d.get("title")) for d in snap.grafana.dashboards[:8]) or "none"
        return [Finding("", "", "fail", f"dashboard uid {' and '.join(missing)} is not loaded",
                        evidence=f"{len(snap.grafana.dashboards)} dashboards: {titles}",
                        fix="kubectl -n monitoring get configmap -l grafana_dashboard=1; gpustack up --only cluster "
                            "# re-applies the dashboard ConfigMaps; kubectl -n monitoring logs "
                            "deploy/kube-prometheus-stack-grafana -c grafana-sc-dashboard --tail=50")]  # fmt: skip
    return []


@register("R04-panels-have-data", "grafana", title="the DCGM and capacity dashboards' panels return data",
          reads="Grafana /api/dashboards/uid (a v2 dashboard: /apis/dashboard.grafana.app v1beta1), /api/ds/query for "
                "every panel; dashboards/empty-panels.yaml; the GPU models (gpu_models.py); pods holding GPUs",
          commands=BOTH, needs=("grafana",))  # fmt: skip
def panels_have_data(snap: Snapshot) -> list[Finding]:
    uid = dashboard_uid() or DASHBOARD_UID
    loaded = {d.get("uid") for d in snap.grafana.dashboards}
    if uid not in loaded and CAPACITY_UID not in loaded:
        return [Finding("", "", "skip", "dashboard not loaded (see R03)")]
    dcgm = {t: n for t, n in snap.grafana.panel_results.items() if not t.startswith(CAPACITY_PREFIX)}
    capacity = {t: n for t, n in snap.grafana.panel_results.items() if t.startswith(CAPACITY_PREFIX)}
    out: list[Finding] = []
    if uid in loaded:
        out += _panel_findings(snap, uid, dcgm, "the dashboard's panels could not be queried")
    if CAPACITY_UID in loaded:
        rules = (snap.grafana.panel_errors.get(CAPACITY_UID) or {}).get("(rules)")
        if rules:
            out.append(Finding("", "", "warn", "capacity dashboard not checked: gpustack's usage recording rules "
                               "have no data yet", evidence=rules,
                               fix="they are evaluated once a minute after Prometheus loads them: gpustack verify "
                                   "--check R04 in a minute; M05 says whether the group is loaded"))  # fmt: skip
        else:
            out += _panel_findings(snap, CAPACITY_UID, capacity, "the capacity dashboard's panels could not be queried")
    return out


def _panel_findings(snap: Snapshot, uid: str, results: dict[str, int], unqueried: str) -> list[Finding]:
    if not results:
        errors = snap.grafana.panel_errors.get(uid) or {}
        if errors:
            return [
                Finding(
                    "",
                    "",
                    "fail",
                    unqueried,
                    evidence="; ".join(f"{k}: {v}" for k, v in list(errors.items())[:3]),
                    fix=GRAFANA_LOGS,
                )
            ]
        return [Finding("", "", "skip", "no panel was queried (no Prometheus datasource, see R02)")]
    allowed = allowed_empty(snap)
    empty = sorted(t for t, n in results.items() if n == 0 and t not in allowed)
    failed = sorted(t for t, n in results.items() if n < 0)
    out = []
    if empty:
        fix = ("gpustack doctor --layer monitoring  # panels read DCGM_FI_* with a node label: "
               "M04 (metrics), M08 (profiling panels: Tensor Core, Engine Activity)") if uid != CAPACITY_UID else (
               "gpustack doctor --layer monitoring  # capacity panels read gpustack's usage recording rules (M05) "
               "and kube-state-metrics")  # fmt: skip
        evidence = "; ".join(empty)
        per_pod = [t for t in empty if t in _titles({"gpu-pods"})]
        if per_pod:
            pods = gpu_pods(snap)
            evidence += f" -- about pods holding GPUs, and {len(pods)} do: {', '.join(pods[:3])}"
            fix += ("; per-pod series need dcgm-exporter's Kubernetes mapping (kubelet pod-resources socket); a pod "
                    f"is expected there {format_duration(settle_s(snap))} after it starts (a collection, scrape and rule evaluation)")  # fmt: skip
        out.append(Finding("", "", "fail", f"{len(empty)} of {len(results)} panels show \"No data\"",
                           evidence=evidence, fix=fix))  # fmt: skip
    if failed:
        errors = snap.grafana.panel_errors.get(uid) or {}
        out.append(
            Finding(
                "",
                "",
                "fail",
                f"{len(failed)} panel queries failed in Grafana",
                evidence="; ".join(f"{t}: {errors.get(t, '?')}" for t in failed[:4]),
                fix=GRAFANA_LOGS,
            )
        )
    excused = unreported_panels(snap) if uid != CAPACITY_UID and not out else {}
    empty_excused = sorted(t for t, n in results.items() if n == 0 and t in excused)
    if empty_excused:  # a pass that says which panels stay empty, and why
        out.append(Finding("", "", "pass", f"{len(results) - len(empty_excused)} of {len(results)} panels checked; "
                           f"{len(empty_excused)} empty because no GPU model of the cluster reports their fields",
                           evidence="; ".join(f"{t}: {excused[t]}" for t in empty_excused)))  # fmt: skip
    return out


def _reset_password_fix(login: Obj) -> str:
    """Grafana keeps the admin password it first started with in its database: a Secret (or state file) changed
    later no longer matches. The fix sets Grafana's password to the one gpustack reads."""
    ns, _, name = str(login.get("deployment") or f"{MONITORING_NAMESPACE}/{GRAFANA_SERVICE}").partition("/")
    if login.get("file"):
        value = f'"$(cat {login["file"]})"'
    elif login.get("secret"):
        sns, _, sname = str(login["secret"]).partition("/")
        value = f"\"$(kubectl -n {sns} get secret {sname} -o jsonpath='{{.data.{login.get('key')}}}' | base64 -d)\""
    else:
        value = "'<the password gpustack uses>'"
    return f"kubectl -n {ns} exec deploy/{name} -c grafana -- grafana cli admin reset-admin-password {value}"


@register("R05-grafana-login", "grafana", title="gpustack logs in to Grafana (credentials from the state or the cluster)",
          reads="state file, Grafana Deployment env -> Secret, Grafana /login", commands=BOTH)  # fmt: skip
def grafana_login(snap: Snapshot) -> list[Finding]:
    login = snap.grafana.login
    if not snap.grafana.reachable:
        return [Finding("", "", "skip", "Grafana not reached (see R01-grafana-healthy)")]
    state = str(login.get("state") or "")
    if state == "ok":
        return []
    detail = str(login.get("detail") or snap.errors.get("grafana:login") or "no login attempted")
    deployment, secret = str(login.get("deployment") or ""), str(login.get("secret") or "")
    ns, _, name = (deployment or f"{MONITORING_NAMESPACE}/{GRAFANA_SERVICE}").partition("/")
    show_env = (f"kubectl -n {ns} get deploy {name} -o jsonpath='{{.spec.template.spec.containers[?(@.name==\"grafana\")]"
                ".env}'")  # fmt: skip
    if state == "refused":
        return [Finding("", "", "fail", f"Grafana refused the admin credentials from {login.get('source')}",
                        evidence=detail, fix=_reset_password_fix(login))]  # fmt: skip
    if state in ("secret-missing", "secret-key-missing"):
        sns, _, sname = secret.partition("/")
        fix = (f"gpustack up --only cluster   (recreates {secret})" if sname == GRAFANA_ADMIN_SECRET
               else f"kubectl -n {sns} get secret {sname}; recreate it with the keys {show_env} references")  # fmt: skip
        return [Finding("", "", "fail", f"the Secret Grafana's Deployment {deployment} references for its admin "
                        "password is missing or incomplete", evidence=detail, fix=fix)]  # fmt: skip
    if state == "secret-forbidden":
        sns, _, sname = secret.partition("/")
        return [Finding("", "", "fail", f"the kubeconfig's user may not read Secret {secret} (Grafana's admin "
                        "password)", evidence=detail,
                        fix=f"kubectl auth can-i get secret/{sname} -n {sns}   # use a kubeconfig that may (an admin's), "
                            f"or grant get on that one Secret: kubectl -n {sns} create role grafana-admin-reader "
                            f"--verb=get --resource=secrets --resource-name={sname}")]  # fmt: skip
    if state == "no-deployment":
        return [Finding("", "", "fail", "no Grafana admin credentials: no state file for this cluster and no Grafana "
                        "Deployment to read them from", evidence=detail,
                        fix="kubectl get deploy -A -l app.kubernetes.io/name=grafana   # gpustack reads the Secret its "
                            "GF_SECURITY_ADMIN_PASSWORD references")]  # fmt: skip
    return [Finding("", "", "fail", f"Grafana's admin password cannot be read from Deployment {deployment or '?'}",
                    evidence=detail,
                    fix=f"{show_env}   # give GF_SECURITY_ADMIN_PASSWORD from a Secret (Grafana chart: "
                        "admin.existingSecret, admin.userKey, admin.passwordKey)")]  # fmt: skip
