"""Manifests: schema validation (core kinds with kubernetes-validate, CRD kinds with a derived schema),
the ServiceMonitor against the Services the charts really render, secrets."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpustack.config.model import Config
from gpustack.errors import ConfigError
from gpustack.monitoring.rules import EXPORTER_JOB, load_rules
from gpustack.render.manifests import read_alert_secrets, render_manifests, render_secrets, scrape_timeout
from gpustack.render.values import FactsSummary, render_values
from tests.golden.golden import GOLDEN_DIR

K8S_VERSION = (
    "1.36.0" if "1.36.0" in kubernetes_validate.utils.all_versions() else kubernetes_validate.utils.latest_version()
)
SERVICES = yaml.safe_load((GOLDEN_DIR / "upstream" / "dcgm-exporter-services.yaml").read_text())
STD = Config.model_validate({"monitoring": {"prometheus_storage": {"ephemeral": True}}})
OP = Config.model_validate({"monitoring": {"prometheus_storage": {"ephemeral": True}}, "gpu": {"exporter": "operator"}})

# The fields gpustack uses of the monitoring.coreos.com/v1 CRDs (prometheus-operator v0.93 API):
# key -> type, or a nested schema. Anything not listed is an error, so a typo cannot pass.
_RELABEL = {"sourceLabels": list, "targetLabel": str, "replacement": str, "action": str, "regex": str, "separator": str}
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": {
        "namespaceSelector": {"matchNames": list, "any": bool},
        "selector": {"matchLabels": dict},
        "jobLabel": str,
        "endpoints": [
            {
                "port": str,
                "path": str,
                "interval": str,
                "scrapeTimeout": str,
                "honorLabels": bool,
                "relabelings": [_RELABEL],
                "metricRelabelings": [_RELABEL],
            }
        ],
    },
    "PrometheusRule": {
        "groups": [
            {
                "name": str,
                "interval": str,
                "rules": [{"alert": str, "record": str, "expr": str, "for": str, "labels": dict, "annotations": dict}],
            }
        ]
    },
}


def _check_schema(value: Any, schema: Any, path: str) -> list[str]:
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return [f"{path}: expected a mapping"]
        errs = [f"{path}.{k}: unknown field" for k in value if k not in schema]
        for k, sub in schema.items():
            if k in value:
                errs += _check_schema(value[k], sub, f"{path}.{k}")
        return errs
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        return [e for i, item in enumerate(value) for e in _check_schema(item, schema[0], f"{path}[{i}]")]
    return [] if isinstance(value, schema) else [f"{path}: expected {schema.__name__}, got {type(value).__name__}"]


def _all_objects(cfg: Config) -> list[dict[str, Any]]:
    objs = [o for objs in render_manifests(cfg).values() for o in objs]
    return objs + render_secrets(cfg, "pw", {"a.api_url": "https://hooks.slack.com/x"})


@pytest.mark.parametrize("cfg", [STD, OP], ids=["standalone", "operator"])
def test_every_object_validates(cfg: Config) -> None:
    for obj in _all_objects(cfg):
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            assert obj["apiVersion"] == "monitoring.coreos.com/v1"
            assert _check_schema(obj["spec"], CRD_SCHEMAS[obj["kind"]], "spec") == []
            assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_schema_check_catches_typos() -> None:
    bad = {"endpoints": [{"port": "metrics", "intervall": "15s", "relabelings": [{"target_label": "x"}]}]}
    errs = _check_schema(bad, CRD_SCHEMAS["ServiceMonitor"], "spec")
    assert "spec.endpoints[0].intervall: unknown field" in errs
    assert "spec.endpoints[0].relabelings[0].target_label: unknown field" in errs


@pytest.mark.parametrize(("cfg", "which"), [(STD, "standalone"), (OP, "operator")])
def test_service_monitor_selects_the_chart_service(cfg: Config, which: str) -> None:
    svc = SERVICES[which]
    (sm,) = render_manifests(cfg)["dcgm-exporter.servicemonitor.yaml"]
    spec = sm["spec"]
    assert svc["metadata"]["namespace"] in spec["namespaceSelector"]["matchNames"]
    assert spec["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert spec["selector"]["matchLabels"]
    port_names = {p["name"] for p in svc["spec"]["ports"]}
    assert [e["port"] for e in spec["endpoints"]] == [next(iter(port_names))]
    other = SERVICES["operator" if which == "standalone" else "standalone"]
    assert not spec["selector"]["matchLabels"].items() <= other["metadata"]["labels"].items()


def test_standalone_service_name_matches_values_release() -> None:
    # The chart names the Service after the release ("dcgm-exporter") in the namespace gpustack installs it to.
    from gpustack.constants import NAMESPACES

    assert SERVICES["standalone"]["metadata"]["namespace"] == NAMESPACES["dcgm-exporter"]
    assert "dcgm-exporter" in render_values(STD, FactsSummary())


def test_service_monitor_labels_job_and_node_for_the_rules() -> None:
    (sm,) = render_manifests(STD)["dcgm-exporter.servicemonitor.yaml"]
    (ep,) = sm["spec"]["endpoints"]
    assert ep["interval"] == "15s" and ep["honorLabels"] is False
    relabel = {r["targetLabel"]: r for r in ep["relabelings"]}
    assert relabel["node"]["sourceLabels"] == ["__meta_kubernetes_pod_node_name"]
    assert relabel["job"]["replacement"] == EXPORTER_JOB
    rules_text = json.dumps(load_rules())
    assert f'up{{job=\\"{EXPORTER_JOB}\\"}}' in rules_text
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_scrape_timeout_never_exceeds_interval() -> None:
    assert scrape_timeout("15s") == "10s" and scrape_timeout("5s") == "5s"


def test_prometheus_rule_and_dashboard() -> None:
    m = render_manifests(STD)
    (rule,) = m["gpu-alerts.prometheusrule.yaml"]
    assert rule["spec"]["groups"] == load_rules()["groups"]
    (cm,) = m["grafana-dashboard.configmap.yaml"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dash = json.loads(cm["data"]["gpustack-dcgm.json"])
    assert dash["panels"]
    assert len(json.dumps(cm)) < 262144  # ConfigMap/annotation-size headroom


def test_manifests_are_secret_free_and_namespaced() -> None:
    for name, objs in render_manifests(STD).items():
        for o in objs:
            assert o["kind"] != "Secret", name
            assert o["kind"] == "Namespace" or o["metadata"]["namespace"]


def test_secrets(tmp_path: Path) -> None:
    key = tmp_path / "pd"
    key.write_text("routing-key-123\n")
    cfg = Config.model_validate(
        {
            "alerting": {
                "receivers": [
                    {"type": "pagerduty", "name": "oncall", "routing_key_file": str(key)},
                    {"type": "slack", "name": "chat", "api_url_env": "SLACK_URL", "channel": "#gpu"},
                    {"type": "webhook", "name": "hook", "url": "https://x"},
                ]
            }
        }
    )
    secrets = read_alert_secrets(cfg, {"SLACK_URL": "https://hooks.slack.com/services/T/B/X"})
    assert secrets == {
        "oncall.routing_key": "routing-key-123",
        "chat.api_url": "https://hooks.slack.com/services/T/B/X",
    }
    objs = render_secrets(cfg, "s3cret", secrets)
    assert [o["metadata"]["name"] for o in objs] == ["gpustack-grafana-admin", "gpustack-alertmanager"]
    assert base64.b64decode(objs[0]["data"]["admin-password"]).decode() == "s3cret"
    assert base64.b64decode(objs[0]["data"]["admin-user"]).decode() == "admin"
    for o in objs:
        kubernetes_validate.validate(o, K8S_VERSION, strict=True)
    with pytest.raises(ConfigError, match=r"alerting.receivers.1.api_url: environment variable SLACK_URL"):
        read_alert_secrets(cfg, {})
    key.unlink()
    with pytest.raises(ConfigError, match=r"receivers\[0\].routing_key_file: cannot read"):
        read_alert_secrets(cfg, {"SLACK_URL": "x"})
