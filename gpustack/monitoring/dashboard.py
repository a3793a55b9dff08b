"""gpustack's GPU dashboard (``dashboards/12239.json``): loading and query extraction. Pure.

The dashboard is gpustack's own equivalent of grafana.com dashboard 12239 ("NVIDIA DCGM Exporter
Dashboard"), provisioned from a file: every datasource reference is the ``${datasource}``
template variable, so it needs no ``__inputs`` resolution at import time.

Helpers here are used by the tests and by ``gpustack verify``: list every panel query and
template-variable query, and turn Grafana's ``$variables`` into concrete PromQL that Prometheus
can evaluate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from gpustack.paths import resource_file

DASHBOARD_FILE = "12239.json"
#: the "GPU capacity and cost" dashboard (reads gpustack's usage recording rules)
CAPACITY_DASHBOARD_FILE = "gpu-capacity.json"
CAPACITY_TEAM_VAR = "team_label"
DATASOURCE_VAR = "${datasource}"
#: the step (``intervalMs``) doctor's panel queries ask Grafana for (diagnose/collect_grafana.py ds_query)
QUERY_STEP_S = 30
#: the scrape interval Grafana assumes when its Prometheus datasource sets none (``jsonData.timeInterval``)
GRAFANA_DEFAULT_SCRAPE = "15s"
_GRAFANA_DURATION = re.compile(r"^(?P<n>[0-9]+)(?P<unit>ms|s|m|h|d)$")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _grafana_duration(seconds: float) -> str:
    return f"{seconds // 60:.0f}m" if seconds >= 60 and seconds % 60 == 0 else f"{seconds:g}s"


def grafana_builtins(scrape_interval: str = GRAFANA_DEFAULT_SCRAPE, step_s: int = QUERY_STEP_S) -> dict[str, str]:
    """The built-in variables as Grafana fills them for an instant query at ``step_s`` on a Prometheus datasource
    whose scrape interval is ``scrape_interval`` (grafana/grafana pkg/promlib/models/query.go: calculateRateInterval
    ``$__rate_interval = max(interval + scrape, 4 x scrape)``; the interval is never below the scrape interval, the
    datasource's min step). A fixed ``1m`` left a 60 s scrape's ``rate(x[1m])`` one sample: nothing on Prometheus 3,
    whose range windows exclude their start (issue 32 item 5). An unreadable interval is Grafana's default (15s)."""
    found = _GRAFANA_DURATION.match(scrape_interval.strip()) or _GRAFANA_DURATION.match(GRAFANA_DEFAULT_SCRAPE)
    assert found is not None
    scrape = int(found["n"]) * _UNIT_S[found["unit"]]
    interval = max(step_s, scrape)
    rate = max(step_s + scrape, 4 * scrape)
    return {"__rate_interval": _grafana_duration(rate), "__interval": _grafana_duration(interval),
            "__interval_ms": f"{interval * 1000:.0f}", "__range": "5m", "__range_s": "300", "__range_ms": "300000"}  # fmt: skip


def datasource_builtins(datasource: Mapping[str, Any] | None) -> dict[str, str]:
    """:func:`grafana_builtins` for a datasource as ``/api/datasources`` lists it (its ``jsonData.timeInterval``, which
    kube-prometheus-stack sets to ``monitoring.scrape_interval``)."""
    json_data = (datasource or {}).get("jsonData")
    scrape = json_data.get("timeInterval") if isinstance(json_data, Mapping) else None
    return grafana_builtins(str(scrape or GRAFANA_DEFAULT_SCRAPE))


BUILTIN_DEFAULTS: dict[str, str] = grafana_builtins()
ALL_VALUE = ".*"
_VARIABLE = re.compile(r"\$\{(?P<braced>\w+)(?::[^}]*)?\}|\[\[(?P<old>\w+)(?::[^\]]*)?\]\]|\$(?P<plain>\w+)")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<selector>.+?)\s*,\s*)?(?P<label>[A-Za-z_]\w*)\s*\)\s*$", re.S)

Panel = dict[str, Any]


def dashboard_path() -> Path:
    """The shipped dashboard JSON, from the source tree or the installed wheel."""
    return resource_file("dashboards", DASHBOARD_FILE)


