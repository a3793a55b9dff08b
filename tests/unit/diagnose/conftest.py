"""verify/doctor follow kubectl's kubeconfig rules ($KUBECONFIG, ~/.kube/config): in these tests neither may
point at the developer's own clusters."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def no_users_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(home))
    return home
