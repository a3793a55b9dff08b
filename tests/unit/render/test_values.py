"""Helm values rendering: golden files per variant, removed keys, decisions from facts."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.config.semantics import cluster_problems as config_problems
from gpustack.render.values import (
    ALERTMANAGER_SECRET,
    REMOVED_KEYS,
    FactsSummary,
    duration_ms,
    generate_password,
    key_paths,
    removed_keys_set,
    render_values,
    summarize_facts,
)
from tests.golden.golden import check_golden

STORAGE = {"prometheus_storage": {"storage_class": "local-path"}}
ALERTING = {
    "receivers": [
        {"type": "webhook", "name": "hook", "url": "https://hooks.example.com/am"},
        {"type": "slack", "name": "team-slack", "api_url_env": "SLACK_URL", "channel": "#gpu"},
        {"type": "pagerduty", "name": "oncall", "routing_key_file": "/etc/gpustack/pd-key"},
        {
            "type": "email",
            "name": "mail",
            "to": "ops@example.com",
            "from": "gpustack@example.com",
            "smarthost": "smtp.example.com:587",
            "auth_username": "gpustack",
            "auth_password_env": "SMTP_PASSWORD",
        },
    ],
    "routes": {"critical": ["oncall", "team-slack"], "warning": "team-slack", "info": ["mail", "hook"]},
}

SHARING_NODES: list[dict[str, Any]] = [
    {"name": "gpu-h100", "address": "10.0.0.21", "role": "control-plane",
     "gpu_sharing": {"mode": "mig", "profile": "all-1g.10gb"}},
    {"name": "gpu-l40s", "address": "10.0.0.22", "gpu_sharing": {"mode": "time-slicing", "replicas": 4}},
    {"name": "gpu-a10", "address": "10.0.0.23", "gpu_sharing": {"mode": "none"}},
    {"name": "gpu-a10-mps", "address": "10.0.0.24", "gpu_sharing": {"mode": "mps", "replicas": 4}},
]  # fmt: skip

CUSTOM_SHARING: dict[str, Any] = {
    "mig_layouts": {"infer-mix": [{"devices": "all", "mig-devices": {"1g.10gb": 4, "3g.40gb": 1}}]},
    "groups": {"inference": {"nodes": ["gpu-h100", "gpu-h100-2"],
                             "sharing": {"mode": "mig", "profile": "infer-mix", "replicas": 2, "rename": True}}},
}  # fmt: skip

VARIANTS: dict[str, tuple[dict[str, Any], FactsSummary]] = {
    "default": ({"monitoring": STORAGE}, FactsSummary(gpu_nodes=("gpu1",))),
    "preinstalled-driver": ({"monitoring": STORAGE}, FactsSummary(driver_preinstalled=True, gpu_nodes=("gpu1",))),
    "operator-exporter": ({"monitoring": STORAGE, "gpu": {"exporter": "operator"}}, FactsSummary()),
    "nodeports": (
        {"monitoring": {**STORAGE, "prometheus_nodeport": 30090, "grafana_nodeport": 30300}},
        FactsSummary(),
    ),
    "proxy": (
        {"monitoring": STORAGE, "proxy": {"http": "http://proxy:3128", "https": "http://proxy:3128"}},
        FactsSummary(),
    ),
    "host-node-exporter": (
        {"monitoring": {"prometheus_storage": {"ephemeral": True}}},
        FactsSummary(host_node_exporter=True),
    ),
    "alerting": ({"monitoring": STORAGE, "alerting": ALERTING}, FactsSummary()),
    # GPU sharing (docs/gpu-sharing.md): MIG (mixed, reboot allowed) and time-slicing with the standalone exporter;
    # MIG (single) and MPS with the operator's exporter
    "gpu-sharing": ({"monitoring": STORAGE, "gpu": {"mig_reboot": True}, "nodes": SHARING_NODES[:3]},
                    FactsSummary(gpu_nodes=("gpu-h100", "gpu-l40s"))),
    "gpu-sharing-operator": ({"monitoring": STORAGE, "gpu": {"exporter": "operator"},
                              "nodes": [SHARING_NODES[0], SHARING_NODES[3]]}, FactsSummary()),
    # a custom MIG layout time-sliced and renamed, given to two nodes by a group (gpustack-mig-config)
    "gpu-sharing-custom": ({"monitoring": STORAGE, "nodes": [SHARING_NODES[0], {"name": "gpu-h100-2", "address": "10.0.0.25"}],
                            "gpu_sharing": CUSTOM_SHARING}, FactsSummary(gpu_nodes=("gpu-h100", "gpu-h100-2"))),
}  # fmt: skip


def _render(variant: str) -> dict[str, dict[str, Any]]:
    raw, facts = VARIANTS[variant]
    return render_values(Config.model_validate(raw), facts)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_golden(variant: str) -> None:
    for release, values in _render(variant).items():
        check_golden(f"values/{variant}/{release}.yaml", values)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_no_removed_keys(variant: str) -> None:
    assert removed_keys_set(_render(variant)) == []


def test_removed_key_check_catches_default_runtime() -> None:
    bad = {"gpu-operator": {"operator": {"defaultRuntime": "containerd", "runtimeClass": "nvidia"}}}
    assert removed_keys_set(bad) == ["gpu-operator:operator.defaultRuntime"]
    assert "gpu-operator:operator.defaultRuntime" in REMOVED_KEYS


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_values_are_plain_data(variant: str) -> None:
    for values in _render(variant).values():
        assert yaml.safe_load(yaml.safe_dump(values)) == values


def test_all_selector_nil_uses_helm_values_false() -> None:
    spec = _render("default")["kube-prometheus-stack"]["prometheus"]["prometheusSpec"]
    nil = {k: v for k, v in spec.items() if k.endswith("SelectorNilUsesHelmValues")}
    assert nil == {
        f"{k}SelectorNilUsesHelmValues": False
        for k in ("serviceMonitor", "podMonitor", "rule", "probe", "scrapeConfig")
    }


def test_exporter_choice_never_runs_two_exporters() -> None:
    std = _render("default")
    assert set(std) == {"kube-prometheus-stack", "gpu-operator", "dcgm-exporter"}
    assert std["gpu-operator"]["dcgmExporter"] == {"enabled": False}
    op = _render("operator-exporter")
    assert "dcgm-exporter" not in op
    dcgm = op["gpu-operator"]["dcgmExporter"]
    assert dcgm["enabled"] is True and dcgm["serviceMonitor"]["enabled"] is False
    assert dcgm["config"]["name"] and dcgm["config"]["create"] is True
    assert dcgm["config"]["data"].startswith("# gpustack counters")


def test_standalone_exporter_values() -> None:
    v = _render("default")["dcgm-exporter"]
    assert v["runtimeClassName"] == "nvidia"
    assert v["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in v["tolerations"]
    assert v["resources"]["limits"]["memory"] == "1Gi"
    assert v["arguments"] == ["--collectors=/etc/dcgm-exporter/gpustack-counters.csv", "--collect-interval=15000"]
    assert v["serviceMonitor"]["enabled"] is False
    mount = v["extraVolumeMounts"][0]
    assert mount["mountPath"] == "/etc/dcgm-exporter/" + mount["subPath"]
    assert v["extraConfigMapVolumes"][0]["configMap"]["items"][0]["path"] == mount["subPath"]
    # the exporter image GPU Operator v26.7.0 ships, on the pinned chart (its repository stays the chart's)
    assert v["image"] == {"tag": "4.6.0-4.8.3-distroless"} == {"tag": pins.DCGM_EXPORTER_IMAGE_TAG["4.8.2"]}
    other = render_values(Config.model_validate({**VARIANTS["default"][0], "versions": {"dcgm_exporter": "4.9.0"}}),
                          VARIANTS["default"][1])["dcgm-exporter"]  # fmt: skip
    assert "image" not in other, "another chart keeps its own image"


@pytest.mark.parametrize(
    ("gpu", "facts", "driver", "toolkit", "nfd"),
    [
        ({}, FactsSummary(), True, True, True),
        ({}, FactsSummary(driver_preinstalled=True, toolkit_preinstalled=True, nfd_running=True), False, False, False),
        (
            {"driver": "operator", "toolkit": "operator", "nfd": "enabled"},
            FactsSummary(True, True, True),
            True,
            True,
            True,
        ),
        ({"driver": "preinstalled", "toolkit": "preinstalled", "nfd": "disabled"}, FactsSummary(), False, False, False),
    ],
)
def test_gpu_operator_components(
    gpu: dict[str, str], facts: FactsSummary, driver: bool, toolkit: bool, nfd: bool
) -> None:
    v = render_values(Config.model_validate({"gpu": gpu, "monitoring": STORAGE}), facts)["gpu-operator"]
    assert (v["driver"]["enabled"], v["toolkit"]["enabled"], v["nfd"]["enabled"]) == (driver, toolkit, nfd)
    assert v["operator"] == {"runtimeClass": "nvidia"} and v["cdi"] == {"enabled": True}


def test_node_exporter_moves_off_9100_only_when_taken() -> None:
    assert "prometheus-node-exporter" not in _render("default")["kube-prometheus-stack"]
    svc = _render("host-node-exporter")["kube-prometheus-stack"]["prometheus-node-exporter"]["service"]
    assert svc == {"port": 9101, "targetPort": 9101}


def test_clusterip_by_default_nodeports_when_asked() -> None:
    kps = _render("default")["kube-prometheus-stack"]
    assert kps["prometheus"]["service"] == {"type": "ClusterIP"}
    assert kps["grafana"]["service"] == {"type": "ClusterIP"}
    assert "service" not in kps["alertmanager"], "the chart's default: ClusterIP"
    kps = _render("nodeports")["kube-prometheus-stack"]
    assert kps["prometheus"]["service"] == {"type": "NodePort", "nodePort": 30090}
    assert kps["grafana"]["service"] == {"type": "NodePort", "nodePort": 30300}


def test_storage() -> None:
    spec = _render("default")["kube-prometheus-stack"]["prometheus"]["prometheusSpec"]
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "local-path" and claim["resources"]["requests"]["storage"] == "50Gi"
    assert spec["retention"] == "15d"
    eph = _render("host-node-exporter")["kube-prometheus-stack"]["prometheus"]["prometheusSpec"]
    assert eph["storageSpec"] == {"emptyDir": {}}


def test_proxy_leaks_into_no_values() -> None:
    assert _render("proxy") == _render("default") | {}  # images come through containerd's proxy
    text = yaml.safe_dump(_render("proxy"))
    assert "proxy:3128" not in text


def test_grafana_and_datasource() -> None:
    g = _render("default")["kube-prometheus-stack"]["grafana"]
    assert g["admin"]["existingSecret"] == "gpustack-grafana-admin"
    assert g["sidecar"]["datasources"]["isDefaultDatasource"] is True
    assert g["sidecar"]["dashboards"]["label"] == "grafana_dashboard"
    assert "dashboards" not in g
    gnet = render_values(
        Config.model_validate({"monitoring": {**STORAGE, "dashboard_gnet_download": True}}), FactsSummary()
    )["kube-prometheus-stack"]["grafana"]
    assert gnet["dashboards"]["grafana-com"]["nvidia-dcgm-exporter"]["gnetId"] == 12239
    assert [p["name"] for p in gnet["dashboardProviders"]["dashboardproviders.yaml"]["providers"]] == ["grafana-com"]


def test_alert_routing_tiers_and_no_secrets_in_values() -> None:
    kps = _render("alerting")["kube-prometheus-stack"]
    am = kps["alertmanager"]
    assert am["alertmanagerSpec"]["secrets"] == [ALERTMANAGER_SECRET]
    routes = am["config"]["route"]["routes"]
    assert routes[0] == {"receiver": "null", "matchers": ['alertname = "Watchdog"']}
    assert [(r["receiver"], r["matchers"][0]) for r in routes[1:]] == [
        ("oncall", 'severity = "critical"'),
        ("team-slack", 'severity = "critical"'),
        ("team-slack", 'severity = "warning"'),
        ("mail", 'severity = "info"'),
        ("hook", 'severity = "info"'),
    ]
    assert all(r["continue"] is True for r in routes[1:])
    receivers = {r["name"]: r for r in am["config"]["receivers"]}
    assert receivers["team-slack"]["slack_configs"][0]["api_url_file"].endswith("/team-slack.api_url")
    assert receivers["oncall"]["pagerduty_configs"][0]["routing_key_file"].endswith("/oncall.routing_key")
    assert receivers["mail"]["email_configs"][0]["auth_password_file"].endswith("/mail.auth_password")
    assert not any(p.endswith(("api_url", "routing_key", "auth_password")) for p in key_paths(kps))


def test_no_receivers_keeps_alerts_in_alertmanager() -> None:
    am = _render("default")["kube-prometheus-stack"]["alertmanager"]
    assert am["config"]["route"]["receiver"] == "null"
    assert am["config"]["receivers"] == [{"name": "null"}]
    assert am["alertmanagerSpec"]["secrets"] == []


def test_summarize_facts() -> None:
    facts = {
        "gpu1": {"nvidia_pci_devices": [{"slot": "0000:01:00.0"}], "nvidia_driver_version": "595.91.07"},
        "cpu1": {"nvidia_pci_devices": [], "nvidia_driver_version": "550.1", "node_exporter_on_9100": True},
    }
    s = summarize_facts(facts)
    assert s == FactsSummary(driver_preinstalled=True, host_node_exporter=True, gpu_nodes=("gpu1",))
    assert not summarize_facts(
        {"gpu1": {"nvidia_pci_devices": [{}], "nvidia_driver_version": None}}
    ).driver_preinstalled


def test_helpers() -> None:
    assert duration_ms("15s") == 15000 and duration_ms("1m") == 60000
    pw = generate_password()
    assert len(pw) == 24 and pw.isalnum() and pw != generate_password()


def test_config_problems() -> None:
    assert config_problems(Config.model_validate({"monitoring": STORAGE})) == []
    assert config_problems(Config()) == []  # default: gpustack's local volume
    (p,) = config_problems(
        Config.model_validate({"monitoring": {"prometheus_storage": {"storage_class": "x", "ephemeral": True}}})
    )
    assert p.path == ("monitoring", "prometheus_storage", "ephemeral")
    bad = Config.model_validate(
        {
            "monitoring": {**STORAGE, "prometheus_nodeport": 30090, "grafana_nodeport": 30090},
            "alerting": {
                "receivers": [{"type": "webhook", "name": "a", "url": "http://x"}] * 2,
                "routes": {"critical": ["nope"]},
            },
        }
    )
    paths = {p.path for p in config_problems(bad)}
    assert paths == {
        ("alerting", "receivers", 1, "name"),
        ("alerting", "routes", "critical", 0),
        ("monitoring", "grafana_nodeport"),
    }


def test_receiver_secret_sources_are_exclusive() -> None:
    with pytest.raises(ValueError, match="exactly one of api_url_file or api_url_env"):
        Config.model_validate({"alerting": {"receivers": [{"type": "slack", "name": "s", "channel": "#x"}]}})
    with pytest.raises(ValueError, match="Extra inputs"):
        Config.model_validate(
            {"alerting": {"receivers": [{"type": "slack", "name": "s", "channel": "#x", "api_url": "https://x"}]}}
        )


def test_default_storage_is_a_local_volume_on_the_control_plane() -> None:
    from gpustack.config.model import Node
    from gpustack.render.manifests import render_manifests

    cfg = Config(nodes=[Node(name="cp", address="10.0.0.1", role="control-plane"), Node(name="w", address="10.0.0.2")])
    prom = render_values(cfg, FactsSummary())["kube-prometheus-stack"]["prometheus"]["prometheusSpec"]
    claim = prom["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "gpustack-local" and claim["resources"]["requests"]["storage"] == "50Gi"
    assert {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"} in prom[
        "tolerations"
    ]
    sc, pv = render_manifests(cfg)["storage.yaml"]
    assert sc["kind"] == "StorageClass" and sc["volumeBindingMode"] == "WaitForFirstConsumer"
    assert (
        pv["spec"]["storageClassName"] == "gpustack-local"
        and pv["spec"]["local"]["path"] == "/var/lib/gpustack/prometheus"
    )
    terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert terms["values"] == ["cp"]


def test_named_storage_class_or_ephemeral_needs_no_local_volume() -> None:
    from gpustack.render.manifests import render_manifests

    for storage in ({"storage_class": "fast"}, {"ephemeral": True}):
        cfg = Config.model_validate({"monitoring": {"prometheus_storage": storage}})
        assert "storage.yaml" not in render_manifests(cfg)
        prom = render_values(cfg, FactsSummary())["kube-prometheus-stack"]["prometheus"]["prometheusSpec"]
        assert "tolerations" not in prom


def test_etcd_scraped_only_when_every_member_listens_beyond_loopback() -> None:
    """kubeEtcd follows the cluster fact (gpustack.cluster.layer.etcd_metrics_exposed); the chart 88.5.3's defaults
    (service port/targetPort 2381, serviceMonitor.scheme http) are kept and set where the values read them."""
    cfg = Config.model_validate({"monitoring": STORAGE})
    off = render_values(cfg, FactsSummary())["kube-prometheus-stack"]
    assert off["kubeEtcd"] == {"enabled": False}
    on = render_values(cfg, FactsSummary(etcd_metrics_exposed=True))["kube-prometheus-stack"]
    assert on["kubeEtcd"] == {
        "enabled": True,
        "service": {"port": 2381, "targetPort": 2381},
        "serviceMonitor": {"bearerTokenFile": ""},
    }
    assert summarize_facts({}, etcd_metrics_exposed=True).etcd_metrics_exposed is True