def load_dashboard(path: Path | None = None) -> dict[str, Any]:
    """The dashboard model as a dict."""
    data = json.loads((path or dashboard_path()).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "panels" not in data:
        raise ValueError(f"{path or dashboard_path()}: not a Grafana dashboard model (no 'panels')")
    return cast(dict[str, Any], data)


def iter_panels(dash: Mapping[str, Any]) -> Iterator[Panel]:
    """Every panel, including those nested in collapsed rows; rows themselves included."""
    for panel in dash.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def data_panels(dash: Mapping[str, Any]) -> list[Panel]:
    """Panels that query data (rows and text panels excluded)."""
    return [p for p in iter_panels(dash) if p.get("type") != "row" and p.get("targets")]


def panel_queries(dash: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(panel title, expr)`` for every non-hidden target with a PromQL expression."""
    out: list[tuple[str, str]] = []
    for panel in data_panels(dash):
        for target in panel.get("targets", []):
            if target.get("expr") and not target.get("hide"):
                out.append((str(panel.get("title", "")), str(target["expr"])))
    return out


def template_variables(dash: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's template variables (``templating.list``)."""
    return list(dash.get("templating", {}).get("list", []))


def variable_query(variable: Mapping[str, Any]) -> str:
    """A query variable's query text, whether stored as a string or as Grafana's query object."""
    query = variable.get("query", "")
    if isinstance(query, Mapping):
        return str(query.get("query", ""))
    return str(query)


def variable_queries(dash: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(variable name, query)`` for every ``query`` variable."""
    return [(str(v["name"]), variable_query(v)) for v in template_variables(dash) if v.get("type") == "query"]


@dataclass(frozen=True)
class LabelValuesQuery:
    """``label_values(selector, label)`` split into its parts (``selector`` may be absent)."""

    label: str
    selector: str | None


def parse_label_values(query: str) -> LabelValuesQuery:
    """Split a Grafana ``label_values(...)`` variable query; ``ValueError`` for anything else."""
    match = _LABEL_VALUES.match(query)
    if not match:
        raise ValueError(f"not a label_values() query: {query!r}")
    return LabelValuesQuery(label=match.group("label"), selector=match.group("selector"))


def concretize(expr: str, values: Mapping[str, str] | None = None, builtins: Mapping[str, str] | None = None) -> str:
    """Replace Grafana variables in ``expr`` so Prometheus can evaluate it.

    User variables (``$node``, ``${gpu}``, ``[[instance]]``, ``${node:regex}``) become
    ``values[name]`` or ``.*`` (every panel matches them with ``=~``); built-ins get ``builtins`` (default
    :data:`BUILTIN_DEFAULTS`: a 15 s scrape, ``$__rate_interval`` -> ``1m``, ``$__range`` -> ``5m``;
    :func:`grafana_builtins` for another scrape interval).
    """
    chosen = dict(values or {})
    fixed = BUILTIN_DEFAULTS if builtins is None else builtins

    def replace(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("old") or match.group("plain")
        if name in chosen:
            return chosen[name]
        if name.startswith("__"):
            if name not in fixed:
                raise ValueError(f"unsupported Grafana built-in variable ${name} in {expr!r}")
            return fixed[name]
        return ALL_VALUE

    return _VARIABLE.sub(replace, expr)


def datasource_refs(dash: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(where, datasource)`` for every panel- and target-level datasource reference."""
    refs: list[tuple[str, Any]] = []
    for panel in iter_panels(dash):
        title = str(panel.get("title", ""))
        if "datasource" in panel:
            refs.append((f"panel {title!r}", panel["datasource"]))
        for target in panel.get("targets", []):
            refs.append((f"panel {title!r} target {target.get('refId')}", target.get("datasource")))
    for variable in template_variables(dash):
        if variable.get("type") == "query":
            refs.append((f"variable {variable.get('name')!r}", variable.get("datasource")))
    return refs


# --- the capacity dashboard and variables with fixed values ----------------------------------------


def capacity_dashboard_path() -> Path:
    """The shipped "GPU capacity and cost" dashboard JSON."""
    return resource_file("dashboards", CAPACITY_DASHBOARD_FILE)


def load_capacity_dashboard(team_label: str | None = None, path: Path | None = None) -> dict[str, Any]:
    """The capacity dashboard; ``team_label`` (a Kubernetes label key, ``monitoring.team_label``) sets the
    hidden constant its team panel groups by (``label_<key>`` as kube-state-metrics names it)."""
    from gpustack.monitoring.ksm import label_name

    dash = load_dashboard(path or capacity_dashboard_path())
    if team_label is not None:
        name = label_name(team_label)
        for variable in template_variables(dash):
            if variable.get("name") == CAPACITY_TEAM_VAR:
                variable["query"] = name
                variable["current"] = {"selected": False, "text": name, "value": name}
                variable["options"] = [{"selected": True, "text": name, "value": name}]
    return dash


def variable_values(dash: Mapping[str, Any]) -> dict[str, str]:
    """Values of the variables a panel query can be concretized with as Grafana would: constants and text
    boxes (their current value, else their query). Query and datasource variables are left out."""
    out: dict[str, str] = {}
    for variable in template_variables(dash):
        if variable.get("type") not in ("constant", "textbox"):
            continue
        current = variable.get("current") or {}
        value = current.get("value") if isinstance(current, Mapping) else None
        out[str(variable["name"])] = str(value if value not in (None, "") else variable.get("query", ""))
    return out
