"""Kubernetes objects the cluster layer applies after the Helm releases. Pure (secrets aside).

``render_manifests(cfg, facts)`` -> ``{file name: [objects]}``: namespaces, the dcgm-exporter
ServiceMonitor, the GPU PrometheusRule and the Grafana dashboard ConfigMap, then the usage recording rules'
PrometheusRule and the "GPU capacity and cost" dashboard ConfigMap; with time-slicing or MPS the device plugin's
ConfigMap (``gpu-sharing.yaml``, :mod:`gpustack.render.sharing`). ``render --out`` writes
these files; ``up`` applies them with server-side apply.

Secrets are separate (:func:`render_secrets`) so ``render --out`` never writes a credential to disk:
the Grafana admin Secret (``grafana.admin.existingSecret``) and the Alertmanager Secret whose keys
Alertmanager reads as files (``*_file`` fields in ``alertmanager.config``, mounted through
``alertmanager.alertmanagerSpec.secrets``). Credentials are read from the files/env variables named in
``alerting.receivers`` at render time only.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml

from gpustack.config.model import Config
from gpustack.config.monitoring import EmailReceiver, PagerDutyReceiver, SlackReceiver
from gpustack.constants import (
    ALERTMANAGER_SECRET,
    GPU_NAMESPACE,
    GRAFANA_ADMIN_SECRET,
    LOCAL_STORAGE_CLASS,
    LOCAL_STORAGE_PATH,
    MONITORING_NAMESPACE,
)
from gpustack.errors import ConfigError
from gpustack.monitoring.dashboard import load_capacity_dashboard, load_dashboard
from gpustack.monitoring.rules import load_usage_rules, prometheus_rule
from gpustack.render.mig_config import mig_configmap
from gpustack.render.sharing import device_plugin_configmap
from gpustack.render.templating import render_template
from gpustack.render.values import (
    FactsSummary,
    duration_ms,
    secret_key,
    uses_local_storage,
)

Obj = dict[str, Any]
#: the device-plugin ConfigMap (time-slicing / MPS), applied before the releases that mount it
SHARING_FILE = "gpu-sharing.yaml"
PART_OF = {"app.kubernetes.io/part-of": "gpustack"}


@dataclass(frozen=True)
class ExporterTarget:
    """The dcgm-exporter Service a ServiceMonitor must match (labels, namespace, port name)."""

    namespace: str
    labels: Mapping[str, str]
    port: str
    service: str
    source: str


# Verified against the charts' own templates (see values/README.md):
EXPORTER_TARGETS: dict[str, ExporterTarget] = {
    # dcgm-exporter chart 4.8.2, release "dcgm-exporter": templates/service.yaml (port name "metrics",
    # labels from "dcgm-exporter.labels"), _helpers.tpl selectorLabels (name/instance/component).
    "standalone": ExporterTarget(
        namespace=GPU_NAMESPACE,
        labels={"app.kubernetes.io/name": "dcgm-exporter", "app.kubernetes.io/instance": "dcgm-exporter"},
        port="metrics",
        service="dcgm-exporter",
        source="NVIDIA/dcgm-exporter deployment/templates/service.yaml + _helpers.tpl (chart 4.8.2)",
    ),
    # GPU Operator v26.7.0 assets/state-dcgm-exporter/0400_service.yaml.
    "operator": ExporterTarget(
        namespace=GPU_NAMESPACE,
        labels={"app": "nvidia-dcgm-exporter"},
        port="gpu-metrics",
        service="nvidia-dcgm-exporter",
        source="NVIDIA/gpu-operator assets/state-dcgm-exporter/0400_service.yaml (v26.7.0)",
    ),
}


def _yaml_objects(text: str) -> list[Obj]:
    return [cast(Obj, d) for d in yaml.safe_load_all(text) if d]


def exporter_target(cfg: Config) -> ExporterTarget:
    """Where the dcgm-exporter Service lives for ``gpu.exporter``."""
    return EXPORTER_TARGETS[cfg.gpu.exporter]


def scrape_timeout(interval: str) -> str:
    """10s, or the interval itself when shorter (Prometheus requires timeout <= interval)."""
    return "10s" if duration_ms(interval) >= 10_000 else interval


def namespaces() -> list[Obj]:
    """The namespaces gpustack installs into."""
    text = render_template(
        "manifests/namespaces.yaml.j2",
        namespaces=sorted({MONITORING_NAMESPACE, GPU_NAMESPACE}),
        gpu_namespace=GPU_NAMESPACE,
        monitoring_namespace=MONITORING_NAMESPACE,
    )
    return _yaml_objects(text)


def service_monitor(cfg: Config) -> Obj:
    """The dcgm-exporter ServiceMonitor (job ``dcgm-exporter``, ``node`` label from the pod's node)."""
    text = render_template(
        "manifests/dcgm-exporter.servicemonitor.yaml.j2",
        namespace=MONITORING_NAMESPACE,
        target=exporter_target(cfg),
        interval=cfg.monitoring.scrape_interval,
        timeout=scrape_timeout(cfg.monitoring.scrape_interval),
    )
    return _yaml_objects(text)[0]


def dashboard_configmap() -> Obj:
    """The dashboard ConfigMap the Grafana sidecar loads (label ``grafana_dashboard: "1"``)."""
    dashboard = json.dumps(load_dashboard(), indent=1, sort_keys=False)
    text = render_template(
        "manifests/grafana-dashboard.configmap.yaml.j2", namespace=MONITORING_NAMESPACE, dashboard_json=dashboard
    )
    return _yaml_objects(text)[0]


def capacity_dashboard_configmap(cfg: Config) -> Obj:
    """The "GPU capacity and cost" dashboard ConfigMap (same sidecar label), grouped by ``monitoring.team_label``."""
    dashboard = json.dumps(load_capacity_dashboard(cfg.monitoring.team_label), indent=1, sort_keys=False)
    text = render_template(
        "manifests/grafana-capacity-dashboard.configmap.yaml.j2",
        namespace=MONITORING_NAMESPACE,
        dashboard_json=dashboard,
    )
    return _yaml_objects(text)[0]


def usage_prometheus_rule() -> Obj:
    """The usage recording rules (group ``gpustack-usage.rules``) as their own PrometheusRule."""
    return prometheus_rule(
        name="gpustack-gpu-usage",
        namespace=MONITORING_NAMESPACE,
        labels={"release": "kube-prometheus-stack"},
        rules=load_usage_rules(),
    )


def local_storage(cfg: Config) -> list[Obj]:
    """StorageClass + a local PersistentVolume on the control-plane node for Prometheus' TSDB
    (the default: kubeadm clusters have no StorageClass; the directory is made by the
    control-plane stage). Retain: deleting the claim keeps the data."""
    if not uses_local_storage(cfg):
        return []
    text = render_template(
        "manifests/local-storage.yaml.j2",
        storage_class=LOCAL_STORAGE_CLASS,
        path=LOCAL_STORAGE_PATH,
        size=cfg.monitoring.prometheus_storage.size,
        node=cfg.control_plane.name,
    )
    return _yaml_objects(text)


def describe_all(objects: list[Obj]) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" for o in objects]


def render_manifests(cfg: Config, facts: FactsSummary | None = None) -> dict[str, list[Obj]]:
    """``{file name: objects}`` applied after the releases (no secrets; see :func:`render_secrets`).

    ``facts`` is accepted for symmetry with :func:`gpustack.render.values.render_values`; nothing
    here depends on it yet.
    """
    del facts
    out = {
        "namespaces.yaml": namespaces(),
        "dcgm-exporter.servicemonitor.yaml": [service_monitor(cfg)],
        "gpu-alerts.prometheusrule.yaml": [
            prometheus_rule(namespace=MONITORING_NAMESPACE, labels={"release": "kube-prometheus-stack"})
        ],
        "grafana-dashboard.configmap.yaml": [dashboard_configmap()],
        "gpu-usage.prometheusrule.yaml": [usage_prometheus_rule()],
        "grafana-capacity-dashboard.configmap.yaml": [capacity_dashboard_configmap(cfg)],
    }
    storage = local_storage(cfg)
    if storage:
        out["storage.yaml"] = storage
    plugin_config = device_plugin_configmap(cfg)  # time-slicing / MPS: the device plugin's configurations
    mig_config = mig_configmap(cfg)  # custom MIG layouts: gpustack's mig-parted configuration
    sharing = [o for o in (plugin_config, mig_config) if o is not None]
    if sharing:
        out[SHARING_FILE] = sharing
    from gpustack.health.manifests import FILE as HEALTH_FILE
    from gpustack.health.manifests import health_manifests

    health = health_manifests(cfg)  # remediation.enabled: the scheduled GPU health evaluation
    if health:
        out[HEALTH_FILE] = health
    return out


# --- secrets ---------------------------------------------------------------------------------------


def _read_one(receiver_index: int, stem: str, file_: Path | None, env: str | None, environ: Mapping[str, str]) -> str:
    where = ("alerting", "receivers", receiver_index)
    if file_ is not None:
        path = file_.expanduser()
        try:
            value = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                f"alerting.receivers[{receiver_index}].{stem}_file: cannot read {str(path)!r}: {exc.strerror}",
                hint="create the file (mode 0600) or use the *_env form",
            ) from None
        source = f"file {str(path)!r}"
    else:
        assert env is not None
        value = environ.get(env, "").strip()
        source = f"environment variable {env}"
    if not value:
        raise ConfigError(
            f"{'.'.join(map(str, where))}.{stem}: {source} is empty or unset",
            hint="secrets are read when gpustack renders the cluster layer; set it before running",
        )
    return value


