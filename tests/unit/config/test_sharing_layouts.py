"""Issue #21, the config/apply parts: custom MIG layouts (gpu_sharing.mig_layouts -> gpustack-mig-config), MIG with
time-slicing, renamed shared resources (renameByDefault) and node groups (gpu_sharing.groups): the rules (exit 2
naming the field), the layout check against the real H100's placements, the ConfigMaps against the operator's own
configuration, P26 on recorded facts, the G15 expectations and the cluster step on the fake API server."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack.checks import preflight as pf
from gpustack.cluster import sharing as cs
from gpustack.config import mig
from gpustack.config import mig_layout as ml
from gpustack.config import sharing as cfs
from gpustack.config.model import Config
from gpustack.diagnose import registry
from gpustack.diagnose import sharing as dsh
from gpustack.diagnose.snapshot import Snapshot
from gpustack.render import mig_config as rmc
from gpustack.render import sharing as rs
from gpustack.runners.kube import Kube
from tests.fakes.kube_api import FakeKubeAPI
from tests.fakes.mig_manager import FakeMigManager
from tests.unit.config.test_sharing import FACTS, STATIC, _ids, _static, config_error, nodes
from tests.unit.test_recorded_h100 import fits, real_profiles

from ..nodes_cluster import node

H100, A30 = "0x2330", "0x20b7"
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}}
MIX = [{"devices": "all", "mig-devices": {"1g.10gb": 4, "3g.40gb": 1}}]


def cfg(*sharing: dict[str, Any] | None, layouts: Any = None, groups: Any = None, **gpu: Any) -> Config:
    section = {"mig_layouts": {"infer-mix": MIX} if layouts is None else layouts, "groups": groups or {}}
    return Config.model_validate({"nodes": nodes(*sharing), "gpu_sharing": section, "gpu": gpu})


# --- the configuration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "field", "words"),
    [
        ({"mig_layouts": {"big": [{"mig-devices": {"3g.40gb": 2, "1g.10gb": 1}}]}}, "gpu_sharing.mig_layouts.big",
         "9 memory slices"),
        ({"mig_layouts": {"big": [{"mig-devices": {"1g.20gb": 5}}]}}, "gpu_sharing.mig_layouts.big", "at most 4"),
        ({"mig_layouts": {"all-mine": MIX}}, "gpu_sharing.mig_layouts.all-mine", "GPU Operator's own"),
        ({"mig_layouts": {"x": [{"devices": [0], "mig-devices": {"1g.10gb": 1}},
                                {"devices": [0, 1], "mig-devices": {"1g.10gb": 2}}]}}, "gpu_sharing.mig_layouts.x",
         "GPU 0 is named by two entries"),
        ({"mig_layouts": {"x": [{"mig-devices": {"1g": 1}}]}}, "gpu_sharing.mig_layouts.x[0].mig-devices",
         "not a GPU instance profile"),
        ({"groups": {"a": {"nodes": ["n1", "ghost"], "sharing": {"mode": "none"}}}}, "gpu_sharing.groups.a.nodes[1]",
         "'ghost' is not a node"),
        ({"groups": {"a": {"nodes": ["n1"], "sharing": {"mode": "none"}},
                     "b": {"nodes": ["n1"], "sharing": {"mode": "time-slicing", "replicas": 2}}}},
         "gpu_sharing.groups.b.nodes[0]", "already in group a"),
    ],
)  # fmt: skip
def test_bad_layouts_and_groups_are_refused_naming_the_field(
    tmp_path: Path, section: dict[str, Any], field: str, words: str
) -> None:
    msg = config_error(tmp_path, {"nodes": nodes(None, None), "gpu_sharing": section})
    assert field in msg and words in msg, msg


def test_single_refuses_a_layout_with_two_device_types(tmp_path: Path) -> None:
    data = {"nodes": nodes(None, {"mode": "mig", "profile": "infer-mix"}), "gpu": {"mig_strategy": "single"},
            "gpu_sharing": {"mig_layouts": {"infer-mix": MIX}}}  # fmt: skip
    msg = config_error(tmp_path, data)
    assert "nodes[1].gpu_sharing.profile" in msg and "more than one MIG device type" in msg, msg


def test_a_nodes_own_setting_wins_over_its_group() -> None:
    groups = {"g": {"nodes": ["n0", "n1"], "sharing": {"mode": "time-slicing", "replicas": 3}}}
    c = cfg({"mode": "mig", "profile": "all-1g.10gb"}, None, groups=groups)
    assert {k: v.mode for k, v in cfs.settings(c).items()} == {"n0": "mig", "n1": "time-slicing"}
    assert cfs.describe(c) == {"n0": "node", "n1": "group g"} and cfs.config_problems(c) == []
    rows = {r[0]: r for r in rs.plan_rows(c)}
    assert "from group g" in rows["n1"][2] and "device-plugin.config=time-slicing-3" in rows["n1"][3]


# --- the layout check against the real GPU ---------------------------------------------------------------


def test_the_fit_check_agrees_with_the_real_h100_placements() -> None:
    """Every layout of up to 7 instances of the H100's profiles: gpustack's check (budgets, counts, placements)
    accepts exactly those NVML's real placements can place."""
    fam, real = mig.family_of(H100), real_profiles()
    assert fam is not None
    placements = {name: info["placements"] for name, info in real.items()}
    names = sorted(placements)
    checked = 0
    for n in range(1, 8):
        for combo in itertools.combinations_with_replacement(names, n):
            layout = {p: combo.count(p) for p in set(combo)}
            within_counts = all(k <= fam.profiles[p] for p, k in layout.items())
            assert (not ml.fit_problems(fam, layout)) == (within_counts and fits(layout, placements)), layout
            checked += 1
    assert checked > 1000


