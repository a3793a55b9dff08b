"""The real control plane (tests/controlplane/cluster.py), started once per pytest run and shared by the tests of
this directory, every one marked ``controlplane``. Each test works in its own namespaces and on its own nodes, and
removes what it made."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import ControlPlane, running

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.controlplane)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with running(tmp_path_factory.mktemp("controlplane")) as cp:
        yield cp


@pytest.fixture(scope="module")
def own_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of the module's own, for tests that read the whole cluster (doctor, verify): no other
    test's nodes and objects in it."""
    with running(tmp_path_factory.mktemp("controlplane-own")) as cp:
        yield cp
