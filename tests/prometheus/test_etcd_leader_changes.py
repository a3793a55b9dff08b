"""M12's queries (gpustack/diagnose/collect_prometheus.py) through the real promtool, on both supported Prometheus
releases: three etcd members' leader-change counters, as the chart's etcd ServiceMonitor labels them (job
``kube-etcd``), answer the most elections any member saw, rounded; a counter of another job is not read."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from gpustack.diagnose.collect_prometheus import QUERIES
from tests.prometheus.releases import Release

pytestmark = pytest.mark.both_prometheus


def series(instance: str, values: str, job: str = "kube-etcd") -> dict[str, str]:
    return {"series": f'etcd_server_leader_changes_seen_total{{job="{job}", instance="{instance}"}}', "values": values}


def test_leader_change_queries(promtool: str, prometheus_release: Release, tmp_path: Path) -> None:
    # one sample a minute for 70 minutes: an election at minute 10, then four between minutes 60 and 66
    storm = "1x9 2x49 3 4 5 6 6x10"
    inputs = [series("10.0.0.1:2381", storm), series("10.0.0.2:2381", storm), series("10.0.0.3:2381", "1x9 2x60"),
              series("10.0.0.9:2381", "0+10x70", job="other")]  # fmt: skip
    tests = [{
        "interval": "1m",
        "input_series": inputs,
        "promql_expr_test": [
            {"expr": QUERIES["etcd_leader_changes_15m"], "eval_time": "70m", "exp_samples": [{"labels": "{}", "value": 4}]},
            {"expr": QUERIES["etcd_leader_changes_1h"], "eval_time": "70m", "exp_samples": [{"labels": "{}", "value": 4}]},
            {"expr": QUERIES["etcd_leader_changes_15m"], "eval_time": "40m", "exp_samples": [{"labels": "{}", "value": 0}]},
        ],
    }]  # fmt: skip
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "1m", "tests": tests}))
    proc = subprocess.run([promtool, "test", "rules", "t.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
