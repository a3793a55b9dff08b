"""gpustack/cluster/patch_node.py against the fake API server (tests/fakes/kube_api.py; the real kubernetes client
through gpustack.runners.kube): the GPU jobs waited for and the refusal that changes nothing, the drain, the GPU
stack's return judged against the record, the uncordon of this command's cordon only, the resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpustack.cluster import drain
from gpustack.cluster import patch_node as pn
from gpustack.errors import ConfigError
from gpustack.paths import write_json
from gpustack.runners.kube import Kube
from tests.fakes.kube_api import FakeKubeAPI

from ..patch_cluster import gpu_cluster, gpu_node, gpu_pod, operator_pods

CLUSTER = "gpustack"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


class Clock:
    """Time that passes only when the code under test sleeps; ``on_sleep`` acts as the cluster meanwhile."""

    def __init__(self, on_sleep: list | None = None) -> None:
        self.t = 0.0
        self.on_sleep = on_sleep or []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += max(s, 0.01)
        if self.on_sleep:
            self.on_sleep.pop(0)()


def take_out(kube: Kube, clock: Clock, *, evict: bool = False, node: str = "g1") -> int:
    return pn.take_out(kube, CLUSTER, node, gpu_job_timeout=60, drain_timeout=30, evict_gpu_pods=evict, interval=10,
                       clock=clock, sleep=clock.sleep)  # fmt: skip


def unschedulable(api: FakeKubeAPI, node: str) -> bool:
    return bool(api.get("v1", "Node", node)["spec"].get("unschedulable"))  # type: ignore[index]


def test_a_gpu_job_still_running_refuses_with_the_node_uncordoned_and_nothing_evicted(
    fake_api: FakeKubeAPI, kube: Kube
) -> None:
    fake_api.seed([*gpu_cluster(), gpu_pod("train-x", "g1")])
    clock = Clock()
    with pytest.raises(pn.PatchRefused) as ei:
        take_out(kube, clock)
    assert isinstance(ei.value, ConfigError) and ei.value.exit_code == 2
    assert "GPU job(s) still running after 60s: default/train-x" in ei.value.message
    assert "--evict-gpu-pods" in (ei.value.hint or "") and "uncordoned again" in (ei.value.hint or "")
    assert clock.t >= 60
    assert not unschedulable(fake_api, "g1")
    assert not [r for r in fake_api.mutating_requests() if r[1].endswith("/eviction")]
    assert fake_api.get("v1", "Pod", "train-x", "default") is not None
    assert pn.node_record(CLUSTER, "g1")["status"] == "refused"


def test_a_gpu_job_that_finishes_in_time_lets_the_drain_go_on(fake_api: FakeKubeAPI, kube: Kube) -> None:
    fake_api.seed([*gpu_cluster(), gpu_pod("train-x", "g1")])
    done = {"phase": "Succeeded"}
    clock = Clock([lambda: None, lambda: fake_api.set_status("v1", "Pod", "train-x", "default", done)])
    evicted = take_out(kube, clock)
    assert 10 <= clock.t < 60
    assert unschedulable(fake_api, "g1")
    ann = fake_api.get("v1", "Node", "g1")["metadata"]["annotations"]  # type: ignore[index]
    assert ann[drain.CORDON_ANNOTATION] == pn.WHY
    # the finished job's pod and web went; the GPU Operator's DaemonSet pods stay
    assert fake_api.get("v1", "Pod", "web-6c9f-a", "default") is None
    assert fake_api.get("v1", "Pod", "nvidia-driver-daemonset-g1", "gpu-operator") is not None
    assert evicted == 2
    rec = pn.node_record(CLUSTER, "g1")
    assert rec["status"] == "drained" and rec["cordoned"] is True
    assert rec["baseline"] == {"gpus": 8, "operands": ["dcgm-exporter", "device-plugin", "driver", "validator"],
                               "boot_id": "boot-1"}  # fmt: skip


def test_evict_gpu_pods_evicts_a_jobs_pod_after_the_wait(fake_api: FakeKubeAPI, kube: Kube) -> None:
    fake_api.seed([*gpu_cluster(), gpu_pod("train-x", "g1")])
    take_out(kube, Clock(), evict=True)
    assert fake_api.get("v1", "Pod", "train-x", "default") is None
    assert unschedulable(fake_api, "g1")


def test_a_bare_gpu_pod_is_never_evicted_even_when_told(fake_api: FakeKubeAPI, kube: Kube) -> None:
    fake_api.seed([*gpu_cluster(), gpu_pod("notebook", "g1", owner=None)])
    with pytest.raises(drain.DrainError) as ei:
        take_out(kube, Clock(), evict=True)
    assert "default/notebook" in ei.value.message
    assert fake_api.get("v1", "Pod", "notebook", "default") is not None
    assert not unschedulable(fake_api, "g1")


def test_a_budget_that_blocks_uncordons_after_the_drain_timeout(fake_api: FakeKubeAPI, kube: Kube) -> None:
    fake_api.seed(gpu_cluster(allowed=0))
    with pytest.raises(drain.DrainError) as ei:
        take_out(kube, Clock())
    assert "disruption budget web" in ei.value.message
    assert not unschedulable(fake_api, "g1")


def test_a_node_someone_else_cordoned_stays_cordoned(fake_api: FakeKubeAPI, kube: Kube) -> None:
    fake_api.seed([*gpu_cluster(), gpu_pod("train-x", "g1")])
    fake_api.seed([gpu_node("g1", cordoned=True)])
    with pytest.raises(pn.PatchRefused):
        take_out(kube, Clock())
    assert unschedulable(fake_api, "g1")
    assert not pn.uncordon(kube, CLUSTER, "g1")  # not this command's cordon: left alone
    assert unschedulable(fake_api, "g1")


def host_says(state: Path, node: str, boot: str) -> None:
    (state / "clusters" / CLUSTER / "node-patch").mkdir(parents=True, exist_ok=True)
    write_json(state / "clusters" / CLUSTER / "node-patch" / f"{node}.json", {"boot_id": boot, "needed": False})


def test_a_node_that_does_not_come_back_stays_cordoned_and_says_what_to_look_at(
    fake_api: FakeKubeAPI, kube: Kube, state: Path
) -> None:
    fake_api.seed(gpu_cluster())
    take_out(kube, Clock())
    host_says(state, "g1", "boot-2")  # the host rebooted; its driver does not load: no GPUs, the driver not Ready
    fake_api.set_status("v1", "Node", "g1", "", gpu_node("g1", boot="boot-2", gpus=0)["status"])
    fake_api.set_status("v1", "Pod", "nvidia-driver-daemonset-g1", "gpu-operator",
                        {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]})  # fmt: skip
    clock = Clock()
    with pytest.raises(pn.NodeNotBack) as ei:
        pn.bring_back(kube, CLUSTER, "g1", timeout=100, interval=10, clock=clock, sleep=clock.sleep)
    assert "0 of 8 GPU resource(s) allocatable" in ei.value.message
    assert "driver pod gpu-operator/nvidia-driver-daemonset-g1 not Ready" in ei.value.message
    assert "g1 stays cordoned" in (ei.value.hint or "") and "logs ds/nvidia-driver-daemonset" in (ei.value.hint or "")
    assert ei.value.exit_code == 1
    assert unschedulable(fake_api, "g1")
    assert pn.node_record(CLUSTER, "g1")["status"] == "not back"


def test_a_stale_status_from_before_the_reboot_does_not_count(fake_api: FakeKubeAPI, kube: Kube, state: Path) -> None:
    fake_api.seed(gpu_cluster())
    take_out(kube, Clock())
    host_says(state, "g1", "boot-2")
    back = gpu_node("g1", boot="boot-2")["status"]
    clock = Clock([lambda: None, lambda: fake_api.set_status("v1", "Node", "g1", "", back)])
    pn.bring_back(kube, CLUSTER, "g1", timeout=100, interval=10, clock=clock, sleep=clock.sleep)
    assert clock.t == 20  # two looks saw the old boot id
    assert pn.uncordon(kube, CLUSTER, "g1")
    assert not unschedulable(fake_api, "g1")
    ann = fake_api.get("v1", "Node", "g1")["metadata"].get("annotations") or {}  # type: ignore[index]
    assert drain.CORDON_ANNOTATION not in ann
    assert pn.node_record(CLUSTER, "g1")["status"] == "done"


def test_a_resumed_node_keeps_its_baseline_and_gets_its_turn(fake_api: FakeKubeAPI, kube: Kube, state: Path) -> None:
    fake_api.seed(gpu_cluster())
    take_out(kube, Clock())
    # interrupted after the reboot: the node is back up without its GPUs yet, still cordoned by this command
    fake_api.set_status("v1", "Node", "g1", "", gpu_node("g1", boot="boot-2", gpus=0)["status"])
    node = fake_api.get("v1", "Node", "g1")
    assert pn.cordoned_by_patch(node) and pn.needs_patch({"needed": False}, node)
    take_out(kube, Clock())  # the rerun's turn: nothing left to evict, the baseline from before the first drain
    assert pn.node_record(CLUSTER, "g1")["baseline"]["gpus"] == 8
    assert not pn.needs_patch({"needed": False}, fake_api.get("v1", "Node", "g2"))
    assert pn.needs_patch({"needed": True}, fake_api.get("v1", "Node", "g2"))


def test_the_record_is_private(fake_api: FakeKubeAPI, kube: Kube, state: Path) -> None:
    fake_api.seed(gpu_cluster())
    take_out(kube, Clock())
    path = pn.record_path(CLUSTER)
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text())["nodes"]["g1"]["status"] == "drained"


def test_operator_pods_helper_matches_what_the_wait_reads() -> None:
    assert {p["metadata"]["labels"]["app"] for p in operator_pods("g1")} >= {"nvidia-driver-daemonset"}
