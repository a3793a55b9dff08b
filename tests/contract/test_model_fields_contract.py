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
        if family.name == "GeForce / TITAN with NVLink":
            continue  # as the other GeForce family but NVLink (the RTX 4090 stands for both): test_gpu_models.py
        assert any(family.matches(m) for m in BLANK["reports"]), family.name


def test_product_labels_are_gpu_feature_discoverys() -> None:
    """GFD's ``sanitise`` (k8s-device-plugin internal/lm/resource.go): characters outside ``[A-Za-z0-9-_. ]`` dropped,
    runs of blanks one dash; the H100's is the label the healthy scenarios carry, and the table reads labels too."""
    from tests.fakes import scenarios
    from tests.fakes.model_scenarios import H100, MIXES, product_label, with_models

    [node] = [o for o in scenarios.healthy(1).objects if o["kind"] == "Node"]
    assert product_label(H100) == node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert product_label("NVIDIA  GeForce RTX 4090 (x)") == "NVIDIA-GeForce-RTX-4090-x"
    for model in {m for mix in MIXES.values() for m in mix}:
        assert gpu_models.lacks(product_label(model)) == gpu_models.lacks(model), model
    [relabelled] = [o for o in with_models([node], {node["metadata"]["name"]: "Tesla T4"}) if o["kind"] == "Node"]
    assert relabelled["metadata"]["labels"]["nvidia.com/gpu.product"] == "Tesla-T4"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3", "a copy, not the original"
