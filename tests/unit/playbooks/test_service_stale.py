"""library/gpustack_service_stale.py: a restart an interrupted run lost is found from the host's
state (the service started before its files last changed), so it cannot be lost. The pure parts
here; the test bed drops a restart and an apt cache update for real (tests/testbed/test_interrupt.py)."""

from __future__ import annotations

from types import ModuleType

import pytest
from conftest import PLAYBOOKS, load_path


@pytest.fixture(scope="module")
def stale() -> ModuleType:
    return load_path("gpustack_service_stale", PLAYBOOKS / "library" / "gpustack_service_stale.py")


SHOW = "ActiveState=active\nInactiveExitTimestampMonotonic=5000000\n"


def test_parse_show_and_start_time(stale: ModuleType) -> None:
    show = stale.parse_show(SHOW)
    assert show == {"ActiveState": "active", "InactiveExitTimestampMonotonic": "5000000"}
    # started 5 s after boot; now is 100 s after boot at wall clock 1000: it started at 905
    assert stale.started_at(show, 100.0, 1000.0) == pytest.approx(905.0)
    assert stale.started_at({**show, "ActiveState": "inactive"}, 100.0, 1000.0) is None
    assert stale.started_at({**show, "ActiveState": "activating"}, 100.0, 1000.0) == pytest.approx(905.0)
    assert stale.started_at({"ActiveState": "active", "InactiveExitTimestampMonotonic": "0"}, 1, 1) is None


@pytest.mark.parametrize(
    ("started", "changed", "is_stale", "reason"),
    [
        (905.0, {"/etc/containerd/config.toml": 904.5, "/usr/local/bin/containerd": 800.0}, False, "started after"),
        (905.0, {"/etc/containerd/config.toml": 905.25}, True, "/etc/containerd/config.toml changed 0.250s after"),
        (905.0, {"/a": 100.0, "/b": 906.0}, True, "/b changed 1.000s after"),
        (None, {"/etc/containerd/config.toml": 2000.0}, False, "not running"),
        (905.0, {}, False, "none of its files exist"),
    ],
)
def test_verdict(
    stale: ModuleType, started: float | None, changed: dict[str, float], is_stale: bool, reason: str
) -> None:
    got, why = stale.verdict(started, changed)
    assert got is is_stale and reason in why
