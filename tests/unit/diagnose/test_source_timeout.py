"""GPUSTACK_SOURCE_TIMEOUT: the per-source deadline of verify and doctor (gpustack/diagnose/engine.py)."""

from __future__ import annotations

import pytest

from gpustack.diagnose.engine import SOURCE_TIMEOUT, DiagnoseOptions, source_timeout
from gpustack.errors import ConfigError


def test_default_and_a_set_value_reach_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUSTACK_SOURCE_TIMEOUT", raising=False)
    assert source_timeout() == SOURCE_TIMEOUT == 30.0 and DiagnoseOptions(command="doctor").timeout == 30.0
    monkeypatch.setenv("GPUSTACK_SOURCE_TIMEOUT", "120")
    assert DiagnoseOptions(command="doctor").timeout == 120.0


@pytest.mark.parametrize("raw", ["0", "4", "3601", "soon", "-5"])
def test_a_bad_value_is_a_config_error_naming_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError, match="GPUSTACK_SOURCE_TIMEOUT") as ei:
        source_timeout({"GPUSTACK_SOURCE_TIMEOUT": raw})
    assert ei.value.hint and "30 s" in ei.value.hint
