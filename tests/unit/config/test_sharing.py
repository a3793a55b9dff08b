"""GPU sharing in the configuration: the models and rules (exit 2 naming the field), the MIG table against the
GPU Operator's own configuration, the preflight check P26 on recorded facts, and what render produces."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack.checks import preflight as pf
from gpustack.config import mig
from gpustack.config import sharing as cfs
from gpustack.config.load import load
from gpustack.config.model import Config
from gpustack.config.sharing import Mps, TimeSlicing, mig_strategy
from gpustack.errors import ConfigError
from gpustack.render import sharing as rs
from gpustack.render.files import generated_files

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
# NVIDIA/gpu-operator v26.7.0 assets/state-mig-manager/0400_configmap.yaml, verbatim (source in the file's header)
STATIC = FIXTURES / "mig" / "default-mig-parted-config.yaml"
H100, A30, L40S, GH200 = "0x2330", "0x20b7", "0x26b5", "0x2342"


def nodes(*sharing: dict[str, Any] | None) -> list[dict[str, Any]]:
    out = []
    for i, s in enumerate(sharing):
        n: dict[str, Any] = {
            "name": f"n{i}",
            "address": f"192.0.2.{10 + i}",
            "role": "worker" if i else "control-plane",
        }
        if s is not None:
            n["gpu_sharing"] = s
        out.append(n)
    return out


def config_error(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "gpustack.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with pytest.raises(ConfigError) as ei:
        load(path, environ={}, cwd=tmp_path)
    assert ei.value.exit_code == 2
    return ei.value.message


# --- the model and its rules --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sharing", "gpu", "field", "words"),
    [
        ({"mode": "mig"}, {}, "nodes[1].gpu_sharing.profile", "required"),
        ({"mode": "mig", "profile": "1g.10gb"}, {}, "nodes[1].gpu_sharing.profile", "all-<profile>"),
        ({"mode": "mig", "profile": "all-disabled"}, {}, "nodes[1].gpu_sharing.profile", "use mode: none"),
        ({"mode": "mig", "profile": "all-enabled"}, {}, "nodes[1].gpu_sharing.profile", "no MIG devices"),
        ({"mode": "time-slicing", "replicas": 1}, {}, "nodes[1].gpu_sharing.replicas", "greater than or equal to 2"),
        ({"mode": "mps", "replicas": 49}, {}, "nodes[1].gpu_sharing.replicas", "less than or equal to 48"),
        ({"mode": "time-slicing"}, {}, "nodes[1].gpu_sharing.replicas", "required"),
        ({"mode": "mig", "profile": "all-balanced", "replicas": 2}, {}, "nodes[1].gpu_sharing.replicas",
         "define the layout"),
        ({"mode": "mig", "profile": "all-1g.10gb", "rename": True}, {}, "nodes[1].gpu_sharing.rename",
         "set replicas too"),
        ({"mode": "mig", "profile": "infer-mix"}, {}, "nodes[1].gpu_sharing.profile", "gpu_sharing.mig_layouts"),
        ({"mode": "vgpu"}, {}, "nodes[1].gpu_sharing", "'none', 'mig', 'time-slicing', 'mps'"),
        ({"mode": "mps", "replicas": 4}, {"mig_strategy": "mixed"}, "gpu.mig_strategy", "mixed does not work with MPS"),
        ({"mode": "mig", "profile": "all-balanced"}, {"mig_strategy": "single"}, "nodes[1].gpu_sharing.profile",
         "more than one MIG device type"),
    ],
)  # fmt: skip
def test_bad_sharing_is_refused_naming_the_field(
    tmp_path: Path, sharing: dict[str, Any], gpu: dict[str, Any], field: str, words: str
) -> None:
    msg = config_error(tmp_path, {"nodes": nodes(None, sharing), "gpu": gpu})
    assert f"{field}:" in msg and words in msg, msg
    assert "gpustack.yaml:" in msg  # file and line


def test_mps_and_balanced_mig_cannot_share_a_cluster(tmp_path: Path) -> None:
    """MPS makes auto single, and single cannot advertise all-balanced: the error says so, without
    suggesting mixed (which MPS refuses)."""
    msg = config_error(tmp_path, {"nodes": nodes({"mode": "mps", "replicas": 4},
                                                 {"mode": "mig", "profile": "all-balanced"})})  # fmt: skip
    assert "nodes[1].gpu_sharing.profile" in msg and "a node uses mps" in msg and "mig_strategy: mixed" not in msg


@pytest.mark.parametrize(
    ("sharing", "chosen", "want"),
    [
        ([{"mode": "mig", "profile": "all-1g.10gb"}], "auto", "mixed"),
        ([{"mode": "mig", "profile": "all-1g.10gb"}, {"mode": "mps", "replicas": 2}], "auto", "single"),
        ([{"mode": "mig", "profile": "all-1g.10gb"}], "single", "single"),
        ([None], "auto", "mixed"),
    ],
)
def test_mig_strategy(sharing: list[dict[str, Any] | None], chosen: str, want: str) -> None:
    cfg = Config.model_validate({"nodes": nodes(*sharing), "gpu": {"mig_strategy": chosen}})
    assert mig_strategy(cfg) == want


def test_good_sharing_config_loads(tmp_path: Path) -> None:
    path = tmp_path / "gpustack.yaml"
    path.write_text(textwrap.dedent("""\
        nodes:
          - {name: cp, address: 192.0.2.10, role: control-plane, gpu_sharing: {mode: mig, profile: all-1g.10gb}}
          - {name: w1, address: 192.0.2.11, gpu_sharing: {mode: time-slicing, replicas: 4}}
          - {name: w2, address: 192.0.2.12, gpu_sharing: {mode: none}}
          - {name: w3, address: 192.0.2.13}
        """), encoding="utf-8")  # fmt: skip
    cfg = load(path, environ={}, cwd=tmp_path).config
    assert [n.gpu_sharing.mode if n.gpu_sharing else None for n in cfg.nodes] == ["mig", "time-slicing", "none", None]


# --- the MIG table against the operator's static configuration ---------------------------------------


def _static() -> dict[str, list[dict[str, Any]]]:
    doc = yaml.safe_load(STATIC.read_text(encoding="utf-8"))
    return yaml.safe_load(doc["data"]["config.yaml"])["mig-configs"]  # type: ignore[no-any-return]


def _ids(entry: dict[str, Any]) -> set[str]:
    filt = entry.get("device-filter")
    listed = [filt] if isinstance(filt, str) else filt or []
    return {mig.normalize_device_id(f[:6]) for f in listed}


def test_every_family_matches_the_static_configuration() -> None:
    """Every config a family offers is in the operator's static configuration with the same layout, on the entry
    whose device-filter names the family's GPUs (or the one without a filter)."""
    static = _static()
    for fam in mig.FAMILIES:
        for name, layout in fam.configs().items():
            assert name in static, (fam.name, name)
            entries = static[name]
            mine = [e for e in entries if _ids(e) & set(fam.device_ids)] or [e for e in entries if not _ids(e)]
            assert mine, (fam.name, name)
            assert {k: int(v) for k, v in mine[0]["mig-devices"].items()} == layout, (fam.name, name)


