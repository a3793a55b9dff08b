"""Fixtures for unit tests that talk to Kubernetes: a running FakeKubeAPI (TEST DOUBLE), a kubeconfig
pointing at it, and a client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpustack.runners.kube import Kube
from gpustack.runners.kubeconfig import kube_from_file
from tests.fakes.kube_api import FakeKubeAPI


@pytest.fixture
def fake_api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI.running() as api:
        yield api


@pytest.fixture
def kubeconfig(fake_api: FakeKubeAPI, tmp_path: Path) -> Path:
    return fake_api.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def kube(kubeconfig: Path) -> Kube:
    return kube_from_file(kubeconfig, request_timeout=5)
