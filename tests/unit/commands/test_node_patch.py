"""`gpustack node patch`: the plan, the node order and the held packages; the whole command with the playbook
replaced by a TEST DOUBLE of the node_patch role (FakeRole below: it writes the host's patch state where the role's
state.yml writes it, and "reboots" by giving the host and its Node a new boot id) against the fake API server:
a converged run changes nothing, a budget that blocks stops before any cordon, a node's turn runs its stages
limited to it, a failed turn leaves the node cordoned and the rerun finishes it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from gpustack.cluster import drain
from gpustack.cluster import patch_node as pn
from gpustack.commands import node_patch as np_
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.engine import run as engine_run
from gpustack.engine.plan import CommandPlan, Stage
from gpustack.engine.steps import StageSummary
from gpustack.errors import StageError, UsageError
from gpustack.paths import write_json
from gpustack.runners.kube import Kube
from tests.fakes.kube_api import FakeKubeAPI

from ..nodes_cluster import pdb
from ..patch_cluster import gpu_cluster, gpu_node


def config(**versions: Any) -> Config:
    nodes = [{"name": "cp1", "address": "192.0.2.10", "role": "control-plane", "connection": "local"}]
    nodes += [{"name": n, "address": f"192.0.2.{11 + i}", "connection": "local"} for i, n in enumerate(["g1", "g2"])]
    return Config.model_validate({"nodes": nodes, "versions": versions})


def test_the_plan_and_its_variables() -> None:
    assert np_.PLAN.stage_ids == ("inspect", "check", "etcd-before", "drain", "packages", "etcd-after", "gpu",
                                  "uncordon")  # fmt: skip
    assert np_.PLAN.playbook == "node-patch.yml"
    assert set(np_.PLAN.extravars) == {
        "gpustack_node_patch_hold", "gpustack_node_patch_state_dir", "gpustack_node_patch_serial"
    }  # fmt: skip
    assert np_.details(config())[0][2] == [["1", "cp1", "control-plane"], ["2", "g1", "worker"], ["3", "g2", "worker"]]


def test_order_control_planes_first_and_the_refusals() -> None:
    cfg = config()
    assert [n.name for n in np_.select_nodes(cfg, ["g2", "cp1"], False)] == ["cp1", "g2"]
    assert [n.name for n in np_.select_nodes(cfg, [], True)] == ["cp1", "g1", "g2"]
    for names, every, msg in ((["g9"], False, "no node named g9"), ([], False, "or --all"), (["g1"], True, "not both")):
        with pytest.raises(UsageError, match=msg):
            np_.select_nodes(cfg, names, every)


def test_turns_control_planes_alone_workers_max_unavailable_together() -> None:
    nodes = [{"name": f"cp{i}", "address": f"192.0.2.{i}", "role": "control-plane"} for i in (1, 2, 3)]
    nodes += [{"name": f"w{i}", "address": f"192.0.2.{10 + i}"} for i in range(1, 6)]
    cfg = Config.model_validate({"nodes": nodes})
    every = np_.select_nodes(cfg, [], True)
    assert np_.batches(every) == [[n.name] for n in every]  # the default: one at a time
    assert np_.batches(every, 2) == [["cp1"], ["cp2"], ["cp3"], ["w1", "w2"], ["w3", "w4"], ["w5"]]
    assert np_.batches(every, 10) == [["cp1"], ["cp2"], ["cp3"], ["w1", "w2", "w3", "w4", "w5"]]
    with pytest.raises(UsageError, match="at least 1"):
        np_.batches(every, 0)


def test_what_stays_held() -> None:
    assert np_.held(config()) == ["kubelet", "kubeadm", "kubectl"]
    assert "containerd" in np_.held(config(containerd_source="distribution"))


class FakeRole:
    """TEST DOUBLE of playbooks/node-patch.yml (the engine's ansible_stages replaced): inspect writes each host's
    patch state from ``self.hosts``; packages clears it and, when a reboot is due, gives the host and its Node a
    new boot id (with the Node's GPUs back, as the GPU Operator brings them)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, api: FakeKubeAPI, hosts: dict[str, dict[str, Any]]) -> None:
        self.api, self.hosts = api, hosts
        self.runs: list[tuple[list[str], list[str]]] = []
        self.serials: list[int] = []  # the packages play's serial, per run that has it
        self.fail_at: str | None = None
        monkeypatch.setattr(engine_run, "ansible_stages", self.ansible)

    def write(self, cfg: Config, name: str) -> None:
        d = pn.state_dir(cfg.cluster.name)
        write_json(d / f"{name}.json", self.hosts[name])

    def ansible(self, plan: CommandPlan, stages: list[Stage], cfg: Config, opts: Any, *a: Any, **kw: Any) -> Any:
        ids = [s.id for s in stages]
        self.runs.append((ids, list(opts.limit)))
        assert opts.extravars["gpustack_node_patch_hold"] == ["kubelet", "kubeadm", "kubectl"]
        if "packages" in ids:
            self.serials.append(opts.extravars["gpustack_node_patch_serial"])
        for name in opts.limit:
            if "inspect" in ids:
                self.write(cfg, name)
            if "packages" in ids:
                if self.fail_at == "packages":
                    raise StageError(f"{name}: task 'Upgrade the distribution's packages' failed", stage="packages",
                                     hosts=(name,))  # fmt: skip
                host = self.hosts[name]
                if host.get("reboot_required"):
                    host["boot_id"] = host["boot_id"] + "-rebooted"
                    self.api.set_status("v1", "Node", name, "", gpu_node(name, boot=host["boot_id"])["status"])
                self.hosts[name] = {**host, "needed": False, "pending": [], "reboot_required": False}
                self.write(cfg, name)
        return [StageSummary(i, "changed" if i == "packages" else "ok", 0.0, 1) for i in ids], type(
            "R", (), {"failures": [], "rc": 0, "status": "successful"}
        )()


def host(needed: bool, boot: str = "boot-1") -> dict[str, Any]:
    pending = [{"name": "linux-image-amd64", "from": "6.1.0-28", "to": "6.1.0-29"}] if needed else []
    return {"needed": needed, "pending": pending, "reboot_required": needed, "boot_id": boot,
            "running_kernel": "6.1.0-28-amd64", "newest_kernel": "6.1.0-28-amd64", "headers_missing": []}  # fmt: skip


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_api: FakeKubeAPI) -> FakeKubeAPI:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    fake_api.seed(gpu_cluster())
    return fake_api


def patch(kube: Kube, **kw: Any) -> tuple[np_.PatchResult, str]:
    out = io.StringIO()
    opts = np_.PatchOptions(**{"all": True, "gpu_job_timeout": 0, "drain_timeout": 1, "ready_timeout": 1,
                               "interval": 0.01, **kw})  # fmt: skip
    return np_.patch(config(), opts, Console(stream=out, color=False), kube), out.getvalue()


def test_a_converged_cluster_changes_nothing(env: FakeKubeAPI, kube: Kube, monkeypatch: pytest.MonkeyPatch) -> None:
    role = FakeRole(monkeypatch, env, {n: host(False) for n in ("cp1", "g1", "g2")})
    env.reset_requests()
    result, out = patch(kube)
    assert role.runs == [(["inspect"], ["cp1", "g1", "g2"])]
    assert result.patched == [] and result.current == ["cp1", "g1", "g2"]
    assert [r for r in env.mutating_requests() if not r[1].endswith("/eviction")] == []
    assert "(0 to patch)" in out


def test_the_check_table() -> None:
    states = {"g1": {**host(True), "newest_kernel": "6.1.0-29-amd64", "held_pending": ["kubelet"],
                     "headers_missing": ["linux-headers-6.1.0-29-amd64"]}, "g2": host(False)}  # fmt: skip
    assert np_.state_rows(states, ["g1", "g2", "g3"], ["g1"]) == [
        ["g1", "1", "kubelet", "6.1.0-28-amd64 -> 6.1.0-29-amd64", "linux-headers-6.1.0-29-amd64", "yes", "patch"],
        ["g2", "0", "-", "6.1.0-28-amd64", "-", "no", "up to date"],
        ["g3", "0", "-", "?", "-", "no", "up to date"],
    ]


def test_a_node_with_updates_gets_its_turn_alone_and_comes_back_uncordoned(
    env: FakeKubeAPI, kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    role = FakeRole(monkeypatch, env, {"cp1": host(False), "g1": host(True), "g2": host(False)})
    result, _ = patch(kube)
    assert role.runs == [(["inspect"], ["cp1", "g1", "g2"]), (["packages"], ["g1"])]  # a worker: no etcd stages
    assert result.patched == ["g1"] and result.current == ["cp1", "g2"]
    g1 = env.get("v1", "Node", "g1")
    assert g1 is not None and not g1["spec"].get("unschedulable")
    assert g1["status"]["nodeInfo"]["bootID"] == "boot-1-rebooted"
    assert env.get("v1", "Pod", "web-6c9f-a", "default") is None  # drained before the packages
    assert pn.node_record("gpustack", "g1")["status"] == "done"
    # the rerun: nothing to do anywhere, nothing changed
    env.reset_requests()
    again, _ = patch(kube)
    assert again.patched == [] and [r for r in env.mutating_requests() if not r[1].endswith("/eviction")] == []


def test_a_control_plane_turn_checks_etcd_before_and_after(
    env: FakeKubeAPI, kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    role = FakeRole(monkeypatch, env, {"cp1": host(True), "g1": host(False), "g2": host(False)})
    env.seed([gpu_node("cp1", gpus=0)])
    patch(kube, nodes=("cp1",), all=False)
    assert role.runs[1] == (["etcd-before"], ["cp1"]) and role.runs[2] == (["packages", "etcd-after"], ["cp1"])


def test_a_budget_that_blocks_stops_before_any_cordon(
    env: FakeKubeAPI, kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.seed(gpu_cluster(allowed=0))
    role = FakeRole(monkeypatch, env, {"cp1": host(False), "g1": host(True), "g2": host(False)})
    env.reset_requests()
    with pytest.raises(drain.DrainError) as ei:
        patch(kube)
    assert "disruption budget web" in ei.value.message and "no node cordoned" in (ei.value.hint or "")
    assert len(role.runs) == 1
    assert [r for r in env.mutating_requests() if not r[1].endswith("/eviction")] == []


def test_a_failed_turn_leaves_the_node_cordoned_and_the_rerun_finishes_it(
    env: FakeKubeAPI, kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    role = FakeRole(monkeypatch, env, {"cp1": host(False), "g1": host(True), "g2": host(True)})
    role.fail_at = "packages"
    with pytest.raises(StageError) as ei:
        patch(kube)
    assert "g1 stays cordoned" in (ei.value.hint or "") and "continues with g1" in (ei.value.hint or "")
    assert env.get("v1", "Node", "g1")["spec"]["unschedulable"] is True  # type: ignore[index]
    assert not env.get("v1", "Node", "g2")["spec"].get("unschedulable")  # type: ignore[index]  # never reached
    assert pn.node_record("gpustack", "g1")["status"] == "failed"
    role.fail_at = None
    env.seed([pdb("web", "web", allowed=1)])  # web's evicted pod runs again elsewhere: the budget allows one again
    result, _ = patch(kube)
    assert result.patched == ["g1", "g2"]
    assert not env.get("v1", "Node", "g1")["spec"].get("unschedulable")  # type: ignore[index]


def test_dry_run_only_inspects(env: FakeKubeAPI, kube: Kube, monkeypatch: pytest.MonkeyPatch) -> None:
    role = FakeRole(monkeypatch, env, {"cp1": host(False), "g1": host(True), "g2": host(False)})
    env.reset_requests()
    result, out = patch(kube, dry_run=True)
    assert role.runs == [(["inspect"], ["cp1", "g1", "g2"])] and result.patched == []
    assert "(1 to patch)" in out and env.get("v1", "Node", "g1")["spec"] == {}  # type: ignore[index]


def test_max_unavailable_patches_workers_together_and_control_planes_alone(
    env: FakeKubeAPI, kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.seed([*gpu_cluster(allowed=2), gpu_node("cp1", gpus=0)])  # web's budget lets both its pods go at once
    role = FakeRole(monkeypatch, env, {n: host(True) for n in ("cp1", "g1", "g2")})
    result, out = patch(kube, max_unavailable=2)
    assert role.runs == [(["inspect"], ["cp1", "g1", "g2"]), (["etcd-before"], ["cp1"]),
                         (["packages", "etcd-after"], ["cp1"]), (["packages"], ["g1", "g2"])]  # fmt: skip
    assert role.serials == [1, 2]  # the play patches the two workers together, the control plane alone
    assert result.patched == ["cp1", "g1", "g2"]
    for name in ("g1", "g2"):
        obj = env.get("v1", "Node", name)
        assert obj is not None and not obj["spec"].get("unschedulable")
        assert obj["status"]["nodeInfo"]["bootID"] == "boot-1-rebooted"
        assert pn.node_record("gpustack", name)["status"] == "done"
    assert "node patch g1, g2" in out


def test_a_failed_turn_of_two_leaves_both_cordoned_and_names_them(
    env: FakeKubeAPI, kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.seed(gpu_cluster(allowed=2))
    role = FakeRole(monkeypatch, env, {"cp1": host(False), "g1": host(True), "g2": host(True)})
    role.fail_at = "packages"
    with pytest.raises(StageError) as ei:
        patch(kube, max_unavailable=2)
    assert "g1, g2 stay cordoned" in (ei.value.hint or "") and "continues with g1, g2" in (ei.value.hint or "")
    for name in ("g1", "g2"):
        assert env.get("v1", "Node", name)["spec"]["unschedulable"] is True  # type: ignore[index]
        assert pn.node_record("gpustack", name)["status"] == "failed"
    role.fail_at = None
    result, _ = patch(kube, max_unavailable=2)  # the rerun finishes both, together
    assert result.patched == ["g1", "g2"] and role.serials[-1] == 2
