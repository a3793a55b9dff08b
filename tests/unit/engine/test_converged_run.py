"""A converged re-run that has nothing left to do starts no playbook: every stage's play left with no
host, and this machine's Helm already the pinned one (what the helm role's play for localhost checks
first, playbooks/roles/helm/tasks/main.yml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.engine import stages
from gpustack.engine.options import RunOptions
from gpustack.render.converge import NO_HOSTS

CFG = Config.model_validate({"nodes": [{"name": "cp", "address": "192.0.2.10", "role": "control-plane"}]})


def _helm(bin_dir: Path, prints: str, rc: int = 0) -> Path:
    """A helm that answers ``version --template`` as the real one does (the version, no newline)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    helm = bin_dir / "helm"
    helm.write_text(f'#!/bin/sh\n[ "$1 $2" = "version --template" ] || exit 3\nprintf %s "{prints}"\nexit {rc}\n')
    helm.chmod(0o755)
    return helm


def test_the_controller_helm_version_is_read_as_the_role_reads_it(tmp_path: Path) -> None:
    assert stages.controller_helm_version(_helm(tmp_path / "a", "v4.2.0")) == "v4.2.0"
    assert stages.controller_helm_version(_helm(tmp_path / "b", "v4.2.0", rc=1)) is None
    assert stages.controller_helm_version(tmp_path / "missing" / "helm") is None
    (tmp_path / "dir" / "helm").mkdir(parents=True)
    assert stages.controller_helm_version(tmp_path / "dir" / "helm") is None


@pytest.mark.parametrize(
    ("ids", "patterns", "helm", "expected"),
    [
        (["os", "helm"], {"os": NO_HOSTS, "helm": NO_HOSTS}, "pinned", True),
        (["os"], {"os": NO_HOSTS}, None, True),  # the helm stage not selected: this machine's Helm not asked
        (["os", "helm"], {"os": NO_HOSTS, "helm": NO_HOSTS}, "v0.0.1", False),  # the play would install Helm
        (["os", "helm"], {"os": NO_HOSTS, "helm": NO_HOSTS}, None, False),
        (["os", "helm"], {"os": "cp", "helm": NO_HOSTS}, "pinned", False),  # a host still to visit
        (["os", "ready"], {"os": NO_HOSTS}, "pinned", False),  # a play without host patterns always runs
        (["os"], {}, "pinned", False),  # --full, or no facts: no patterns at all
    ],
)
def test_nothing_to_do_only_when_no_play_would_visit_a_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ids: list[str], patterns: dict[str, str], helm: str | None,
    expected: bool,
) -> None:  # fmt: skip
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
    if helm is not None:
        _helm(tmp_path / "bin", f"v{pins.HELM_VERSION}" if helm == "pinned" else helm)
    assert stages._nothing_to_do(CFG, RunOptions(stages=[]), ids, patterns) is expected
