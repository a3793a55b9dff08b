"""Fixtures for the diagnose tests: a running FakeKubeAPI and a kubeconfig pointing at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.kube_api import FakeKubeAPI


@pytest.fixture
def fake_api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI.running() as api:
        yield api


@pytest.fixture
def kubeconfig(fake_api: FakeKubeAPI, tmp_path: Path) -> Path:
    return fake_api.write_kubeconfig(tmp_path / "kubeconfig")
