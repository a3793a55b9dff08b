"""The kubelet settings `gpustack security apply` brings to a running cluster (gpustack/cluster/kubelet_apply.py): the
keys gpustack.yaml's security: renders, merged into kubeadm's kubelet-config ConfigMap (the real kubeadm 1.36.5's
KubeletConfiguration, tests/fixtures/kubelet) with every other key kept, and the judgement of a node's config.yaml,
held to one answer with the role's filter (playbooks/filter_plugins/gpustack_kubelet.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack.cluster import kubelet_apply as ka
from gpustack.config.model import Config
from gpustack.render.security import kubeadm_security
from tests.unit.playbooks.conftest import PLAYBOOKS, load_path

RECORDED = (Path(__file__).resolve().parents[2] / "fixtures/kubelet/kubeadm-1.36.5-config.yaml").read_text()
kubelet_filter = load_path("gpustack_kubelet_filter", PLAYBOOKS / "filter_plugins" / "gpustack_kubelet.py")


def config(**sec: Any) -> Config:
    return Config.model_validate({"nodes": [{"name": "cp1", "address": "192.0.2.1", "role": "control-plane"}],
                                  "security": sec})  # fmt: skip


def test_managed_is_every_kubelet_key_security_renders() -> None:
    assert set(kubeadm_security(config()).kubelet) == set(ka.MANAGED)
    assert kubelet_filter.MANAGED == ka.MANAGED and set(kubelet_filter.FALSE_WHEN_ABSENT) == ka.FALSE_WHEN_ABSENT


def test_a_default_cluster_built_by_kubeadm_has_no_drift_and_an_older_one_has() -> None:
    recorded = yaml.safe_load(RECORDED)
    assert ka.drift(recorded, ka.wanted(config())) == []
    older = {k: v for k, v in recorded.items() if k not in ("protectKernelDefaults", "podPidsLimit")}
    assert ka.drift(older, ka.wanted(config())) == ["protectKernelDefaults", "podPidsLimit"]


@pytest.mark.parametrize(
    ("node", "sec"),
    [
        ({}, {}),
        ({"serverTLSBootstrap": True}, {"protect_kernel_defaults": False, "pod_pids_limit": None, "tls_cipher_suites": []}),
        ({"protectKernelDefaults": False, "serverTLSBootstrap": True}, {"protect_kernel_defaults": False,
          "pod_pids_limit": None, "tls_cipher_suites": []}),
        ({"podPidsLimit": 4096, "protectKernelDefaults": True}, {}),
        ({"tlsCipherSuites": ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]}, {}),
        ("not a mapping", {}),
    ],
)  # fmt: skip
def test_the_role_and_the_command_judge_a_config_alike(node: Any, sec: dict[str, Any]) -> None:
    want = ka.wanted(config(**sec))
    got = ka.drift(node if isinstance(node, dict) else {}, want)
    assert kubelet_filter.gpustack_kubelet_drift(node, want) == got


def test_the_merge_sets_the_managed_keys_and_keeps_everything_else() -> None:
    recorded = yaml.safe_load(RECORDED)
    merged = yaml.safe_load(ka.merged_kubelet_config(RECORDED, config(pod_pids_limit=None, tls_cipher_suites=[])))
    assert "podPidsLimit" not in merged and "tlsCipherSuites" not in merged
    assert merged["protectKernelDefaults"] is True and merged["serverTLSBootstrap"] is True
    assert {k: v for k, v in merged.items() if k not in ka.MANAGED} == {
        k: v for k, v in recorded.items() if k not in ka.MANAGED
    }
    with pytest.raises(ValueError, match="no KubeletConfiguration"):
        ka.merged_kubelet_config("kind: Something\n", config())
