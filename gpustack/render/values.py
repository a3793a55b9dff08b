"""Helm values for the cluster layer: ``values/<release>.yaml.j2`` rendered, then parsed to data. Pure.

``render_values(cfg, facts)`` returns ``{release: values dict}`` for ``gpu-operator``,
``kube-prometheus-stack`` and (when ``gpu.exporter`` is ``standalone``) ``dcgm-exporter``.
``render --out`` and ``up`` call the same function, so what is written is what is installed.
Every key the templates set is listed in ``values/README.md`` with the chart file it was checked in.

Secrets never appear in values: Grafana reads its admin password from a Secret
(``grafana.admin.existingSecret``) and Alertmanager reads receiver credentials from files mounted
from a Secret (``alertmanager.alertmanagerSpec.secrets``); see :mod:`gpustack.render.manifests`.
"""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import yaml

from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.config.monitoring import EmailReceiver, PagerDutyReceiver, Receiver, SlackReceiver, WebhookReceiver
from gpustack.constants import (
    ALERTMANAGER_SECRET,
    ALERTMANAGER_SECRET_DIR,
    GRAFANA_ADMIN_SECRET,
    LOCAL_STORAGE_CLASS,
    NODE_EXPORTER_ALT_PORT,
    NODE_EXPORTER_PORT,
    RELEASE_ORDER,
)
from gpustack.monitoring.ksm import SHARING_STRATEGY_LABEL, namespace_allowlist, node_allowlist
from gpustack.paths import resource_file
from gpustack.render.sharing import exporter_settings, operator_values
from gpustack.render.templating import environment

NULL_RECEIVER = "null"

# Keys that must never appear in rendered values: removed upstream, and silently ignored by charts
# without a values schema. (dotted path -> why)
REMOVED_KEYS: dict[str, str] = {
    "gpu-operator:operator.defaultRuntime": "removed in gpu-operator v25.3.0; use operator.runtimeClass / cdi.enabled",
    "gpu-operator:driver.useOpenKernelModules": "no-op since gpu-operator v25.3; use driver.kernelModuleType",
    "kube-prometheus-stack:grafana.adminPassword": "gpustack keeps the password in a Secret (admin.existingSecret)",
}

_DURATION = re.compile(r"^(?P<n>[0-9]+)(?P<unit>ms|s|m|h)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


@dataclass(frozen=True)
class FactsSummary:
    """What the cluster layer needs to know about the hosts (from preflight facts)."""

    driver_preinstalled: bool = False
    toolkit_preinstalled: bool = False
    nfd_running: bool = False
    host_node_exporter: bool = False
    #: every etcd mirror pod listens for metrics beyond loopback (gpustack.cluster.layer.etcd_metrics_exposed)
    etcd_metrics_exposed: bool = False
    gpu_nodes: tuple[str, ...] = field(default_factory=tuple)


def summarize_facts(
    host_facts: Mapping[str, Mapping[str, Any]], *, nfd_running: bool = False, etcd_metrics_exposed: bool = False
) -> FactsSummary:
    """Reduce per-host preflight facts (``gpustack_facts`` output, keyed by node name) to a :class:`FactsSummary`.

    A GPU node is one with NVIDIA PCI devices. The driver counts as preinstalled when any GPU node
    reports ``nvidia_driver_version``; the toolkit when any GPU node reports ``nvidia_container_toolkit``
    (a fact the collector may add; absent means "not preinstalled"). NFD and etcd's metrics address are cluster
    facts, passed in.
    """
    gpu_nodes = tuple(sorted(n for n, f in host_facts.items() if f.get("nvidia_pci_devices")))
    gpu_facts = [host_facts[n] for n in gpu_nodes]
    return FactsSummary(
        driver_preinstalled=any(bool(f.get("nvidia_driver_version")) for f in gpu_facts),
        toolkit_preinstalled=any(bool(f.get("nvidia_container_toolkit")) for f in gpu_facts),
        nfd_running=nfd_running,
        etcd_metrics_exposed=etcd_metrics_exposed,
        host_node_exporter=any(bool(f.get("node_exporter_on_9100")) for f in host_facts.values()),
        gpu_nodes=gpu_nodes,
    )


def generate_password(length: int = 24) -> str:
    """A random password (letters and digits, so it survives any shell, URL or YAML quoting)."""
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))