def test_every_filtered_gpu_is_known_as_mig_capable() -> None:
    ids = {i for entries in _static().values() for e in entries for i in _ids(e)}
    assert ids and sorted(i for i in ids if not mig.mig_capable(i)) == []
    assert not mig.mig_capable(L40S) and mig.family_of("10de:2330") is mig.family_of("0x2330")


def test_resource_names_and_slices() -> None:
    assert mig.resource_name("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    assert mig.config_name("1g.10gb+me") == "all-1g.10gb.me"
    assert [mig.compute_slices(p) for p in ("3g.40gb", "all-7g.80gb", "nvidia.com/mig-1g.10gb.me")] == [3, 7, 1]
    with pytest.raises(ValueError):
        mig.compute_slices("gpu")
    assert mig.layout(H100, "all-1g.10gb") == {"1g.10gb": 7} and mig.layout(A30, "all-1g.10gb") is None
    assert mig.layout("0x20b0", "all-1g.10gb") == {"1g.10gb": 4}  # A100 40GB: four of them


# --- preflight P26 -------------------------------------------------------------------------------------

FACTS = json.loads((FIXTURES / "facts" / "ubuntu2204-gpu.json").read_text(encoding="utf-8"))


def p26(sharing: dict[str, Any] | None, device: str | None = H100, **over: Any) -> pf.Finding:
    cfg = Config.model_validate({"nodes": nodes(sharing)})
    devs = [] if device is None else [{"slot": f"0000:{i:02x}:00.0", "device_id": device} for i in range(2)]
    facts = {**FACTS, "nvidia_pci_devices": devs, "nvidia_driver_version": "", **over}
    [found] = [f for f in pf.run_checks(cfg, {"n0": facts}) if f.id == "P26-gpu-sharing"]
    return found


@pytest.mark.parametrize(
    ("sharing", "device", "status", "words"),
    [
        (None, H100, "pass", "whole GPUs"),
        ({"mode": "mig", "profile": "all-1g.10gb"}, H100, "pass", "1g.10gb x7 per GPU"),
        ({"mode": "mig", "profile": "all-balanced"}, A30, "pass", "1g.6gb x2, 2g.12gb x1"),
        ({"mode": "mig", "profile": "all-1g.10gb"}, L40S, "fail", "has no MIG"),
        ({"mode": "mig", "profile": "all-1g.10gb"}, A30, "fail", "A30 24GB (10de:20b7) cannot take"),
        ({"mode": "mig", "profile": "all-1g.10gb"}, GH200, "warn", "no profile list"),
        ({"mode": "mig", "profile": "all-1g.10gb"}, None, "fail", "no NVIDIA GPU"),
        ({"mode": "time-slicing", "replicas": 4}, L40S, "pass", "2 GPU(s) x 4 = 8 nvidia.com/gpu"),
    ],
)
def test_preflight_knows_what_the_gpu_can_do(
    sharing: dict[str, Any] | None, device: str | None, status: str, words: str
) -> None:
    found = p26(sharing, device)
    assert (found.status, words in found.summary) == (status, True), found
    if status == "fail":
        assert found.fix


@pytest.mark.parametrize(
    ("device", "status", "words"),
    [(None, "pass", "no NVIDIA GPU: gpu_sharing.default (mig) does not apply"), (H100, "pass", "1g.10gb x7"),
     (L40S, "fail", "has no MIG")],
)  # fmt: skip
def test_the_cluster_default_is_checked_on_gpu_nodes_and_passes_a_cpu_node(
    device: str | None, status: str, words: str
) -> None:
    cfg = Config.model_validate(
        {"nodes": nodes(None), "gpu_sharing": {"default": {"mode": "mig", "profile": "all-1g.10gb"}}}
    )
    devs = [] if device is None else [{"slot": "0000:01:00.0", "device_id": device}]
    [found] = [f for f in pf.run_checks(cfg, {"n0": {**FACTS, "nvidia_pci_devices": devs, "nvidia_driver_version": ""}})
               if f.id == "P26-gpu-sharing"]  # fmt: skip
    assert (found.status, words in found.summary) == (status, True), found
    # the default applies where nothing else does: a node's own setting and its group's win
    own = Config.model_validate({"nodes": nodes({"mode": "none"}, None, None), "gpu_sharing": {
        "default": {"mode": "time-slicing", "replicas": 2}, "groups": {"g": {"nodes": ["n1"], "sharing": {"mode": "mps", "replicas": 3}}}}})  # fmt: skip
    assert {k: v.mode for k, v in cfs.settings(own).items()} == {"n0": "none", "n1": "mps", "n2": "time-slicing"}
    assert cfs.describe(own) == {"n0": "node", "n1": "group g", "n2": "default"}
    assert [w.from_default for w in rs.node_sharing(own)] == [False, False, True]
    assert "from default" in {r[0]: r for r in rs.plan_rows(own)}["n2"][2]


def test_preflight_lists_the_configs_the_gpu_takes() -> None:
    found = p26({"mode": "mig", "profile": "all-1g.10gb"}, A30)
    assert "all-1g.6gb" in found.fix and "all-4g.24gb" in found.fix and "all-balanced" in found.fix


def test_preflight_warns_about_a_preinstalled_driver() -> None:
    found = p26({"mode": "mig", "profile": "all-1g.10gb"}, H100, nvidia_driver_version="595.91.07")
    assert found.status == "warn" and "kubelet" in found.fix


# --- what render produces ------------------------------------------------------------------------------

SHARED = Config.model_validate({"nodes": nodes(
    {"mode": "mig", "profile": "all-1g.10gb"}, {"mode": "time-slicing", "replicas": 4},
    {"mode": "mps", "replicas": 2}, {"mode": "none"}, None), "gpu": {"mig_strategy": "single"}})  # fmt: skip


def test_device_plugin_configmap_is_the_plugins_format() -> None:
    cm = rs.device_plugin_configmap(SHARED)
    assert cm is not None and cm["metadata"] == {"name": "gpustack-device-plugin-config", "namespace": "gpu-operator",
                                                  "labels": {"app.kubernetes.io/part-of": "gpustack"}}  # fmt: skip
    assert sorted(cm["data"]) == ["mps-2", "time-slicing-4"]
    ts = yaml.safe_load(cm["data"]["time-slicing-4"])
    assert ts == {"version": "v1", "sharing": {"timeSlicing": {
        "renameByDefault": False, "failRequestsGreaterThanOne": True,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}  # fmt: skip
    assert yaml.safe_load(cm["data"]["mps-2"])["sharing"]["mps"]["resources"][0]["replicas"] == 2
    assert rs.device_plugin_configmap(Config.model_validate({"nodes": nodes(None)})) is None


def test_render_writes_the_configmap_and_values() -> None:
    files = generated_files(SHARED)
    assert "time-slicing-4" in files["manifests/gpu-sharing.yaml"]
    op = yaml.safe_load(files["values/gpu-operator.yaml"])
    assert op["mig"] == {"strategy": "single"} and op["devicePlugin"]["config"]["name"] == rs.DEVICE_PLUGIN_CONFIGMAP
    ex = yaml.safe_load(files["values/dcgm-exporter.yaml"])
    assert ex["nodeSelector"]["nvidia.com/gpu.deploy.client"] == "true"
    assert {"--devices=f", "--kubernetes-virtual-gpus=true"} <= set(ex["arguments"])
    plain = generated_files(Config.model_validate({"nodes": nodes(None)}))
    assert "manifests/gpu-sharing.yaml" not in plain and "mig" not in yaml.safe_load(plain["values/gpu-operator.yaml"])


def test_older_operators_do_not_get_the_deploy_client_selector() -> None:
    old = Config.model_validate({"nodes": nodes({"mode": "mig", "profile": "all-1g.10gb"}),
                                 "versions": {"gpu_operator": "v25.10.1"}})  # fmt: skip
    assert rs.exporter_settings(old).deploy_client is False and rs.exporter_settings(old).devices == "f"


def test_node_labels_and_their_changes() -> None:
    want = {w.node: w for w in rs.node_sharing(SHARED)}
    assert sorted(want) == ["n0", "n1", "n2", "n3"]  # n4 has no gpu_sharing: left alone
    assert rs.label_changes(want["n0"], {}) == {"nvidia.com/mig.config": "all-1g.10gb"}
    assert rs.label_changes(want["n0"], {"nvidia.com/mig.config": "all-1g.10gb"}) == {}
    assert rs.label_changes(want["n1"], {"nvidia.com/mig.config": "all-3g.40gb"}) == {
        "nvidia.com/mig.config": "all-disabled", "nvidia.com/device-plugin.config": "time-slicing-4"}  # fmt: skip
    assert rs.label_changes(want["n3"], {"nvidia.com/mig.config": "all-disabled"}) == {}
    assert rs.label_changes(want["n3"], {"nvidia.com/device-plugin.config": "mps-2"}) == {
        "nvidia.com/device-plugin.config": None}  # fmt: skip
    assert isinstance(SHARED.nodes[1].gpu_sharing, TimeSlicing) and isinstance(SHARED.nodes[2].gpu_sharing, Mps)


def test_expected_resources() -> None:
    gpus = {"n0": (H100,) * 8, "n1": (L40S,) * 2, "n2": (L40S,), "n3": (L40S,), "n4": (L40S,)}
    assert rs.expected_resources(SHARED, gpus) == {
        "n0": {"nvidia.com/gpu": 56}, "n1": {"nvidia.com/gpu": 8}, "n2": {"nvidia.com/gpu": 2},
        "n3": {"nvidia.com/gpu": 1}}  # fmt: skip
    mixed = Config.model_validate({"nodes": nodes({"mode": "mig", "profile": "all-balanced"})})
    assert rs.expected_resources(mixed, {"n0": (H100, H100)}) == {"n0": {
        "nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-2g.20gb": 2, "nvidia.com/mig-3g.40gb": 2, "nvidia.com/gpu": 0}}  # fmt: skip
    assert rs.expected_resources(mixed, {"n0": (GH200,)}) == {}  # a family gpustack does not list: unknown


def test_plan_up_shows_each_sharing_node() -> None:
    from gpustack.commands.up import details

    [table] = [t for t in details(SHARED, None) if t[0].startswith("GPU sharing")]
    rows = {r[0]: r for r in table[2]}
    assert "mig.config=all-1g.10gb" in rows["n0"][3] and "mig.strategy single" in rows["n0"][2]
    assert "device-plugin.config=time-slicing-4" in rows["n1"][3]
    assert not [t for t in details(Config.model_validate({"nodes": nodes(None)}), None) if t[0].startswith("GPU")]


def test_an_all_profile_on_an_unlisted_family_fails_when_gpustack_writes_the_mig_configmap() -> None:
    # issue 29: custom layouts make gpustack write the MIG ConfigMap, whose all-* entries carry device-filters of
    # the families it lists; mig-parted skips a GH200 (assert.go) and reports success with nothing applied
    data = {"nodes": nodes({"mode": "mig", "profile": "all-balanced"}, {"mode": "mig", "profile": "mine"}),
            "gpu_sharing": {"mig_layouts": {"mine": [{"mig-devices": {"1g.10gb": 7}}]}}}  # fmt: skip
    cfg = Config.model_validate(data)
    devs = [{"slot": f"0000:{i:02x}:00.0", "device_id": GH200} for i in range(2)]
    [found] = [f for f in pf.run_checks(cfg, {"n0": {**FACTS, "nvidia_pci_devices": devs, "nvidia_driver_version": ""}})
               if f.id == "P26-gpu-sharing"]  # fmt: skip
    assert found.status == "fail" and "mig-parted skips any other GPU" in found.summary, found
    assert "drop gpu_sharing.mig_layouts" in found.fix
    assert (
        p26({"mode": "mig", "profile": "all-balanced"}, GH200).status == "warn"
    )  # the operator's ConfigMap: a warning
