"""doctor's ``$__rate_interval`` follows the scrape interval as Grafana's does (issue 32 item 5), and the config
bounds ``monitoring.scrape_interval``.

Grafana (grafana/grafana pkg/promlib/models/query.go, calculateRateInterval): max(interval + scrape, 4 x scrape),
the scrape interval being the datasource's ``jsonData.timeInterval`` (default 15s). A fixed ``1m`` gave a 60 s scrape a
one-sample window: "PCIe Replays" read No data on Prometheus 3 (tests/prometheus/test_rate_interval.py shows it)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpustack.config.model import Config
from gpustack.diagnose.collect_grafana import _panels
from gpustack.monitoring.dashboard import QUERY_STEP_S, datasource_builtins, grafana_builtins, load_dashboard


@pytest.mark.parametrize(("scrape", "rate", "interval"), [
    ("15s", "1m", "30s"),  # max(30 + 15, 60) = 60 s: what doctor always used
    ("10s", "40s", "30s"),  # max(40, 40)
    ("30s", "2m", "30s"),  # max(60, 120)
    ("60s", "4m", "1m"),  # max(90, 240): four samples of a 60 s scrape
    ("1m", "4m", "1m"),
])  # fmt: skip
def test_rate_interval_is_grafanas_rule(scrape: str, rate: str, interval: str) -> None:
    got = grafana_builtins(scrape)
    assert (got["__rate_interval"], got["__interval"]) == (rate, interval)
    assert QUERY_STEP_S == 30


def test_doctor_runs_pcie_replays_at_the_datasources_scrape_interval() -> None:
    dashboard = load_dashboard()
    sixty = _panels(dashboard, {"type": "prometheus", "jsonData": {"timeInterval": "60s"}})["PCIe Replays"]
    default = _panels(dashboard, {"type": "prometheus"})["PCIe Replays"]  # no timeInterval: Grafana's 15s
    assert len(sixty) == 1 and "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" in sixty[0] and "[4m]" in sixty[0]
    assert "[1m]" in default[0] and "$" not in sixty[0] + default[0]
    assert datasource_builtins({"jsonData": {"timeInterval": "60s"}}) == grafana_builtins("60s")


@pytest.mark.parametrize("value", ["1s", "15s", "30s", "60s", "1m"])
def test_scrape_intervals_up_to_a_minute_are_accepted(value: str) -> None:
    assert Config.model_validate({"monitoring": {"scrape_interval": value}}).monitoring.scrape_interval == value


@pytest.mark.parametrize("value", ["61s", "2m", "1h", "500ms", "0s"])
def test_scrape_intervals_outside_one_second_to_one_minute_are_refused(value: str) -> None:
    with pytest.raises(ValidationError, match=r"scrape_interval\n.*outside 1s-1m"):
        Config.model_validate({"monitoring": {"scrape_interval": value}})
