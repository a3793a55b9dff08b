"""Property tests: malformed/partial objects into every kubernetes and gpu-operator check, and API
faults (403/404/500/timeouts) into the ``kubernetes`` source. Always a complete report (every check
produces findings), never an exception (no "check could not evaluate" finding either)."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpustack.diagnose.snapshot import KUBE_KINDS, NAMESPACED_KINDS, Snapshot
from tests.fakes import scenarios as sc
from tests.fakes.kube_api import FakeKubeAPI
from tests.fakes.mangle import mangle

KEYS = ["metadata", "status", "spec", "name", "namespace", "labels", "conditions", "type", "containerStatuses",
        "initContainerStatuses", "state", "waiting", "terminated", "lastState", "reason", "message", "phase",
        "allocatable", "capacity", "nvidia.com/gpu", "taints", "key", "effect", "nodeName", "ownerReferences",
        "desiredNumberScheduled", "numberReady", "numberAvailable", "involvedObject", "kind", "driver", "enabled",
        "restartCount", "ready", "exitCode", "podCIDR", "replicas", "readyReplicas", "subsets", "addresses", "app",
        "k8s-app", "component", "clusterIP", "nvidia.com/gpu.present",
        # GPU sharing (checks_sharing.py)
        "data", "config.yaml", "mig-configs", "mig-devices", "device-filter", "mig", "strategy", "devicePlugin",
        "migManager", "config", "nodeSelector", "nvidia.com/mig.config", "nvidia.com/mig.config.state",
        "nvidia.com/device-plugin.config", "nvidia.com/gpu.replicas", "nvidia.com/gpu.product",
        "nvidia.com/mig-1g.10gb", "nvidia.com/gpu.count"]  # fmt: skip
SCALARS = st.none() | st.booleans() | st.integers(-3, 10) | st.text(max_size=6) | st.sampled_from(
    ["True", "False", "ready", "Running", "Pending", "CrashLoopBackOff", "OOMKilled", "8", "kube-system", "gpu-operator",
     "all-1g.10gb", "success", "failed", "pending", "paused-for-mig-change", "time-slicing-4", "mixed", "single",
     "gpustack-device-plugin-config", "version: v1\nsharing: {timeSlicing: {resources: [{name: gpu, replicas: 3}]}}",
     "version: v1\nmig-configs: {all-1g.10gb: [{devices: all, mig-devices: {1g.10gb: 7}}]}",
     "Failed to initialize NVML: Unknown Error", 'no runtime for "nvidia" is configured', "dial tcp 10.96.0.1:443: i/o timeout"]
)  # fmt: skip
JSON = st.recursive(SCALARS, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(KEYS), c, max_size=5),
                    max_leaves=25)  # fmt: skip
HEALTHY = sc.healthy(3).objects
CHECK_KINDS = [k for _, k in KUBE_KINDS] + [k for _, k, _ in NAMESPACED_KINDS]


def _assert_complete(snap: Snapshot) -> None:
    specs = sc.my_specs("doctor")
    findings = sc.run_checks(snap)
    assert {f.id for f in findings} == {s.id for s in specs}
    bad = [f for f in findings if "could not evaluate" in f.summary]
    assert not bad, bad[0].summary + " at " + bad[0].evidence


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kube=st.dictionaries(st.sampled_from(CHECK_KINDS), st.lists(JSON, max_size=4) | JSON, max_size=10),
       events=st.lists(JSON, max_size=3) | JSON, logs=st.dictionaries(st.text(max_size=20), JSON, max_size=3),
       hosts=st.dictionaries(st.text(max_size=8), JSON, max_size=3) | JSON,
       errors=st.dictionaries(st.sampled_from(["kubernetes:Pod", "kubernetes:Node", "x"]), st.text(max_size=5), max_size=2))  # fmt: skip
def test_random_objects_never_crash_a_check(kube: Any, events: Any, logs: Any, hosts: Any, errors: Any) -> None:
    snap = Snapshot(kube=kube, events=events, pod_logs=logs, hosts=hosts, errors=errors)
    _assert_complete(snap)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), junk=st.lists(JSON, min_size=1, max_size=40))
def test_partially_broken_healthy_cluster_never_crashes(seed: int, n: int, junk: list[Any]) -> None:
    rnd = random.Random(seed)
    objs = copy.deepcopy(HEALTHY)
    for i in range(n):
        mangle(rnd.choice(objs), rnd, junk[i % len(junk)], descend=0.75, delete=0.4)
    kube: dict[str, list[Any]] = {}
    for o in objs:
        kube.setdefault(str(o.get("kind")), []).append(o)
    for kind in CHECK_KINDS:
        kube.setdefault(kind, [])
    snap = Snapshot(kube=kube, events=[o for o in objs if o.get("kind") == "Event"],
                    hosts={"gpu-node-1": {"nvidia_driver_version": "580", "nvidia_pci_devices": junk}})  # fmt: skip
    _assert_complete(snap)


# --- API faults into the collector --------------------------------------------------------------------

PATHS = [r"^/api/v1\?", r"^/api/v1/nodes", r"^/api/v1/pods", r"^/api/v1/services", r"^/api/v1/endpoints",
         r"^/api/v1/events", r"/log", r"^/apis/apps/v1/daemonsets", r"^/apis/apps/v1/deployments",
         r"^/apis/nvidia.com", r"^/apis/monitoring.coreos.com/v1/prometheuses", r"^/apis/apps/v1$", r"^/api/v1$"]  # fmt: skip


@pytest.fixture(scope="module")
def loaded_api() -> Iterator[FakeKubeAPI]:
    scenario, _ = sc.failure("crashloop")  # a failing pod: events and logs are read too
    with FakeKubeAPI.running() as api:
        scenario.load(api)
        yield api


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(faults=st.lists(st.tuples(st.sampled_from(PATHS), st.sampled_from([403, 404, 500, 0]),
                                 st.one_of(st.none(), st.integers(1, 2))), min_size=1, max_size=3))  # fmt: skip
def test_api_faults_give_a_complete_report(loaded_api: FakeKubeAPI, tmp_path_factory: pytest.TempPathFactory,
                                           faults: list[tuple[str, int, int | None]]) -> None:  # fmt: skip
    loaded_api.clear_faults()
    for pattern, status, times in faults:
        if status:
            loaded_api.fail(pattern, status, times)
        else:
            loaded_api.delay(pattern, 1.5, times)  # beyond the 1 s request timeout below
    try:
        kc = loaded_api.write_kubeconfig(tmp_path_factory.mktemp("kc") / "kubeconfig")
        snap = sc.collect_kube(loaded_api, kc, timeout=4.0)
    finally:
        loaded_api.clear_faults()
    _assert_complete(snap)


def test_unreachable_and_missing_kubeconfig_give_a_complete_report(tmp_path: Path) -> None:
    with FakeKubeAPI.running() as api:
        kc = api.write_kubeconfig(tmp_path / "kc")
    _assert_complete(sc.collect_kube(api, kc, timeout=3))
    _assert_complete(sc.collect_kube(api, None))
    (tmp_path / "broken").write_text("{not yaml: [")
    _assert_complete(sc.collect_kube(api, tmp_path / "broken"))


VERIFY_ONLY = ("K09-pod-network-probe", "G10-cuda-test-pod", "M11-load-metrics-move")
WORKLOAD_KEYS = ["pod", "namespace", "image", "node", "phase", "reason", "message", "logs", "elapsed", "timed_out",
                 "stuck", "deleted", "error", "before", "during"]  # fmt: skip
RECORD = st.dictionaries(st.sampled_from(WORKLOAD_KEYS), SCALARS | st.floats(allow_nan=True) | JSON, max_size=8)


@settings(max_examples=300, deadline=None)
@given(workload=st.dictionaries(st.sampled_from(["net", "cuda", "load", "skipped", "net_skipped"]),
                                RECORD | JSON, max_size=4),
       errors=st.dictionaries(st.sampled_from(["workload", "pod-network", "kubernetes", "x"]), st.text(max_size=5),
                              max_size=2))  # fmt: skip
def test_random_test_pod_records_never_crash_verify_checks(workload: Any, errors: Any) -> None:
    """verify's own pods (probe, CUDA, load) recorded oddly, e.g. from a hand-edited snapshot."""
    from gpustack.diagnose import registry

    specs = [registry.load_all()[i] for i in VERIFY_ONLY]
    findings = registry.run(specs, Snapshot(workload=workload, errors=errors))
    assert {f.id for f in findings} == set(VERIFY_ONLY)
    bad = [f for f in findings if "could not evaluate" in f.summary]
    assert not bad, bad[0].summary + " at " + bad[0].evidence
