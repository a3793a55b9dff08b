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

HERE = Path(__file__).resolve().parent
NEEDS_BINARIES = frozenset({"promtool", "stack", "scenario_stack"})


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