def test_profile_memory_slices_match_nvml() -> None:
    fam = mig.family_of(H100)
    assert fam is not None
    for name, info in real_profiles().items():
        assert ml.profile_memory_slices(fam, name) == info["placements"][0]["size"], name


# --- what gpustack writes --------------------------------------------------------------------------------


def test_mig_configmap_carries_the_operators_configs_and_the_custom_ones() -> None:
    c = cfg(None, {"mode": "mig", "profile": "infer-mix"}, {"mode": "mig", "profile": "all-1g.10gb"})
    cm = rmc.mig_configmap(c)
    assert cm is not None and cm["metadata"]["name"] == "gpustack-mig-config"
    data = yaml.safe_load(cm["data"]["config.yaml"])
    assert data["version"] == "v1"
    configs = data["mig-configs"]
    assert configs["infer-mix"] == [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 4, "3g.40gb": 1}}
    ]
    static = _static()
    for name in ("all-disabled", "all-enabled"):
        assert configs[name] == static[name]
    for name, entries in configs.items():
        for e in entries:
            if e.get("device-filter"):  # each family entry is the operator's own, filter and layout
                same = [s for s in static[name] if _ids(s) & _ids(e)] or [s for s in static[name] if not _ids(s)]
                assert same, name
                assert {k: int(v) for k, v in same[0]["mig-devices"].items()} == e["mig-devices"], name
    assert rmc.mig_configmap(cfg(None, {"mode": "mig", "profile": "all-1g.10gb"})) is None
    assert STATIC.is_file()