def duration_ms(duration: str) -> int:
    """``15s`` -> 15000. Accepts ms, s, m, h (what a scrape interval uses)."""
    match = _DURATION.match(duration)
    if not match:
        raise ValueError(f"not a duration in ms/s/m/h: {duration!r}")
    return int(match["n"]) * _UNIT_MS[match["unit"]]


def driver_enabled(cfg: Config, facts: FactsSummary) -> bool:
    """``driver.enabled`` for the GPU Operator: off when the hosts already have a driver."""
    if cfg.gpu.driver == "auto":
        return not facts.driver_preinstalled
    return cfg.gpu.driver == "operator"


def toolkit_enabled(cfg: Config, facts: FactsSummary) -> bool:
    """``toolkit.enabled`` for the GPU Operator: off when the hosts already have the toolkit."""
    if cfg.gpu.toolkit == "auto":
        return not facts.toolkit_preinstalled
    return cfg.gpu.toolkit == "operator"


def nfd_enabled(cfg: Config, facts: FactsSummary) -> bool:
    """``nfd.enabled``: the operator deploys NFD unless one already runs (or the user says otherwise)."""
    if cfg.gpu.nfd == "auto":
        return not facts.nfd_running
    return cfg.gpu.nfd == "enabled"


def releases(cfg: Config) -> tuple[str, ...]:
    """The Helm releases this config installs, CRD-owning release first."""
    return tuple(r for r in RELEASE_ORDER if r != "dcgm-exporter" or cfg.gpu.exporter == "standalone")


def secret_key(receiver: str, stem: str) -> str:
    """Key inside the Alertmanager Secret holding one receiver credential."""
    return f"{receiver}.{stem}"


def _receiver_config(rcv: Receiver) -> dict[str, Any]:
    path = f"{ALERTMANAGER_SECRET_DIR}/"
    if isinstance(rcv, WebhookReceiver):
        return {"name": rcv.name, "webhook_configs": [{"url": rcv.url, "send_resolved": True}]}
    if isinstance(rcv, SlackReceiver):
        slack = {
            "api_url_file": path + secret_key(rcv.name, "api_url"),
            "channel": rcv.channel,
            "send_resolved": True,
        }
        return {"name": rcv.name, "slack_configs": [slack]}
    if isinstance(rcv, PagerDutyReceiver):
        pd = {"routing_key_file": path + secret_key(rcv.name, "routing_key"), "send_resolved": True}
        return {"name": rcv.name, "pagerduty_configs": [pd]}
    assert isinstance(rcv, EmailReceiver)
    email: dict[str, Any] = {
        "to": rcv.to,
        "from": rcv.from_,
        "smarthost": rcv.smarthost,
        "require_tls": rcv.require_tls,
        "send_resolved": True,
    }
    if rcv.auth_username is not None:
        email["auth_username"] = rcv.auth_username
        email["auth_password_file"] = path + secret_key(rcv.name, "auth_password")
    return {"name": rcv.name, "email_configs": [email]}


def alertmanager_config(cfg: Config) -> dict[str, Any]:
    """The whole Alertmanager config (``alertmanager.config``): severity tiers routed to receivers.

    Watchdog (the always-firing heartbeat) and anything unrouted go to the ``null`` receiver, so
    with no receivers configured every alert is still visible in Alertmanager's UI. A severity with
    several receivers gets one route per receiver with ``continue: true`` so each is notified.
    """
    routes: list[dict[str, Any]] = [{"receiver": NULL_RECEIVER, "matchers": ['alertname = "Watchdog"']}]
    repeat = {"critical": "1h", "warning": "4h", "info": "24h"}
    for severity in ("critical", "warning", "info"):
        for name in getattr(cfg.alerting.routes, severity):
            routes.append(
                {
                    "receiver": name,
                    "matchers": [f'severity = "{severity}"'],
                    "repeat_interval": repeat[severity],
                    "continue": True,
                }
            )
    return {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": NULL_RECEIVER,
            "group_by": ["alertname", "node"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "12h",
            "routes": routes,
        },
        "inhibit_rules": [
            {
                "source_matchers": ['severity = "critical"'],
                "target_matchers": ['severity =~ "warning|info"'],
                "equal": ["alertname", "node"],
            },
            {
                "source_matchers": ['severity = "warning"'],
                "target_matchers": ['severity = "info"'],
                "equal": ["alertname", "node"],
            },
        ],
        "receivers": [{"name": NULL_RECEIVER}, *(_receiver_config(r) for r in cfg.alerting.receivers)],
        "templates": ["/etc/alertmanager/config/*.tmpl"],
    }


