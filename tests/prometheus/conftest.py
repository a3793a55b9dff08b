"""Fixtures for the Prometheus tests: promtool, and a live Prometheus scraping replayed exporters.

Every test here is marked ``prometheus``. Tests that need Debian's prometheus/promtool binaries
(through the ``promtool``, ``stack`` or ``scenario_stack`` fixtures) are skipped, with the reason,
only when those binaries are not installed; the pure cross-checks always run. A Prometheus
service already running on the host is never used: each stack starts its own server on a free
loopback port.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import PROMTOOL, Stack, binaries_missing, running_stack
from .history import Backfilled, backfilled, ci_history

HERE = Path(__file__).resolve().parent
NEEDS_BINARIES = frozenset({"promtool", "stack", "scenario_stack", "usage_history"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark this directory's tests ``prometheus``; skip those needing absent binaries."""
    missing = binaries_missing()
    for item in items:
        if HERE not in item.path.resolve().parents:
            continue
        item.add_marker(pytest.mark.prometheus)
        if missing and NEEDS_BINARIES & set(getattr(item, "fixturenames", ())):
            item.add_marker(
                pytest.mark.skip(reason=f"not installed: {', '.join(missing)} (apt-get install prometheus)")
            )


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool."""
    return PROMTOOL


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Two healthy replayed GPU nodes scraped every second, with gpustack's rules loaded."""
    with running_stack(tmp_path_factory.mktemp("prometheus-healthy")) as running:
        running.wait_until_scraped()
        yield running


@pytest.fixture(scope="module")
def scenario_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A separate stack whose exporters the scenario tests switch between failure modes."""
    with running_stack(tmp_path_factory.mktemp("prometheus-scenarios")) as running:
        running.wait_until_scraped()
        yield running


@pytest.fixture(scope="module")
def usage_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backfilled]:
    """30 days of GPU history with known answers (tests/prometheus/history.py ``ci_history``), ending a minute
    ago, in two Prometheus servers: without and with gpustack's usage recording rules."""
    import time

    end = int(time.time()) // 60 * 60 - 60
    history, expected = ci_history(end)
    pair = backfilled(tmp_path_factory.mktemp("usage-history"), history, expected)
    try:
        yield pair
    finally:
        pair.stop()
