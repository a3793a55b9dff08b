"""The cluster-layer engine: everything after ``kubeadm`` has a working API server.

Steps, in order (each timed, each idempotent):

1. ``namespaces`` - server-side apply of the namespaces gpustack installs into;
2. ``secrets``    - Grafana admin Secret (password generated once, kept 0600 in the state dir) and the
   Alertmanager receiver Secret; they exist before the releases that mount them;
3. ``releases``   - Helm: kube-prometheus-stack first (it owns the monitoring CRDs), then the GPU
   Operator and dcgm-exporter concurrently; unchanged releases are not touched;
4. ``crds``       - wait until the ServiceMonitor/PrometheusRule CRDs are established;
5. ``manifests``  - server-side apply of the ServiceMonitor, the PrometheusRules (alerts, usage recording
   rules) and the dashboard ConfigMaps (DCGM, GPU capacity and cost);
6. ``gpu-sharing`` - each node's ``gpu_sharing`` as GPU Operator node labels; a MIG change drains the node's GPU
   pods first and waits for the MIG manager (:mod:`gpustack.cluster.sharing`).

"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.constants import GPU_NAMESPACE, NAMESPACES
from gpustack.paths import ensure_private_dir, grafana_password_path, write_file
from gpustack.render import manifests as mf
from gpustack.render.values import FactsSummary, generate_password, render_values
from gpustack.runners.helm import Helm, ReleaseResult, ReleaseSpec
from gpustack.runners.kube import Kube
from gpustack.runners.kubeconfig import kube_from_file

MONITORING_CRDS = ("servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com")
RELEASE_TIMEOUTS = {"kube-prometheus-stack": "10m", "gpu-operator": "15m", "dcgm-exporter": "10m"}
#: applied before the releases (namespaces, the volume Prometheus' claim binds to, the device-plugin ConfigMap the
#: GPU Operator mounts: without it the device plugin's pods stay ContainerCreating)
FIRST_FILES = ("namespaces.yaml", "storage.yaml", mf.SHARING_FILE)

Status = Literal["changed", "unchanged"]


@dataclass
class StepSummary:
    """One cluster-layer step: what happened and how long it took."""

    step: str
    status: Status = "unchanged"
    seconds: float = 0.0
    detail: str = ""
    releases: list[ReleaseResult] = field(default_factory=list)


def access_lines(cfg: Config) -> list[str]:
    """Where to reach the monitoring stack: a NodePort on the control plane's address where one is
    configured (reachable from the nodes and ``firewall.admin_cidrs`` only), else ``kubectl port-forward``
    through the API server (the default: Prometheus, Grafana and Alertmanager are not exposed)."""
    host, mon = cfg.control_plane.address, cfg.monitoring
    login = f"(user {mon.grafana_admin_user}; password: gpustack grafana-password)"
    forward = "kubectl -n monitoring port-forward svc/kube-prometheus-stack"
    lines = [
        f"Prometheus:   http://{host}:{mon.prometheus_nodeport}"
        if mon.prometheus_nodeport
        else f"Prometheus:   {forward}-prometheus 9090   (then http://localhost:9090)",
        f"Grafana:      http://{host}:{mon.grafana_nodeport}  {login}"
        if mon.grafana_nodeport
        else f"Grafana:      {forward}-grafana 3000:80   (then http://localhost:3000 {login})",
        f"Alertmanager: http://{host}:{mon.alertmanager_nodeport}"
        if mon.alertmanager_nodeport
        else f"Alertmanager: {forward}-alertmanager 9093   (then http://localhost:9093)",
    ]
    if mon.nodeports and cfg.firewall.enabled:
        admins = ", ".join(str(c) for c in cfg.firewall.admin_cidrs) or "none set"
        lines.append(f"NodePorts answer the cluster's nodes and firewall.admin_cidrs only ({admins})")
    return lines


# --- cluster facts ------------------------------------------------------------------------------------


def foreign_nfd_running(kube: Kube) -> bool:
    """Node Feature Discovery installed by someone else (outside gpustack's gpu-operator namespace):
    the GPU Operator must then not deploy a second one (nfd.enabled=false)."""
    if kube.resource("apps/v1", "DaemonSet") is None:
        return False
    for obj in kube.list_objects("apps/v1", "DaemonSet"):
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        name = str(labels.get("app.kubernetes.io/name") or meta.get("name") or "")
        if ("node-feature-discovery" in name or name.startswith("nfd-")) and meta.get("namespace") != GPU_NAMESPACE:
            return True
    return False


def etcd_metrics_exposed(kube: Kube) -> bool:
    """Every etcd of the cluster serves its metrics beyond loopback, read from the etcd mirror pods in kube-system
    (kubeadm labels its static pods ``component: <name>``: ``util/staticpod`` ``ComponentPod``). Only then does
    kube-prometheus-stack scrape etcd (``kubeEtcd.enabled``): a cluster whose etcd kubeadm made before gpustack set
    ``listen-metrics-urls`` (``up`` does not re-apply the kubeadm configuration) would otherwise get targets that are
    down and the ``etcdMembersDown`` alert. No etcd mirror pod (an external or managed etcd): False."""
    if kube.resource("v1", "Pod") is None:
        return False
    pods = kube.list_objects("v1", "Pod", "kube-system", label_selector="component=etcd")
    return bool(pods) and all(metrics_beyond_loopback(_command(pod)) for pod in pods)


def _command(pod: Mapping[str, Any]) -> list[str]:
    containers = (pod.get("spec") or {}).get("containers") or []
    etcd = next((c for c in containers if c.get("name") == "etcd"), containers[0] if containers else {})
    return [str(a) for a in [*(etcd.get("command") or []), *(etcd.get("args") or [])]]


def metrics_beyond_loopback(argv: list[str]) -> bool:
    """etcd's ``--listen-metrics-urls`` names an address other than loopback (kubeadm's default is
    ``http://127.0.0.1:2381`` only; absent: etcd serves metrics on its client URLs, which need a client
    certificate)."""
    values = [a.partition("=")[2] for a in argv if a.startswith("--listen-metrics-urls=")]
    for url in (u.strip() for v in values for u in v.split(",")):
        host = urlsplit(url).hostname or ""
        if host and host != "localhost" and not _loopback(host):
            return True
    return False


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost: etcd binds what it resolves to


# --- state ------------------------------------------------------------------------------------------


def grafana_password(cfg: Config, root: Path | None = None, *, generate: Callable[[], str] = generate_password) -> str:
    """The Grafana admin password: read from the state dir, or generated once and stored with mode 0600."""
    path = grafana_password_path(cfg.cluster.name, root)
    if path.is_file():
        value = path.read_text(encoding="utf-8").strip()
        if value:
            return value
    ensure_private_dir(path.parent)
    value = generate()
    write_file(path, value + "\n")
    return value


# --- releases ----------------------------------------------------------------------------------------


def release_specs(
    cfg: Config, values: Mapping[str, dict[str, Any]], charts: Mapping[str, Path] | None = None
) -> list[ReleaseSpec]:
    """Helm release specs in install order, chart versions from ``versions:`` (default: the pin table);
    ``charts``: chart archives to install from instead of the repositories (``up --bundle``)."""
    versions = {
        "gpu-operator": cfg.versions.gpu_operator,
        "kube-prometheus-stack": cfg.versions.kube_prometheus_stack,
        "dcgm-exporter": cfg.versions.dcgm_exporter,
    }
    return [
        ReleaseSpec(
            release=name,
            chart=pins.CHARTS[name].name,
            repo=cfg.sources.chart_repos.get(name, pins.CHARTS[name].repo),
            version=versions[name],
            namespace=NAMESPACES[name],
            values=vals,
            timeout=RELEASE_TIMEOUTS[name],
            archive=(charts or {}).get(name),
        )
        for name, vals in values.items()
    ]


def _release_status(results: list[ReleaseResult]) -> Status:
    return "unchanged" if all(r.action == "unchanged" and not r.repaired for r in results) else "changed"


def _release_detail(results: list[ReleaseResult]) -> str:
    parts = []
    for r in results:
        extra = f", {r.repaired}" if r.repaired else ""
        parts.append(f"{r.release} {r.action} (rev {r.revision}{extra})")
    return "; ".join(parts)


# --- engine ------------------------------------------------------------------------------------------


@contextmanager
def _step(summaries: list[StepSummary], name: str, console: Console) -> Iterator[StepSummary]:
    summary = StepSummary(name)
    console.debug(f"cluster: {name} ...")
    start = time.monotonic()
    try:
        yield summary
    finally:
        summary.seconds = time.monotonic() - start
        summaries.append(summary)
    console.info(
        f"cluster: {name} {summary.status} in {summary.seconds:.1f}s{' - ' + summary.detail if summary.detail else ''}"
    )


def _applied_changes(kube_before: list[dict[str, Any] | None], after: list[dict[str, Any]]) -> int:
    """How many applied objects changed (new object or new resourceVersion)."""
    changed = 0
    for old, new in zip(kube_before, after, strict=True):
        old_rv = ((old or {}).get("metadata") or {}).get("resourceVersion")
        new_rv = (new.get("metadata") or {}).get("resourceVersion")
        changed += old_rv != new_rv
    return changed


def _apply_counted(kube: Kube, objects: list[dict[str, Any]]) -> int:
    before = [
        kube.get(o["apiVersion"], o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in objects
    ]
    return _applied_changes(before, kube.apply(objects))


def run_cluster_layer(
    cfg: Config,
    kubeconfig: Path,
    facts: FactsSummary,
    console: Console,
    *,
    helm: Helm | None = None,
    kube: Kube | None = None,
    state_root: Path | None = None,
    environ: Mapping[str, str] | None = None,
    crd_timeout: float = 300.0,
    charts: Mapping[str, Path] | None = None,
    sharing: Mapping[str, Any] | None = None,
) -> list[StepSummary]:
    """Install/converge the cluster layer; returns one :class:`StepSummary` per step, in order. ``sharing``:
    keyword arguments for :func:`gpustack.cluster.sharing.converge_sharing` (tests: timeouts, clock)."""
    helm = helm or Helm(kubeconfig)
    kube = kube or kube_from_file(kubeconfig)
    values = render_values(cfg, facts)
    manifests = mf.render_manifests(cfg, facts)
    alert_secrets = mf.read_alert_secrets(cfg, environ)  # fail on a missing secret before changing anything
    summaries: list[StepSummary] = []

    with _step(summaries, "namespaces", console) as s:
        first = [o for name in FIRST_FILES for o in manifests.get(name, [])]
        n = _apply_counted(kube, first)
        s.status, s.detail = ("changed" if n else "unchanged"), ", ".join(mf.describe_all(first))

    with _step(summaries, "secrets", console) as s:
        secrets = mf.render_secrets(cfg, grafana_password(cfg, state_root), alert_secrets)
        n = _apply_counted(kube, secrets)
        s.status, s.detail = ("changed" if n else "unchanged"), ", ".join(o["metadata"]["name"] for o in secrets)

    with _step(summaries, "releases", console) as s:
        results = helm.ensure_releases(release_specs(cfg, values, charts))
        s.releases = results
        s.status, s.detail = _release_status(results), _release_detail(results)

    with _step(summaries, "crds", console) as s:
        kube.wait_for_crds(MONITORING_CRDS, time.monotonic() + crd_timeout, interval=0.5)
        s.detail = f"{len(MONITORING_CRDS)} established"

    with _step(summaries, "manifests", console) as s:
        objects = [o for name, objs in manifests.items() if name not in FIRST_FILES for o in objs]
        n = _apply_counted(kube, objects)
        s.status, s.detail = ("changed" if n else "unchanged"), f"{n}/{len(objects)} objects changed"
        if not cfg.remediation.enabled:
            from gpustack.health.manifests import remove_when_disabled

            if remove_when_disabled(kube):  # remediation switched off since the last run
                s.status, s.detail = "changed", s.detail + "; GPU health CronJob removed (remediation disabled)"

    with _step(summaries, "gpu-sharing", console) as s:
        from gpustack.cluster.sharing import converge_sharing

        shared = converge_sharing(cfg, kube, progress=lambda line: console.info(f"cluster: gpu-sharing: {line}"),
                                  gpu_nodes=facts.gpu_nodes, **dict(sharing or {}))  # fmt: skip
        s.status, s.detail = ("changed" if shared.changed else "unchanged"), shared.detail()

    return summaries
