"""A live golden-path cluster replayed at production's cadence through the real promtool (issue 32, a 60 s scrape).

The live harness scrapes every second and evaluates the usage rules every second (tests/prometheus/harness.py): a
golden path at a 60 s scrape and production's 1 m rule evaluation would need minutes of wall time per run. Instead
the series the live Prometheus stored over :data:`SAMPLES` seconds once the cluster's state settled -- every
dcgm-exporter and kube-state-metrics series exactly as scraped and relabelled, values moving as the replayed GPUs
move -- are replayed
one sample a **minute** into ``promtool test rules`` with gpustack's rule files **as shipped** (the usage group at its
own ``interval: 1m``) and ``evaluation_interval: 1m``; every panel R04 requires on that cluster is then evaluated as
doctor sends it for a 60 s datasource (``$__rate_interval`` = 4m: gpustack.monitoring.dashboard.grafana_builtins).
What this cannot show: scrape and evaluation timestamps that drift against each other (promtool aligns both on the
minute), docs/decisions.md "A 60 s scrape: production's cadence through promtool".
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from gpustack.diagnose.collect_grafana import CAPACITY_PREFIX
from gpustack.monitoring.dashboard import (
    CAPACITY_DASHBOARD_FILE,
    DASHBOARD_FILE,
    concretize,
    grafana_builtins,
    load_capacity_dashboard,
    load_dashboard,
    panel_queries,
    variable_values,
)
from gpustack.monitoring.panels import ALWAYS_MAY_BE_EMPTY, Meaning, titles
from gpustack.monitoring.rules import rules_path, usage_rules_path

from .harness import PrometheusServer

SAMPLES = 11  # seconds of live series, replayed as 10 minutes (a 4m rate window, 5m ranges)
RAW = '{__name__=~"DCGM_.+|kube_.+|up"}'  # what the exporters and kube-state-metrics gave; no recorded series


def _series_text(metric: dict[str, str]) -> str:
    labels = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(metric.items()) if k != "__name__")
    return f"{metric['__name__']}{{{labels}}}"


def replayed_series(prometheus: PrometheusServer, since: float, samples: int = SAMPLES) -> list[dict[str, str]]:
    """promtool ``input_series``: the live raw series of ``samples`` seconds from ``since`` (a ``time.time()`` when
    the cluster's state settled; waits until that much has been scraped), one value per second (``_`` where a series
    had none), to be read one per ``interval``."""
    time.sleep(max(0.0, since + samples - time.time()))
    end = math.floor(time.time())
    start = end - (samples - 1)
    params = {"query": RAW, "start": str(start), "end": str(end), "step": "1s"}
    rows = prometheus.api("query_range", params)["result"]
    out = []
    for r in rows:
        values = ["_"] * samples
        for t, v in r["values"]:
            i = round(float(t) - start)
            if 0 <= i < samples and math.isfinite(float(v)):
                values[i] = v
        out.append({"series": _series_text(r["metric"]), "values": " ".join(values)})
    return out


def required_panels(excused: frozenset[Meaning] = frozenset({"mig"})) -> dict[str, list[str]]:
    """R04's panel title (the capacity dashboard's with its prefix) -> its queries as doctor sends them for a 60 s
    datasource, for every panel whose "No data" would be a fault on a cluster of whole GPUs with pods holding them
    (``excused``: the meanings such a cluster may leave empty besides lists of problems and idle activity)."""
    builtins = grafana_builtins("60s")
    out: dict[str, list[str]] = {}
    for dash, file, prefix in ((load_dashboard(), DASHBOARD_FILE, ""),
                               (load_capacity_dashboard(), CAPACITY_DASHBOARD_FILE, CAPACITY_PREFIX)):  # fmt: skip
        empty_ok = titles(file, ALWAYS_MAY_BE_EMPTY | excused)
        fixed = variable_values(dash)
        for title, expr in panel_queries(dash):
            if title not in empty_ok:
                out.setdefault(prefix + title, []).append(concretize(expr, fixed, builtins))
    return out


def has_data(queries: list[str]) -> str:
    """1 when any of a panel's queries returns a series (what R04 counts), else nothing."""
    return "(" + " or ".join(f"count({q})" for q in queries) + ") > bool 0"


def promtool_at_production_cadence(promtool: str, workdir: Path, series: list[dict[str, str]],
                                   panels: dict[str, list[str]]) -> str:  # fmt: skip
    """Run the replay: "" when every panel has data at the last minute, else promtool's report."""
    minutes = len(series[0]["values"].split()) - 1
    tests: list[dict[str, Any]] = [{"expr": has_data(q), "eval_time": f"{minutes}m",
                                    "exp_samples": [{"labels": "{}", "value": 1}]} for q in panels.values()]  # fmt: skip
    doc = {"rule_files": [str(rules_path()), str(usage_rules_path())], "evaluation_interval": "1m",
           "tests": [{"name": "the live series, one sample a minute", "interval": "1m", "input_series": series,
                      "promql_expr_test": tests}]}  # fmt: skip
    path = workdir / "cadence.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=100000), encoding="utf-8")
    proc = subprocess.run([promtool, "test", "rules", path.name], cwd=workdir, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    if proc.returncode == 0:
        return ""
    empty = [t for t, q in panels.items() if json.dumps(has_data(q)) in proc.stdout + proc.stderr]  # Go's %q
    return f"panels without data: {empty}\n{(proc.stdout + proc.stderr)[-4000:]}"
