"""Values `gpustack report` depends on: kube-state-metrics exports the team label, dcgm-exporter keeps its pod
mapping (both exporters enable it in their own templates; gpustack must set nothing that turns it off)."""

from __future__ import annotations

import json

from gpustack.config.model import Config
from gpustack.render.values import FactsSummary, render_values
from tests.unit.render.test_values_types import TYPE_VARIANTS, render_variant


def test_kube_state_metrics_exports_the_configured_team_label() -> None:
    default = render_values(Config.model_validate({}), FactsSummary(gpu_nodes=("gpu1",)))
    assert default["kube-prometheus-stack"]["kube-state-metrics"] == {"metricLabelsAllowlist": ["namespaces=[team]"]}
    cfg = Config.model_validate({"monitoring": {"team_label": "example.com/cost-center"}})
    values = render_values(cfg, FactsSummary(gpu_nodes=("gpu1",)))["kube-prometheus-stack"]
    assert values["kube-state-metrics"]["metricLabelsAllowlist"] == ["namespaces=[example.com/cost-center]"]


def test_no_variant_touches_the_exporters_pod_mapping() -> None:
    for variant in TYPE_VARIANTS:
        for release, values in render_variant(variant).items():
            text = json.dumps(values)
            assert "DCGM_EXPORTER_KUBERNETES" not in text, (variant, release)
            if release == "dcgm-exporter":
                assert not {"kubeletPath", "kubernetes", "extraEnv"} & set(values), variant
                # --kubernetes-virtual-gpus=true (time-slicing/MPS) keeps the mapping and adds one series per pod
                assert not [a for a in values["arguments"] if a.startswith(("-k", "--kubernetes"))
                            and a != "--kubernetes-virtual-gpus=true"], variant  # fmt: skip
