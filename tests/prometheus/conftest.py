"""Fixtures for the Prometheus tests: the Prometheus release, promtool, and a live Prometheus scraping
replayed exporters.

Every test here is marked ``prometheus``. A test that starts Prometheus or runs promtool asks for the
``prometheus_release`` fixture (directly, or through ``promtool``, ``stack``, ``scenario_stack`` or
``usage_history``), which :func:`pytest_generate_tests` parametrizes, module-scoped: ``newest`` (Debian sid's
3.x, fetched into the test-bed cache on first use: tests/prometheus/releases.py) for every such test,
``oldest`` (Debian 12's 2.42) as well for the tests marked ``both_prometheus``;
``GPUSTACK_TEST_PROMETHEUS=newest,oldest`` runs all of them on both. A release that cannot run skips its
tests with the reason (a failure in CI: PYTEST_NO_SKIPS). The pure cross-checks always run. A Prometheus
service already running on the host is never used: each stack starts its own server on a free loopback port.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import Stack, running_stack
from .history import Backfilled, backfilled
from .history_scenarios import ci_history
from .releases import NAMES, Release, release, selected, unavailable

HERE = Path(__file__).resolve().parent
BOTH = "both_prometheus"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark this directory's tests ``prometheus``."""
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.prometheus)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test that uses a Prometheus on the selected releases (and on the oldest when marked ``both``)."""
    if "prometheus_release" not in metafunc.fixturenames:
        return
    names = selected()
    if metafunc.definition.get_closest_marker(BOTH) is not None:
        names = [n for n in NAMES if n in {*names, "newest", "oldest"}]
    metafunc.parametrize("prometheus_release", names, indirect=True, scope="module", ids=names)


@pytest.fixture(scope="module")
def prometheus_release(request: pytest.FixtureRequest) -> Release:
    """The Prometheus release of this test (a parameter: ``newest`` or ``oldest``)."""
    name = str(request.param)
    why = unavailable(name)
    if why:
        pytest.skip(f"Prometheus {name}: {why}")
    return release(name)


@pytest.fixture(scope="module")
def promtool(prometheus_release: Release) -> str:
    """Path of the release's promtool."""
    return prometheus_release.promtool


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, prometheus_release: Release) -> Iterator[Stack]:
    """Two healthy replayed GPU nodes scraped every second, with gpustack's rules loaded."""
    with running_stack(tmp_path_factory.mktemp("prometheus-healthy"), release=prometheus_release) as running:
        running.wait_until_scraped()
        yield running


@pytest.fixture(scope="module")
def scenario_stack(tmp_path_factory: pytest.TempPathFactory, prometheus_release: Release) -> Iterator[Stack]:
    """A separate stack whose exporters the scenario tests switch between failure modes."""
    with running_stack(tmp_path_factory.mktemp("prometheus-scenarios"), release=prometheus_release) as running:
        running.wait_until_scraped()
        yield running


@pytest.fixture(scope="module")
def usage_history(tmp_path_factory: pytest.TempPathFactory, prometheus_release: Release) -> Iterator[Backfilled]:
    """30 days of GPU history with known answers (tests/prometheus/history_scenarios.py ``ci_history``), ending a minute
    ago, in two Prometheus servers: without and with gpustack's usage recording rules."""
    import time

    end = int(time.time()) // 60 * 60 - 60
    history, expected = ci_history(end)
    pair = backfilled(tmp_path_factory.mktemp("usage-history"), history, expected, release=prometheus_release)
    try:
        yield pair
    finally:
        pair.stop()
