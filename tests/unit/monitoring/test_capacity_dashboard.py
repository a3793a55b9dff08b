"""dashboards/gpu-capacity.json ("GPU capacity and cost"): provisionable, reads gpustack's usage recording
rules (and kube-state-metrics), converts recorded minutes to GPU-hours with the rules' own interval."""

from __future__ import annotations

import json
import re

from gpustack.config.model import Config
from gpustack.monitoring.dashboard import (
    DATASOURCE_VAR,
    concretize,
    data_panels,
    datasource_refs,
    iter_panels,
    load_capacity_dashboard,
    panel_queries,
    template_variables,
    variable_values,
)
from gpustack.monitoring.rules import load_usage_rules, record_rules
from gpustack.render.manifests import capacity_dashboard_configmap, render_manifests

DASH = load_capacity_dashboard()
RECORDED = {str(r["record"]) for r in record_rules()}
KSM = {"kube_node_status_allocatable", "kube_namespace_labels"}
EPHEMERAL = {"prometheus_storage": {"ephemeral": True}}


def test_identity_and_provisioning() -> None:
    assert DASH["uid"] == "gpustack-capacity" and DASH["title"] == "GPU capacity and cost (gpustack)"
    assert DASH["id"] is None and "__inputs" not in DASH and DASH["time"]["from"] == "now-30d"
    refs = datasource_refs(DASH)
    assert refs and all(r == {"type": "prometheus", "uid": DATASOURCE_VAR} for _, r in refs)


def test_panels_read_the_recording_rules() -> None:
    used: set[str] = set()
    for title, expr in panel_queries(DASH):
        names = set(re.findall(r"gpustack:[a-z_]+:[a-z_]+", expr))
        assert names <= RECORDED, (title, names - RECORDED)
        others = set(re.findall(r"\b(kube_\w+|DCGM_\w+)", expr))
        assert others <= KSM, (title, others)
        assert names or others, title
        used |= names
    # every recorded series is shown somewhere, or read by another rule (the shares of shared GPUs, the activity)
    read_by_rules = {n for r in record_rules() for n in re.findall(r"gpustack:[a-z_]+:[a-z_]+", str(r["expr"]))}
    assert used <= RECORDED and RECORDED - used <= read_by_rules
    assert {"gpustack:gpu_used:ratio", "gpustack:gpu_idle:share", "gpustack:gpu_allocated:sum"} <= used


def test_gpu_hours_use_the_rules_interval() -> None:
    [group] = load_usage_rules()["groups"]
    assert group["interval"] == "1m"  # one recorded sample a minute: GPU-hours = sum_over_time / 60
    for title, expr in panel_queries(DASH):
        if "sum_over_time(" in expr and "bucket" not in expr:
            assert "/ 60" in expr, title


def test_variables() -> None:
    names = [v["name"] for v in template_variables(DASH)]
    assert names == ["datasource", "team_label", "price"]
    assert variable_values(DASH) == {"team_label": "label_team", "price": "1"}
    team = load_capacity_dashboard("example.com/owner")
    assert variable_values(team)["team_label"] == "label_example_com_owner"
    by_team = next(e for t, e in panel_queries(team) if t == "GPU-hours allocated by team")
    assert "sum by (label_example_com_owner)" in concretize(by_team, variable_values(team))


def test_layout_ids_unique_and_within_grid() -> None:
    panels = list(iter_panels(DASH))
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        own = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not own & cells, f"{p['title']} overlaps another panel"
        cells |= own
    assert all(p.get("description") for p in data_panels(DASH))


def test_configmap_for_the_sidecar_with_the_configured_team_label() -> None:
    cfg = Config.model_validate({"monitoring": {"team_label": "example.com/owner", **EPHEMERAL}})
    cm = capacity_dashboard_configmap(cfg)
    assert cm["metadata"]["name"] == "gpustack-capacity-dashboard"
    assert cm["metadata"]["namespace"] == "monitoring" and cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    model = json.loads(cm["data"]["gpustack-capacity.json"])
    assert variable_values(model)["team_label"] == "label_example_com_owner"
    assert len(json.dumps(cm)) < 262144
    std = Config.model_validate({"monitoring": EPHEMERAL})
    manifests = render_manifests(std)
    [rule] = manifests["gpu-usage.prometheusrule.yaml"]
    assert rule["metadata"]["name"] == "gpustack-gpu-usage" and rule["metadata"]["labels"]["release"]
    assert rule["spec"]["groups"] == load_usage_rules()["groups"]
    assert manifests["grafana-capacity-dashboard.configmap.yaml"] == [capacity_dashboard_configmap(std)]
