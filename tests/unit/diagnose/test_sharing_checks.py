"""GPU sharing checks G12..G18 (gpustack/diagnose/checks_sharing.py) on fake clusters (tests/fakes/sharing_scenarios.py)
read through the real client: healthy MIG and time-sliced clusters pass, each failure names its cause and the
GPU Operator's fix; verify's test pods on a MIG device / a shared GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.diagnose import registry
from gpustack.diagnose import sharing as sh
from gpustack.diagnose.collect import CollectContext
from gpustack.diagnose.collect_sharing import collect_sharing_workload, targets
from gpustack.diagnose.collect_workload import cuda_resource
from gpustack.diagnose.snapshot import Snapshot
from gpustack.runners.kube import Kube
from tests.fakes import scenarios as sc
from tests.fakes import sharing_scenarios as ss
from tests.fakes.kube_api import FakeKubeAPI

SHARING = ("G12", "G13", "G14", "G15", "G16", "G17")


def checks(api: FakeKubeAPI, kubeconfig: Path, scenario: sc.Scenario) -> dict[str, list[Finding]]:
    scenario.load(api)
    out: dict[str, list[Finding]] = {}
    for f in sc.run_checks(sc.collect_kube(api, kubeconfig, hosts=scenario.hosts)):
        out.setdefault(f.id.split("-")[0], []).append(f)
    return out


@pytest.mark.parametrize(("nodes", "mode"), [(1, "mixed"), (3, "mixed"), (1, "single"), (3, "time-slicing")])
def test_healthy_shared_clusters_pass(fake_api: FakeKubeAPI, kubeconfig: Path, nodes: int, mode: str) -> None:
    s = sc.healthy(nodes)
    ss.make_time_sliced(s) if mode == "time-slicing" else ss.make_mig(s, strategy=mode)
    if mode == "single":  # GFD counts MIG devices as GPUs then: the physical GPUs come from the host facts
        s.hosts = {n["metadata"]["name"]: {"nvidia_pci_devices": [{"device_id": ss.H100}] * sc.GPUS} for n in s.nodes()}
    found = checks(fake_api, kubeconfig, s)
    # K10 warns on every cluster on the pinned containerd 2.3.4 (its open security releases 2.3.5/2.3.6, issue 30;
    # tests/unit/diagnose/test_support_check.py): not a sharing finding
    assert [f for fs in found.values() for f in fs if f.status not in ("pass", "skip")
            and not (f.id == "K10-support-horizons" and "open security release" in f.summary)] == []  # fmt: skip
    assert all(f.status == "pass" for c in SHARING for f in found[c])
    assert all(found[c] for c in SHARING)
    # G15 computed what the node must advertise (a pass from an evaluation, not from missing data)
    node = s.nodes()[-1]
    snap = Snapshot(kube={"Node": [node], "ConfigMap": [o for o in s.objects if o["kind"] == "ConfigMap"],
                          "ClusterPolicy": [s.find("ClusterPolicy", "cluster-policy")]}, hosts=s.hosts)  # fmt: skip
    want = sh.expected_shared(snap, node)[0] if mode == "time-slicing" else sh.expected_mig(snap, node)
    expected = {"mixed": {"nvidia.com/mig-1g.10gb": 56}, "single": {"nvidia.com/gpu": 56},
                "time-slicing": {"nvidia.com/gpu": 32}}[mode]  # fmt: skip
    assert want is not None and want.resources == expected


def one(found: dict[str, list[Finding]], check: str) -> Finding:
    [f] = [f for f in found[check] if f.status != "pass"]
    return f


@pytest.mark.parametrize(("failure", "check", "words_summary", "words_fix"), [
    ("mig-failed-in-use", "G12", "In use by another client", "delete pod -l app=nvidia-mig-manager"),
    ("mig-stuck-pending", "G12", "stuck", "delete what did not stop (gpu-operator/dcgm-exporter-00002)"),
    ("mig-profile-unsupported", "G13", "cannot take MIG configuration all-1g.5gb", "all-1g.10gb"),
    ("mig-whole-gpus", "G14", "still advertises whole GPUs", "/spec/mig/strategy"),
    ("mig-allocatable-short", "G15", "nvidia.com/mig-1g.10gb: want 56, allocatable 49", "rollout restart"),
    ("exporter-no-deploy-client", "G17", "keeps running through MIG changes", "nvidia\\.com/gpu\\.deploy\\.client=true"),
    ("time-slicing-configmap-missing", "G16", "does not exist", "gpustack up --only cluster"),
    ("time-slicing-key-missing", "G16", "names no key", "kubectl label node"),
    ("time-slicing-config-invalid", "G16", "refused by the device plugin", "rollout restart"),
    ("time-slicing-stale", "G15", "another sharing setting", "does not watch the ConfigMap"),
])  # fmt: skip
def test_each_failure_names_its_cause_and_fix(
    fake_api: FakeKubeAPI, kubeconfig: Path, failure: str, check: str, words_summary: str, words_fix: str
) -> None:
    scenario, want = sc.failure(failure)
    assert want.startswith(check)
    f = one(checks(fake_api, kubeconfig, scenario), check)
    assert f.status == "fail" and (words_summary in f.summary or words_summary in f.evidence), f
    assert words_fix in f.fix, f.fix


def test_failure_evidence_quotes_the_operator(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    found = checks(fake_api, kubeconfig, sc.failure("mig-profile-unsupported")[0])
    g12 = one(found, "G12")
    assert "selected mig-config not present: all-1g.5gb" in g12.evidence and "all-3g.40gb" in g12.fix
    fake_api.objects.clear()
    found = checks(fake_api, kubeconfig, sc.failure("time-slicing-config-invalid")[0])
    assert "number of replicas must be >= 2" in one(found, "G16").evidence


def test_missing_configmap_event_is_the_evidence(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    f = one(checks(fake_api, kubeconfig, sc.failure("time-slicing-configmap-missing")[0]), "G16")
    assert 'configmap "gpustack-device-plugin-config" not found' in f.evidence


@pytest.mark.parametrize(("text", "problem"), [
    ("version: v1\n", ""),
    ("version: v2\n", "unknown version: v2"),
    ("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n", "no resources specified"),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n", "no replicas specified"),
    ("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 49\n",
     "maximum allowed replicas exceeded: 49 > 48"),
    ("version: v1\nsharing: [", "unable to parse config file"),
])  # fmt: skip
def test_the_device_plugins_own_rules(text: str, problem: str) -> None:
    setting, got = sh.plugin_config(text)
    assert (problem in got) if problem else (got == "" and setting is not None)
    renamed, _ = sh.plugin_config("sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
                                  "    - name: gpu\n      replicas: 3\n")  # fmt: skip
    assert renamed == sh.PluginSetting("time-slicing", 3, "nvidia.com/gpu.shared")


# --- verify's test pods ------------------------------------------------------------------------------------

FAST = {"poll_interval": 0.05, "stuck_grace": 0.3, "sharing_deadline": 5.0}


def _kubelet(fake_api: FakeKubeAPI, logs: dict[str, str]) -> list[dict[str, Any]]:
    """Run each created test pod to completion on the node it is pinned to, printing ``logs[resource]``."""
    made: list[dict[str, Any]] = []

    def hook(obj: dict[str, Any]) -> None:
        if obj.get("kind") != "Pod":
            return
        made.append(obj)
        [res] = obj["spec"]["containers"][0]["resources"]["limits"]
        obj["spec"]["nodeName"] = obj["spec"].get("nodeSelector", {}).get("kubernetes.io/hostname", "gpu-node-1")
        obj["status"] = {"phase": "Succeeded", "containerStatuses": [
            {"name": "main", "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]}  # fmt: skip
        fake_api.set_log(obj["metadata"]["namespace"], obj["metadata"]["name"], "main", logs[res])

    fake_api.on_create.append(hook)
    return made


MIG_L = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5e1f)\n  MIG 1g.10gb     Device  0: (UUID: MIG-2a0c)\n"


def _verify(kube: Kube, nodes: list[dict[str, Any]]) -> list[Finding]:
    snap = Snapshot(kube={"Node": nodes})
    ctx = CollectContext(cfg=Config(), command="verify", kubeconfig=None, extra={"kube": kube, **FAST})
    collect_sharing_workload(ctx, snap)
    return registry.run([registry.load_all()["G18-shared-gpu-test-pod"]], snap)


def test_test_pods_run_on_a_mig_device_and_a_shared_gpu(fake_api: FakeKubeAPI, kube: Kube) -> None:
    s = sc.healthy(3)
    mig_node = ss.make_mig(s)
    ts = sc.healthy(3)
    shared = ss.make_time_sliced(ts)
    shared["metadata"]["name"] = "gpu-node-9"
    made = _kubelet(fake_api, {"nvidia.com/mig-1g.10gb": MIG_L, "nvidia.com/gpu": "GPU 0: NVIDIA H100 (UUID: GPU-1)\n"})
    nodes = [mig_node, shared, s.nodes()[0]]
    assert [(t["node"], t["resource"]) for t in targets(Snapshot(kube={"Node": nodes}))] == [
        ("gpu-node-2", "nvidia.com/mig-1g.10gb"), ("gpu-node-9", "nvidia.com/gpu")]  # fmt: skip
    found = _verify(kube, nodes)
    assert [f.status for f in found] == ["pass", "pass"], found
    assert "MIG 1g.10gb" in found[0].summary and found[0].host == "gpu-node-2"
    assert [p["spec"]["nodeSelector"]["kubernetes.io/hostname"] for p in made] == ["gpu-node-2", "gpu-node-9"]
    assert not [k for k in fake_api.objects if k[2] == "pods"]  # deleted


def test_a_pod_that_sees_a_whole_gpu_on_a_mig_node_fails(fake_api: FakeKubeAPI, kube: Kube) -> None:
    s = sc.healthy(1)
    node = ss.make_mig(s)
    _kubelet(fake_api, {"nvidia.com/mig-1g.10gb": "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5e1f)\n"})
    [f] = _verify(kube, [node])
    assert f.status == "fail" and "exactly one MIG 1g.10gb" in f.summary


def test_no_sharing_node_no_pod_and_the_cuda_pod_takes_a_mig_device(fake_api: FakeKubeAPI, kube: Kube) -> None:
    s = sc.healthy(1)
    [f] = _verify(kube, s.nodes())
    assert f.status == "pass" and "no node shares" in f.summary and not fake_api.requests
    assert cuda_resource(s.nodes()) == "nvidia.com/gpu"
    ss.make_mig(s)
    assert cuda_resource(s.nodes()) == "nvidia.com/mig-1g.10gb"  # every GPU under MIG (mixed): a MIG device
    s.nodes()[0]["status"]["allocatable"] = {}
    assert cuda_resource(s.nodes()) is None


# --- R04: which panels may be empty ----------------------------------------------------------------------


def test_mig_panels_may_be_empty_only_where_no_node_has_mig() -> None:
    from gpustack.diagnose.checks_grafana import allowed_empty

    plain = sc.healthy(3)
    nodes = lambda s: Snapshot(kube={"Node": s.nodes(), "Pod": []})  # noqa: E731
    assert {"MIG Instances", "MIG Instance Engine Activity"} <= allowed_empty(nodes(plain))
    assert "GPU Utilization" not in allowed_empty(nodes(plain))
    some = sc.healthy(3)
    ss.make_mig(some)  # one of three GPU nodes: its instances must show, and the whole GPUs' utilisation too
    assert not {"MIG Instances", "GPU Utilization"} & allowed_empty(nodes(some))
    one = sc.healthy(1)
    ss.make_mig(one)  # every GPU node under MIG: DCGM_FI_DEV_GPU_UTIL is reported by none
    allowed = allowed_empty(nodes(one))
    assert "GPU Utilization" in allowed and "MIG Instances" not in allowed


@pytest.mark.parametrize(("major", "minor", "replicas", "fails"),
                         [("7", "0", 24, True), ("6", "0", 17, True), ("7", "0", 16, False), ("7", "5", 48, False),
                          (None, None, 24, False)])  # fmt: skip
def test_mps_replicas_over_the_daemons_limit_below_compute_capability_7_5(
    major: str | None, minor: str | None, replicas: int, fails: bool
) -> None:
    # issue 29: k8s-device-plugin v0.20.0 mps/device.go allows 48 clients from compute capability 7.5, else 16
    from gpustack.diagnose.checks_sharing import sharing_allocatable

    s = sc.healthy(1)
    node = ss.make_time_sliced(s, replicas=4)
    cm = next(o for o in s.objects if o["kind"] == "ConfigMap" and "time-slicing-4" in (o.get("data") or {}))
    cm["data"]["time-slicing-4"] = ("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
                                    f"      replicas: {replicas}\n")  # fmt: skip
    labels = node["metadata"]["labels"]
    labels.update({"nvidia.com/gpu.replicas": str(replicas), "nvidia.com/gpu.sharing-strategy": "mps"})
    if major is not None:
        labels.update({sh.COMPUTE_MAJOR: major, sh.COMPUTE_MINOR: minor})
    node["status"]["allocatable"]["nvidia.com/gpu"] = str(sc.GPUS * replicas)
    snap = Snapshot(kube={"Node": [node], "ConfigMap": [o for o in s.objects if o["kind"] == "ConfigMap"],
                          "ClusterPolicy": [s.find("ClusterPolicy", "cluster-policy")]}, hosts=s.hosts)  # fmt: skip
    found = sharing_allocatable(snap)
    assert bool(found) is fails, found
    if fails:
        assert "allows at most 16 clients below 7.5" in found[0].evidence and "replicas to 16 or fewer" in found[0].fix
