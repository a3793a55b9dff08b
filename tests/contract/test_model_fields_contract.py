"""Contract: the replayed dcgm-exporter prints, for each GPU model, the fields the real exporter prints for it
(tests/contract/upstream/dcgm_exporter.yaml ``blank_values``): a field the model does not report has no series and
no HELP/TYPE line (dcgm-exporter drops blank values, gpu_collector.go), every other one a series per GPU labelled
with the model; and the table gpustack reads (gpustack/monitoring/gpu_models.py) says the same."""

from __future__ import annotations

import re

import pytest

from gpustack.monitoring import gpu_models
from gpustack.monitoring.counters import load_counters
from tests.contract.upstream import facts
from tests.prometheus.replay_exporter import NodeSpec, PodRef, render_dcgm

BLANK = facts("dcgm_exporter")["blank_values"]


@pytest.mark.parametrize("model", sorted(BLANK["reports"]))
def test_the_replay_prints_what_the_exporter_prints_for_the_model(model: str) -> None:
    want = BLANK["reports"][model]
    spec = NodeSpec("node-x", {0: PodRef("ml", "train-0", "trainer")}, gpus=2, model=model)
    text = render_dcgm(spec, load_counters(), 10.0)
    for field in want["missing"]:
        assert not re.search(rf"^(# (HELP|TYPE) )?{field}\b", text, re.M), f"{model}: {field} printed"
        assert not gpu_models.reports(model, field), f"{model}: the table says {field} is reported"
    for field in want["present"]:
        series = re.findall(rf'^{field}\{{.*modelName="([^"]+)"', text, re.M)
        assert series == [model, model], f"{model}: {field}"
        assert f"# HELP {field} " in text and gpu_models.reports(model, field)
    assert BLANK["help_without_series"] is False


def test_every_model_the_table_names_a_reason_for_is_in_the_facts() -> None:
    """Each family of the table is pinned by a model in the upstream facts (a new family needs its facts)."""
    for family in gpu_models.FAMILIES:
        if family.name.startswith("GeForce / TITAN"):
            continue  # the RTX 4090 stands for both GeForce families; the 3090's NVLink: test_gpu_models.py
        assert any(family.matches(m) for m in BLANK["reports"]), family.name