def read_alert_secrets(cfg: Config, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Receiver credentials from their files / env variables, keyed as in the Alertmanager Secret."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for i, rcv in enumerate(cfg.alerting.receivers):
        if isinstance(rcv, SlackReceiver):
            out[secret_key(rcv.name, "api_url")] = _read_one(i, "api_url", rcv.api_url_file, rcv.api_url_env, env)
        elif isinstance(rcv, PagerDutyReceiver):
            out[secret_key(rcv.name, "routing_key")] = _read_one(
                i, "routing_key", rcv.routing_key_file, rcv.routing_key_env, env
            )
        elif isinstance(rcv, EmailReceiver) and rcv.auth_username is not None:
            out[secret_key(rcv.name, "auth_password")] = _read_one(
                i, "auth_password", rcv.auth_password_file, rcv.auth_password_env, env
            )
    return out


def secret(name: str, namespace: str, data: Mapping[str, str]) -> Obj:
    """An Opaque Secret (values base64-encoded in ``data``, as the API server stores them)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(PART_OF)},
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(data.items())},
    }


def render_secrets(cfg: Config, grafana_password: str, alert_secrets: Mapping[str, str]) -> list[Obj]:
    """The Grafana admin Secret, and the Alertmanager Secret when a receiver needs a credential."""
    out = [
        secret(
            GRAFANA_ADMIN_SECRET,
            MONITORING_NAMESPACE,
            {"admin-user": cfg.monitoring.grafana_admin_user, "admin-password": grafana_password},
        )
    ]
    if alert_secrets:
        out.append(secret(ALERTMANAGER_SECRET, MONITORING_NAMESPACE, alert_secrets))
    return out