@pytest.mark.parametrize(
    ("sharing", "strategy", "key", "resources", "rename"),
    [
        ({"mode": "mig", "profile": "infer-mix", "replicas": 2}, "mixed", "time-slicing-2-mig-1g.10gb-3g.40gb",
         ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"], False),
        ({"mode": "mig", "profile": "all-1g.10gb", "replicas": 3, "rename": True}, "mixed",
         "time-slicing-3-mig-1g.10gb-renamed", ["nvidia.com/mig-1g.10gb"], True),
        ({"mode": "mig", "profile": "all-1g.10gb", "replicas": 2}, "single", "time-slicing-2", ["nvidia.com/gpu"],
         False),
        ({"mode": "time-slicing", "replicas": 4, "rename": True}, "mixed", "time-slicing-4-renamed",
         ["nvidia.com/gpu"], True),
    ],
)  # fmt: skip
def test_device_plugin_config_of_shared_mig_and_renamed_gpus(
    sharing: dict[str, Any], strategy: str, key: str, resources: list[str], rename: bool
) -> None:
    c = cfg(None, sharing, mig_strategy=strategy)
    assert [w.device_plugin for w in rs.node_sharing(c)] == [key]
    cm = rs.device_plugin_configmap(c)
    assert cm is not None
    text = cm["data"][key]
    section = yaml.safe_load(text)["sharing"]["timeSlicing"]
    assert [r["name"] for r in section["resources"]] == resources and section["renameByDefault"] is rename
    setting, problem = dsh.plugin_config(text)  # the device plugin's own rules (G16) accept it
    assert problem == "" and setting is not None and setting.renamed is rename


def test_expected_resources_count_replicas_times_instances() -> None:
    c = cfg(None, {"mode": "mig", "profile": "infer-mix", "replicas": 2, "rename": True},
            {"mode": "time-slicing", "replicas": 4, "rename": True})  # fmt: skip
    got = rs.expected_resources(c, {"n1": (H100, H100), "n2": (A30,)})
    assert got["n1"] == {"nvidia.com/mig-1g.10gb": 0, "nvidia.com/mig-1g.10gb.shared": 16,
                         "nvidia.com/mig-3g.40gb": 0, "nvidia.com/mig-3g.40gb.shared": 4, "nvidia.com/gpu": 0}  # fmt: skip
    assert got["n2"] == {"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 4}
    per_index = [{"devices": [0], "mig-devices": {"7g.80gb": 1}}, {"devices": [1], "mig-enabled": False}]
    c2 = cfg(None, {"mode": "mig", "profile": "split"}, layouts={"split": per_index})
    assert rs.expected_resources(c2, {"n1": (H100, H100)}) == {"n1": {"nvidia.com/mig-7g.80gb": 1, "nvidia.com/gpu": 1}}


# --- preflight P26 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "device", "status", "words"),
    [
        (MIX, H100, "pass", "1g.10gb x4, 3g.40gb x1 per GPU, each x2"),
        (MIX, A30, "fail", "GPU 0: A30 24GB has no profile 1g.10gb, 3g.40gb"),
        ([{"devices": [0], "mig-devices": {"1g.10gb": 7}}], H100, "fail", "GPU 1 is named by no entry"),
    ],
)
def test_p26_checks_a_custom_layout_against_each_gpu(layout: Any, device: str, status: str, words: str) -> None:
    sharing = {"mode": "mig", "profile": "mine", "replicas": 2}
    c = Config.model_validate({"nodes": nodes(None), "gpu_sharing": {
        "mig_layouts": {"mine": layout}, "groups": {"g": {"nodes": ["n0"], "sharing": sharing}}}})  # fmt: skip
    devs = [{"slot": f"0000:{i:02x}:00.0", "device_id": device} for i in range(2)]
    facts = {**FACTS, "nvidia_pci_devices": devs, "nvidia_driver_version": ""}
    [found] = [f for f in pf.run_checks(c, {"n0": facts}) if f.id == "P26-gpu-sharing"]
    assert found.status == status and words in found.summary + found.evidence, found


# --- verify's expectation (G15) --------------------------------------------------------------------------


def _g15(alloc: dict[str, str]) -> list[Any]:
    c = cfg(None, {"mode": "mig", "profile": "all-1g.10gb", "replicas": 2, "rename": True})
    plugin = rs.device_plugin_configmap(c)
    assert plugin is not None
    n = node("n1")
    n["metadata"]["labels"].update(
        {
            "nvidia.com/mig.config": "all-1g.10gb",
            "nvidia.com/mig.config.state": "success",
            "nvidia.com/device-plugin.config": "time-slicing-2-mig-1g.10gb-renamed",
        }
    )
    n["status"]["allocatable"] = alloc
    policy = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"mig": {"strategy": "mixed"}, "devicePlugin": {"config": {"name": plugin["metadata"]["name"]}}},
    }
    snap = Snapshot(
        kube={"Node": [n], "ConfigMap": [plugin], "ClusterPolicy": [policy]},
        hosts={"n1": {"nvidia_pci_devices": [{"device_id": H100}, {"device_id": H100}]}},
    )
    return [f for f in registry.run([registry.load_all()["G15-sharing-allocatable"]], snap) if f.status != "pass"]


def test_g15_counts_time_sliced_renamed_mig_devices() -> None:
    assert _g15({"nvidia.com/mig-1g.10gb.shared": "28", "nvidia.com/gpu": "0"}) == []  # 2 GPUs x 7 x 2
    [bad] = _g15({"nvidia.com/mig-1g.10gb": "14", "nvidia.com/gpu": "0"})
    assert "nvidia.com/mig-1g.10gb.shared: want 28, allocatable 0" in bad.evidence
    assert "nvidia.com/mig-1g.10gb: want 0, allocatable 14" in bad.evidence