def alertmanager_needs_secret(cfg: Config) -> bool:
    """True when some receiver reads a credential from the Alertmanager Secret."""
    return any(not isinstance(r, WebhookReceiver) and _has_secret(r) for r in cfg.alerting.receivers)


def _has_secret(rcv: Receiver) -> bool:
    return not isinstance(rcv, EmailReceiver) or rcv.auth_username is not None


def _counters_csv() -> str:
    return resource_file("values", "dcgm-counters.csv").read_text(encoding="utf-8")


def uses_local_storage(cfg: Config) -> bool:
    """No StorageClass named and no emptyDir opt-in: gpustack's own local PersistentVolume."""
    storage = cfg.monitoring.prometheus_storage
    return not storage.ephemeral and not storage.storage_class


def storage_class(cfg: Config) -> str | None:
    storage = cfg.monitoring.prometheus_storage
    if storage.ephemeral:
        return None
    return storage.storage_class or LOCAL_STORAGE_CLASS


def template_context(cfg: Config, facts: FactsSummary) -> dict[str, Any]:
    """Everything the values templates read, decided here (templates only lay it out)."""
    mon = cfg.monitoring
    return {
        "prometheus_nodeport": mon.prometheus_nodeport,
        "grafana_nodeport": mon.grafana_nodeport,
        "alertmanager_nodeport": mon.alertmanager_nodeport,
        "scrape_interval": mon.scrape_interval,
        "retention": mon.prometheus_retention,
        "storage": mon.prometheus_storage,
        "storage_class": storage_class(cfg),
        "local_storage": uses_local_storage(cfg),
        "grafana_secret": GRAFANA_ADMIN_SECRET,
        "gnet_download": mon.dashboard_gnet_download,
        "alertmanager_config": alertmanager_config(cfg),
        "alertmanager_secrets": [ALERTMANAGER_SECRET] if alertmanager_needs_secret(cfg) else [],
        "node_exporter_port": NODE_EXPORTER_ALT_PORT if facts.host_node_exporter else NODE_EXPORTER_PORT,
        "driver_enabled": driver_enabled(cfg, facts),
        "toolkit_enabled": toolkit_enabled(cfg, facts),
        "nfd_enabled": nfd_enabled(cfg, facts),
        "etcd_scrape": facts.etcd_metrics_exposed,
        "operator_exporter": cfg.gpu.exporter == "operator",
        "counters_csv": _counters_csv(),
        "dcgm_exporter_image_tag": pins.DCGM_EXPORTER_IMAGE_TAG.get(cfg.versions.dcgm_exporter, ""),
        "prometheus_image_tag": pins.PROMETHEUS_IMAGE_TAG.get(cfg.versions.kube_prometheus_stack, ""),
        "collect_interval_ms": duration_ms(mon.scrape_interval),
        "ksm_labels_allowlist": namespace_allowlist(mon.team_label)
        + node_allowlist([SHARING_STRATEGY_LABEL] if exporter_settings(cfg).virtual_gpus else []),
        "sharing": operator_values(cfg),
        "exporter": exporter_settings(cfg),
    }


def render_values_text(release: str, context: Mapping[str, Any]) -> str:
    """The values template of one release, rendered (YAML text)."""
    return environment("values").get_template(f"{release}.yaml.j2").render(**context)


def render_values(cfg: Config, facts: FactsSummary) -> dict[str, dict[str, Any]]:
    """``{release: values}`` for every release this config installs, in install order."""
    context = template_context(cfg, facts)
    out: dict[str, dict[str, Any]] = {}
    for release in releases(cfg):
        data = yaml.safe_load(render_values_text(release, context))
        if not isinstance(data, dict):
            raise ValueError(f"values/{release}.yaml.j2 did not render to a mapping")
        out[release] = cast(dict[str, Any], data)
    return out


def key_paths(values: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Every dotted key path in a values dict (leaves and intermediate maps)."""
    out: list[str] = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        out.append(path)
        if isinstance(value, Mapping):
            out += key_paths(value, path + ".")
    return out


def removed_keys_set(rendered: Mapping[str, Mapping[str, Any]], removed: Sequence[str] | None = None) -> list[str]:
    """``release:key.path`` entries of :data:`REMOVED_KEYS` present in rendered values (should be empty)."""
    wanted = set(removed if removed is not None else REMOVED_KEYS)
    return sorted(f"{rel}:{p}" for rel, vals in rendered.items() for p in key_paths(vals) if f"{rel}:{p}" in wanted)
