"""Every panel of gpustack's dashboards says what its "No data" means (dashboards/empty-panels.yaml): a new
panel without an entry, or an entry left after its panel was renamed or removed, fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack.monitoring import panels
from gpustack.monitoring.dashboard import CAPACITY_DASHBOARD_FILE, DASHBOARD_FILE


def test_every_panel_is_classified() -> None:
    assert panels.unclassified() == []
    table = panels.empty_meanings()
    assert set(table) == {DASHBOARD_FILE, CAPACITY_DASHBOARD_FILE}
    # what the fresh cluster of issue 16 showed: the per-pod panel is about pods holding GPUs
    assert table[DASHBOARD_FILE]["GPU Utilisation per Pod"] == "gpu-pods"
    assert table[DASHBOARD_FILE]["XID Errors (last XID per GPU)"] == "problems"
    assert table[DASHBOARD_FILE]["GPU Temperature"] == "data"


def test_what_may_be_empty_depends_on_pods_holding_gpus() -> None:
    idle, busy = panels.may_be_empty(DASHBOARD_FILE, gpu_pods=False), panels.may_be_empty(DASHBOARD_FILE, gpu_pods=True)
    assert busy < idle and idle - busy == {"GPU Utilisation per Pod"}
    assert panels.titles(DASHBOARD_FILE, {"data"}).isdisjoint(idle)
    consumer = panels.may_be_empty(DASHBOARD_FILE, gpu_pods=True, profiling=False)
    assert consumer - busy == {"Tensor Core Utilization", "Engine Activity", "PCIe Throughput"}


def test_a_new_panel_without_an_entry_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    table = {name: dict(entries) for name, entries in panels.empty_meanings().items()}
    del table[DASHBOARD_FILE]["GPU Temperature"]
    table[CAPACITY_DASHBOARD_FILE]["A panel that was removed"] = "data"
    monkeypatch.setattr(panels, "empty_meanings", lambda: table)
    assert panels.unclassified() == [
        f"{DASHBOARD_FILE}: panel 'GPU Temperature' has no entry in {panels.PANELS_FILE}",
        f"{CAPACITY_DASHBOARD_FILE}: {panels.PANELS_FILE} lists 'A panel that was removed', which is not a panel",
    ]


def test_an_unknown_meaning_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / panels.PANELS_FILE).write_text(f"{DASHBOARD_FILE}:\n  GPU Temperature: sometimes\n")
    monkeypatch.setattr(panels, "resource_file", lambda _d, name: tmp_path / name)
    panels.empty_meanings.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"unknown meaning .*GPU Temperature"):
            panels.empty_meanings()
    finally:
        panels.empty_meanings.cache_clear()
