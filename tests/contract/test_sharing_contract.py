"""Contract: GPU sharing's names and texts are the pinned GPU Operator's (tests/contract/upstream/gpu_sharing.yaml:
gpu-operator v26.7.0, k8s-mig-manager v0.15.0, k8s-device-plugin v0.20.0) in gpustack's code and in the doubles
that stand for them: the MIG manager double (tests/fakes/mig_manager.py) logs and labels as the real one does."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from gpustack.render import sharing as rs
from tests.fakes import mig_manager as fm
from tests.fakes.kube_api import FakeKubeAPI
from tests.unit.nodes_cluster import node, pod

FACTS = Path(__file__).resolve().parent / "upstream" / "gpu_sharing.yaml"


@cache
def facts() -> dict[str, Any]:
    return yaml.safe_load(FACTS.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_gpustack_uses_the_operators_label_names() -> None:
    mm, dp, op = facts()["mig_manager"], facts()["device_plugin"], facts()["operator"]
    assert (mm["config_label"], mm["state_label"]) == (rs.MIG_CONFIG_LABEL, rs.MIG_STATE_LABEL)
    assert dp["config_label"] == rs.DEVICE_PLUGIN_LABEL
    assert rs.DEPLOY_CLIENT_LABEL == op["deploy_client_label"] in mm["deploy_labels"]


def test_the_mig_manager_double_labels_as_the_real_one() -> None:
    mm = facts()["mig_manager"]
    assert (mm["config_label"], mm["state_label"], mm["paused"]) == (fm.CONFIG, fm.STATE, fm.PAUSED)
    assert set(fm.DEPLOY_LABELS) <= set(mm["deploy_labels"])


def test_the_mig_manager_double_logs_what_the_real_one_logs() -> None:
    """One node per outcome: applied, a name the GPU does not offer, a GPU a pod still uses."""
    mm = facts()["mig_manager"]
    api = FakeKubeAPI()
    busy = pod("train-0", "w3")
    busy["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    nodes = [node("w1"), node("w2"), node("w3")]
    for n, config in zip(nodes, ("all-1g.10gb", "all-1g.6gb", "all-3g.40gb"), strict=True):
        n["metadata"]["labels"][fm.CONFIG] = config
    api.seed([*nodes, busy])
    double = fm.FakeMigManager(api, {"w1": ("0x2330", 1), "w2": ("0x2330", 1), "w3": ("0x2330", 1)}, steps=1)
    for _ in range(3):
        double.tick()
    states = {n: api.objects[("", "v1", "nodes", "", n)]["metadata"]["labels"][fm.STATE] for n in ("w1", "w2", "w3")}
    assert states == {"w1": "success", "w2": "failed", "w3": "failed"} and set(states.values()) <= set(mm["states"])
    log = {n: "\n".join(lines) for n, lines in double.logs.items()}
    assert mm["log"]["updating"] in log["w1"] and mm["log"]["done"] + "all-1g.10gb" in log["w1"]
    assert mm["log"]["not_present"] + "all-1g.6gb" in log["w2"] and mm["log"]["validate"] in log["w2"]
    assert mm["in_use"]["text"] in log["w3"] and mm["log"]["apply"] in log["w3"]
    w1 = api.objects[("", "v1", "nodes", "", "w1")]
    assert w1["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "7"
    assert all(v == "true" for k, v in w1["metadata"]["labels"].items() if k in fm.DEPLOY_LABELS)


def test_the_checks_recognise_the_upstream_messages() -> None:
    """doctor's classifiers (gpustack/diagnose/checks_sharing.py) match the texts the MIG manager and the device plugin
    print, and the device plugin's rules (gpustack/diagnose/sharing.py) answer with its own messages."""
    from gpustack.diagnose import checks_sharing as cs
    from gpustack.diagnose import sharing as sh

    mm, dp = facts()["mig_manager"], facts()["device_plugin"]
    assert cs.NOT_PRESENT.search(mm["log"]["not_present"]) and cs.NOT_PRESENT.search(mm["log"]["validate"])
    assert cs.IN_USE.search(mm["in_use"]["text"]) and cs.IN_USE.search(mm["log"]["apply"])
    assert cs.MODE.search(mm["log"]["mode"]) and cs.MODE.search(mm["log"]["reboot"])
    assert cs.CLIENTS.search(mm["log"]["clients"])
    assert cs.KEY_MISSING.search(dp["errors"]["missing_key"].replace("%v", "time-slicing-8"))
    for key in ("load", "replicas", "mps_mixed", "mps_mig", "mps_max", "version"):
        assert cs.PLUGIN_ERROR.search(dp["errors"][key]), key
    rules = {
        "version: v2": "version",
        "sharing: {timeSlicing: {renameByDefault: true}}": "no_resources",
        "sharing: {timeSlicing: {resources: [{name: gpu}]}}": "no_replicas",
        "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 1}]}}": "replicas",
        "sharing: {mps: {resources: [{name: gpu, replicas: 64}]}}": "mps_max",
    }
    for text, key in rules.items():
        assert dp["errors"][key] in sh.plugin_config(text)[1], key


def test_gpustacks_mig_configmap_and_rename_are_the_operators() -> None:
    """gpustack-mig-config has the one key the operator mounts and keeps its default config; the fake MIG manager
    reads that key; a renamed shared resource ends as the device plugin names it."""
    from gpustack.config import sharing as cs
    from gpustack.config.model import Config
    from gpustack.render import mig_config as rmc

    custom = facts()["mig_manager"]["custom_config"]
    cfg = Config.model_validate({
        "nodes": [{"name": "n0", "address": "192.0.2.10", "role": "control-plane",
                   "gpu_sharing": {"mode": "mig", "profile": "mine"}}],
        "gpu_sharing": {"mig_layouts": {"mine": [{"mig-devices": {"1g.10gb": 7}}]}},
    })  # fmt: skip
    cm = rmc.mig_configmap(cfg)
    assert cm is not None and list(cm["data"]) == [custom["key"]] == [rmc.CONFIG_KEY]
    assert custom["default"] in yaml.safe_load(cm["data"][custom["key"]])["mig-configs"]
    assert '"config.yaml"' in (Path(fm.__file__).read_text(encoding="utf-8"))
    suffix = facts()["device_plugin"]["shared_suffix"]["value"]
    assert cs.shared_name("nvidia.com/mig-1g.10gb", True) == "nvidia.com/mig-1g.10gb" + suffix
