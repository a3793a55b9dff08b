"""dashboards/12239.json: provisionable from a file, modern panels, right units, node-keyed variables."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpustack.monitoring.dashboard import (
    DATASOURCE_VAR,
    concretize,
    data_panels,
    datasource_refs,
    iter_panels,
    load_dashboard,
    panel_queries,
    parse_label_values,
    template_variables,
    variable_queries,
)

DASH = load_dashboard()
PANELS = {p["title"]: p for p in data_panels(DASH)}
# dashboard 12239's panels: title -> (metric, unit, panel type)
ORIGINAL_12239 = {
    "GPU Temperature": ("DCGM_FI_DEV_GPU_TEMP", "celsius", "timeseries"),
    "GPU Avg. Temp": ("DCGM_FI_DEV_GPU_TEMP", "celsius", "gauge"),
    "GPU Power Usage": ("DCGM_FI_DEV_POWER_USAGE", "watt", "timeseries"),
    "GPU Power Total": ("DCGM_FI_DEV_POWER_USAGE", "watt", "gauge"),
    "GPU SM Clocks": ("DCGM_FI_DEV_SM_CLOCK", "hertz", "timeseries"),
    "GPU Utilization": ("DCGM_FI_DEV_GPU_UTIL", "percent", "timeseries"),
    "GPU Framebuffer Mem Used": ("DCGM_FI_DEV_FB_USED", "mbytes", "timeseries"),
    "Tensor Core Utilization": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "percentunit", "timeseries"),
}
ADDED = {
    "Framebuffer Used %": "DCGM_FI_DEV_FB_FREE",
    "Engine Activity": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "GPU Utilisation per Pod": "exported_pod",
    "XID Errors (last XID per GPU)": "DCGM_FI_DEV_XID_ERRORS",
    "Row Remaps": "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "PCIe Replays": "rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
}


def _exprs(panel: dict[str, Any]) -> list[str]:
    return [t["expr"] for t in panel["targets"]]


def test_identity() -> None:
    assert DASH["uid"] == "gpustack-dcgm"
    assert "gpustack" in DASH["title"] and "gpustack" in DASH["tags"]
    assert DASH["schemaVersion"] >= 39
    assert DASH["id"] is None


def test_provisionable_without_import_inputs() -> None:
    assert "__inputs" not in DASH and "__requires" not in DASH
    assert "DS_PROMETHEUS" not in str(DASH)


def test_every_datasource_is_the_template_variable() -> None:
    refs = datasource_refs(DASH)
    assert len(refs) > len(PANELS)
    wrong = [(where, ds) for where, ds in refs if ds != {"type": "prometheus", "uid": DATASOURCE_VAR}]
    assert not wrong


def test_datasource_variable() -> None:
    [ds] = [v for v in template_variables(DASH) if v["name"] == "datasource"]
    assert (ds["type"], ds["query"]) == ("datasource", "prometheus")


def test_no_deprecated_panels() -> None:
    types = {p["type"] for p in iter_panels(DASH)}
    assert "graph" not in types and "singlestat" not in types
    assert types <= {"row", "timeseries", "gauge", "stat", "table"}


@pytest.mark.parametrize(("title", "spec"), ORIGINAL_12239.items())
def test_original_12239_panels_with_units(title: str, spec: tuple[str, str, str]) -> None:
    metric, unit, kind = spec
    panel = PANELS[title]
    assert panel["type"] == kind
    assert panel["fieldConfig"]["defaults"]["unit"] == unit
    assert any(metric in e for e in _exprs(panel))


def test_framebuffer_is_mebibytes_and_clocks_are_scaled_to_hertz() -> None:
    assert PANELS["GPU Framebuffer Mem Used"]["fieldConfig"]["defaults"]["unit"] == "mbytes"  # MiB, not SI MB
    assert all(e.endswith("* 1000000") for e in _exprs(PANELS["GPU SM Clocks"]))
    assert "avg(" in _exprs(PANELS["GPU Avg. Temp"])[0] and "sum(" in _exprs(PANELS["GPU Power Total"])[0]


def test_avg_temperature_gauge_thresholds() -> None:
    steps = PANELS["GPU Avg. Temp"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps] == [None, 83, 87]


@pytest.mark.parametrize(("title", "needle"), ADDED.items())
def test_added_panels(title: str, needle: str) -> None:
    assert any(needle in e for e in _exprs(PANELS[title]))


def test_problem_tables_are_instant_tables() -> None:
    for title in ("XID Errors (last XID per GPU)", "Row Remaps", "GPU Inventory"):
        panel = PANELS[title]
        assert panel["type"] == "table"
        assert all(t.get("format") == "table" and t.get("instant") for t in panel["targets"])
    assert "!= 0" in _exprs(PANELS["XID Errors (last XID per GPU)"])[0]


def test_no_rate_on_nvlink_gauge() -> None:
    assert not any("rate(" in e for e in _exprs(PANELS["NVLink Throughput"]))


def test_node_variable_and_chained_variables() -> None:
    queries = dict(variable_queries(DASH))
    assert queries["node"] == "label_values(DCGM_FI_DEV_GPU_TEMP, node)"
    assert parse_label_values(queries["instance"]).selector == 'DCGM_FI_DEV_GPU_TEMP{node=~"$node"}'
    assert parse_label_values(queries["gpu"]).label == "gpu"
    assert "$node" in queries["gpu"] and "$instance" in queries["gpu"]


def test_every_dcgm_selector_follows_the_node_variable() -> None:
    for title, expr in panel_queries(DASH):
        for selector in re.findall(r"DCGM_\w+\{([^}]*)\}", expr):
            assert 'node=~"$node"' in selector, (title, expr)
            assert 'gpu=~"$gpu"' in selector, (title, expr)


def test_layout_ids_unique_and_within_grid() -> None:
    panels = list(iter_panels(DASH))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        own = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not own & cells, f"{p['title']} overlaps another panel"
        cells |= own


def test_panel_queries_and_variable_queries_are_complete() -> None:
    targets = sum(len(p["targets"]) for p in PANELS.values())
    assert len(panel_queries(DASH)) == targets
    assert [n for n, _ in variable_queries(DASH)] == ["node", "instance", "gpu"]


@pytest.mark.parametrize(
    ("expr", "values", "expected"),
    [
        ('up{node=~"$node"}', None, 'up{node=~".*"}'),
        ('up{node=~"${node}", gpu=~"[[gpu]]"}', {"node": "node-a"}, 'up{node=~"node-a", gpu=~".*"}'),
        ('x{n=~"${node:regex}"}', {"node": "a|b"}, 'x{n=~"a|b"}'),
        ("rate(x[$__rate_interval])", None, "rate(x[1m])"),
        ("avg_over_time(x[$__interval]) + increase(y[$__range])", None, "avg_over_time(x[30s]) + increase(y[5m])"),
    ],
)
def test_concretize(expr: str, values: dict[str, str] | None, expected: str) -> None:
    assert concretize(expr, values) == expected


def test_concretize_rejects_unknown_builtins() -> None:
    with pytest.raises(ValueError, match="__from"):
        concretize("x[$__from]")


def test_parse_label_values() -> None:
    lv = parse_label_values('label_values(up{job="a", x=~"b,c"}, instance)')
    assert (lv.selector, lv.label) == ('up{job="a", x=~"b,c"}', "instance")
    assert parse_label_values("label_values(node)").selector is None
    with pytest.raises(ValueError):
        parse_label_values("query_result(up)")


def test_variable_query_object_form() -> None:
    dash = {
        "templating": {
            "list": [{"type": "query", "name": "n", "query": {"query": "label_values(up, node)", "qryType": 1}}]
        }
    }
    assert variable_queries(dash) == [("n", "label_values(up, node)")]
