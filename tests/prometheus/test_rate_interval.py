"""A 60 s scrape through the real promtool (issue 32 item 5): the "PCIe Replays" panel as doctor used to run it
(``$__rate_interval`` fixed at ``1m``) returns nothing on Prometheus 3, whose range windows exclude their start, so a
1 m window over 1 m samples holds one; as Grafana fills it for a 60 s datasource (``4m``,
gpustack.monitoring.dashboard.grafana_builtins) it returns the replay rate on every supported release."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from gpustack.monitoring.dashboard import BUILTIN_DEFAULTS, concretize, grafana_builtins, load_dashboard, panel_queries
from tests.prometheus.releases import Release

pytestmark = pytest.mark.both_prometheus

SERIES = 'DCGM_FI_DEV_PCIE_REPLAY_COUNTER{node="gpu-node-1", instance="10.244.1.5:9400", gpu="0"}'


def _pcie_replays(builtins: dict[str, str]) -> str:
    [expr] = [e for title, e in panel_queries(load_dashboard()) if title == "PCIe Replays"]
    return concretize(expr, builtins=builtins)


def _promtool_eval(promtool: str, tmp_path: Path, expr: str, want: list[dict[str, object]]) -> str:
    """``promtool test rules``: ``expr`` at 10m over a counter scraped every 60 s, growing by 3 a scrape."""
    test = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": SERIES, "values": "0+3x20"}],
        "promql_expr_test": [{"expr": f"round({expr}, 0.001)", "eval_time": "10m", "exp_samples": want}],
    }]}  # fmt: skip
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(test))
    proc = subprocess.run([promtool, "test", "rules", "t.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    return "" if proc.returncode == 0 else proc.stdout + proc.stderr


def test_pcie_replays_has_data_at_a_60s_scrape(promtool: str, prometheus_release: Release, tmp_path: Path) -> None:
    expr = _pcie_replays(grafana_builtins("60s"))
    assert "[4m]" in expr
    # 3 replays a minute -> the panel's per-minute rate
    assert _promtool_eval(promtool, tmp_path, expr, [{"labels": '{gpu="0", node="gpu-node-1"}', "value": 3}]) == ""


def test_the_fixed_one_minute_window_is_empty_on_prometheus_3(promtool: str, prometheus_release: Release,
                                                              tmp_path: Path) -> None:  # fmt: skip
    """Prometheus 3: one sample in the 1 m window, no rate. Prometheus 2 (2.42) includes the window's start: two
    samples, the rate the panel means -- which is why the fixed 1m went unnoticed before 3.x."""
    expr = _pcie_replays(BUILTIN_DEFAULTS)
    assert "[1m]" in expr
    want = [] if prometheus_release.name == "newest" else [{"labels": '{gpu="0", node="gpu-node-1"}', "value": 3}]
    assert _promtool_eval(promtool, tmp_path, expr, want) == ""
