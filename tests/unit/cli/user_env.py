"""The environment of a user running gpustack in-process: a working directory with a config, an empty state
directory, an 80-column terminal without colour, and none of the developer's GPUSTACK_* or KUBECONFIG settings.
GPUSTACK_TODAY (tests/conftest.py: the day support verdicts are judged on) is kept, so verdicts do not move
with the calendar."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def user_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str, *, home: bool = False) -> Path:
    for name in [n for n in os.environ if (n.startswith("GPUSTACK_") and n != "GPUSTACK_TODAY") or n == "KUBECONFIG"]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    if home:
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "80")
    (tmp_path / "gpustack.yaml").write_text(config, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path