# --- the cluster step on the fake API server ------------------------------------------------------------


def test_a_custom_layout_is_applied_with_one_mig_manager_restart(fake_api: FakeKubeAPI, kube: Kube) -> None:
    """The group's node gets the custom layout's name; the MIG manager, whose mount predates the layout, first
    fails ("not present"); the step restarts it once and the layout is applied: 2 x (4 + 1) MIG devices."""
    c = cfg(None, None, groups={"g": {"nodes": ["n1"], "sharing": {"mode": "mig", "profile": "infer-mix"}}})
    fake_api.seed([node("n0", cp=True), node("n1"), NAMESPACE])
    mm = FakeMigManager(fake_api, {"n1": (H100, 2)}, custom=True)
    mm.start_pods()
    cm = rmc.mig_configmap(c)
    assert cm is not None
    kube.apply_one(cm)  # the cluster layer applies it with the other manifests, after the MIG manager started
    now = [0.0]  # a fake clock: the step waits CONFIG_SYNC (90 s) before the restart

    def sleep(seconds: float) -> None:
        now[0] += seconds

    def clock() -> float:
        now[0] += 0.5
        return now[0]

    fast = {"interval": 1.0, "mig_timeout": 200.0, "clock": clock, "sleep": sleep}
    result = cs.converge_sharing(c, kube, **fast)
    [n1] = result.nodes
    assert n1.changed == {"nvidia.com/mig.config": "infer-mix"} and n1.state == "success"
    assert mm.restarts == {"n1": 1} and any("not present" in line for line in mm.logs["n1"])
    assert now[0] >= cs.CONFIG_SYNC  # the restart came after the kubelet's sync period
    alloc = fake_api.get("v1", "Node", "n1")["status"]["allocatable"]  # type: ignore[index]
    assert alloc["nvidia.com/mig-1g.10gb"] == "8" and alloc["nvidia.com/mig-3g.40gb"] == "2"
    again = cs.converge_sharing(c, kube, **fast)
    assert not again.changed and mm.restarts == {"n1": 1}


def test_the_mig_configmap_goes_when_no_node_uses_a_layout(fake_api: FakeKubeAPI, kube: Kube) -> None:
    fake_api.seed([node("n0", cp=True), node("n1"), NAMESPACE])
    cm = rmc.mig_configmap(cfg(None, {"mode": "mig", "profile": "infer-mix"}))
    assert cm is not None
    kube.apply_one(cm)
    result = cs.converge_sharing(cfg(None, {"mode": "none"}), kube, interval=0.0, mig_timeout=5.0)
    assert result.mig_configmap_deleted and "gpustack-mig-config deleted" in result.detail()
    assert json.dumps(fake_api.get("v1", "ConfigMap", "gpustack-mig-config", "gpu-operator")) == "null"


def test_an_all_profile_no_family_offers_is_refused_at_load(tmp_path: Path) -> None:
    # issue 29: all-2g.99gb passed plan and render; only the hosts' preflight caught it
    msg = config_error(tmp_path, {"nodes": nodes(None, {"mode": "mig", "profile": "all-2g.99gb"})})
    assert "nodes[1].gpu_sharing.profile" in msg and "no MIG configuration of any GPU family" in msg, msg
    assert "all-2g.20gb" in msg and "gpu_sharing.mig_layouts" in msg
    for known in ("all-1g.18gb", "all-3g.71gb", "all-1g.10gb.me", "all-balanced"):  # H200, and the others
        assert not [p for p in cfs.config_problems(cfg(None, {"mode": "mig", "profile": known})) if "profile" in p[0]]


def test_a_bad_h200_layout_is_explained_by_the_h200(tmp_path: Path) -> None:
    # issue 29: the message named the first three families ("A100 has no 1g.18gb") instead of the real cause
    section = {"mig_layouts": {"h200": [{"mig-devices": {"1g.18gb": 5, "3g.71gb": 1}}]}}
    msg = config_error(tmp_path, {"nodes": nodes(None, None), "gpu_sharing": section})
    assert "H200 141GB / H200 NVL: 8 compute slices, H200 141GB / H200 NVL has 7" in msg, msg
    assert "A100" not in msg and "has no profile" not in msg
