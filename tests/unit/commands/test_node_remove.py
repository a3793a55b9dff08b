"""`gpustack node remove`: the refusals and quorum rules (pure), the sequence each removal runs, and
the command end to end against the fake API server (Python stages only: --offline on a worker
contacts no host; the reset on a real host is tests/testbed/test_nodes.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpustack.commands import node_remove as nr
from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.errors import UsageError
from gpustack.runners.kube import Kube
from tests.fakes.kube_api import FakeKubeAPI

from ..nodes_cluster import cluster, node

ROOT = Path(__file__).resolve().parents[3]


def cn(name: str, *, cp: bool = False, ready: bool = True) -> nr.ClusterNode:
    return nr.ClusterNode(name, cp, ready, ready)


def nodes(*items: nr.ClusterNode) -> dict[str, nr.ClusterNode]:
    return {n.name: n for n in items}


def cfg_of(*names: tuple[str, str]) -> Config:
    return Config.model_validate(
        {
            "nodes": [
                {"name": n, "address": f"10.0.0.{10 + i}", "role": role, "connection": "local"}
                for i, (n, role) in enumerate(names)
            ],
            **(
                {"cluster": {"control_plane_endpoint": "10.0.0.100"}}
                if sum(r == "control-plane" for _, r in names) > 1
                else {}
            ),
        }
    )


def test_the_last_control_plane_is_refused() -> None:
    assert nr.removal_problems(nodes(cn("cp1", cp=True), cn("w1")), ["cp1"]) == [
        "cp1 is the cluster's last control-plane node: `gpustack reset` takes the cluster down"
    ]
    assert nr.removal_problems(nodes(cn("cp1", cp=True), cn("w1")), ["w1"]) == []


@pytest.mark.parametrize(
    ("cps", "remove", "refused"),
    [
        # three Ready members: any one may go (two remain, both healthy)
        ({"a": True, "b": True, "c": True}, "a", None),
        # one dead: removing a healthy one leaves 1 Ready of 2 members
        ({"a": True, "b": True, "c": False}, "a", "would leave 1 Ready of 2"),
        # ... the dead one goes first
        ({"a": True, "b": True, "c": False}, "c", None),
        # two of three dead: etcd has no quorum, no member can be removed
        ({"a": True, "b": False, "c": False}, "b", "etcd has no quorum"),
        # two members, one dead: no quorum either
        ({"a": True, "b": False}, "b", "etcd has no quorum"),
        ({"a": True, "b": True}, "b", None),
        # five members, two dead: a healthy one would leave 2 Ready of 4
        ({"a": True, "b": True, "c": True, "d": False, "e": False}, "a", "would leave 2 Ready of 4"),
        ({"a": True, "b": True, "c": True, "d": False, "e": False}, "d", None),
    ],
)
def test_etcd_quorum(cps: dict[str, bool], remove: str, refused: str | None) -> None:
    problems = nr.removal_problems(nodes(*(cn(n, cp=True, ready=r) for n, r in cps.items()), cn("w1")), [remove])
    if refused is None:
        assert problems == []
    else:
        assert len(problems) == 1 and refused in problems[0], problems


def test_no_quorum_names_the_newest_snapshot_or_where_they_are() -> None:
    lost = nodes(cn("a", cp=True), cn("b", cp=True, ready=False), cn("c", cp=True, ready=False))
    (with_snapshot,) = nr.removal_problems(lost, ["b"], "/s/etcd-a-20261129T000000Z.db")
    assert "restore etcd from the newest snapshot on this machine, /s/etcd-a-20261129T000000Z.db" in with_snapshot
    (without,) = nr.removal_problems(lost, ["b"])
    assert "no etcd snapshot is on this machine" in without and "/var/lib/gpustack/etcd-snapshots" in without


def test_control_planes_one_at_a_time() -> None:
    (problem,) = nr.removal_problems(nodes(*(cn(n, cp=True) for n in "abcde")), ["a", "b"])
    assert "one at a time" in problem


def test_warnings_even_count_and_nowhere_to_run() -> None:
    ws = nr.removal_warnings(nodes(cn("a", cp=True), cn("b", cp=True), cn("c", cp=True), cn("w1")), ["c"])
    assert any("2 control-plane nodes remain" in w for w in ws)
    tainted = nr.ClusterNode("cp1", True, True, False)
    ws = nr.removal_warnings(nodes(tainted, cn("w1")), ["w1"])
    assert any("evicted pods will stay Pending" in w for w in ws)
    assert nr.removal_warnings(nodes(tainted, cn("w1"), cn("w2")), ["w1"]) == []


def test_unknown_and_every_node_are_refused() -> None:
    cfg = cfg_of(("cp1", "control-plane"), ("w1", "worker"))
    with pytest.raises(UsageError, match="no node named w9"):
        nr.select_nodes(cfg, ["w9"])
    with pytest.raises(nr.RemovalRefused, match="every node"):
        nr.select_nodes(cfg, ["cp1", "w1"])
    with pytest.raises(UsageError):
        nr.select_nodes(cfg, [])
    assert nr.RemovalRefused("x").exit_code == 2


def test_stages_and_hosts_per_kind_of_removal(fake_api: FakeKubeAPI, kube: Kube) -> None:
    fake_api.seed([*cluster(allowed=1), node("cp2", cp=True), node("cp3", cp=True)])
    cfg = cfg_of(
        ("cp1", "control-plane"), ("cp2", "control-plane"), ("cp3", "control-plane"), ("w1", "worker"), ("w2", "worker")
    )
    worker = nr.assess(cfg, kube, nr.RemoveOptions(("w1",)))
    assert [s.id for s in nr.stages(worker, nr.RemoveOptions(("w1",)))] == [
        "check", "drain", "reset", "firewall", "delete"
    ]  # fmt: skip
    assert worker.snapshot_host == "cp1", "the first control plane takes the snapshot"
    # the removed host, then every remaining one for its firewall
    assert nr.host_limit(worker, nr.RemoveOptions(("w1",))) == ["w1", "cp1", "cp2", "cp3", "w2"]
    offline = nr.RemoveOptions(("w1",), offline=True)
    assert [s.id for s in nr.stages(worker, offline)] == ["check", "drain", "firewall", "delete"]
    assert nr.host_limit(worker, offline) == ["cp1", "cp2", "cp3", "w2"], "the dead host is not contacted"
    assert nr.remove_extravars(worker)["gpustack_node_remove_remaining"] == ["cp1", "cp2", "cp3", "w2"]
    cp = nr.assess(cfg, kube, nr.RemoveOptions(("cp1",)))
    assert cp.etcd_host is not None and cp.etcd_host.name == "cp2"  # the first remaining control plane
    assert cp.snapshot_host == "cp2", "a control plane that stays takes the snapshot"
    assert [s.id for s in nr.stages(cp, nr.RemoveOptions(("cp1",)))] == [
        "check",
        "etcd-snapshot",
        "drain",
        "reset",
        "etcd-member",
        "firewall",
        "delete",
    ]
    assert nr.host_limit(cp, nr.RemoveOptions(("cp1",), offline=True)) == ["cp2", "cp3", "w1", "w2"]
    ev = nr.remove_extravars(cp)
    assert ev["gpustack_node_remove_members"] == [{"name": "cp1", "address": "10.0.0.10"}]
    assert ev["gpustack_node_remove_etcd_host"] == "cp2" and ev["gpustack_node_remove_nodes"] == ["cp1"]
    lines = nr.describe(cp, nr.RemoveOptions(("cp1",)))
    assert lines[0] == f"node cp1 (10.0.0.10, control-plane): Ready, kubelet v{pins.KUBERNETES['1.36']}"
    assert any(line.startswith("etcd: the member of cp1 removed") for line in lines)
    assert ("etcd snapshot on cp2, copied to this machine: first etcd's own member health must leave a majority "
            "after the removal") in lines  # fmt: skip
    assert "firewall of cp2, cp3, w1, w2: gpustack's chain no longer accepts 10.0.0.10" in lines

    # without gpustack's firewall: no firewall stage, only the hosts the removal itself needs
    unmanaged = cfg.model_copy(update={"firewall": cfg.firewall.model_copy(update={"enabled": False})})
    quiet = nr.assess(unmanaged, kube, offline)
    assert [s.id for s in nr.stages(quiet, offline)] == ["check", "drain", "delete"]
    assert nr.host_limit(quiet, offline) == [] and nr.remove_extravars(quiet)["gpustack_node_remove_remaining"] == []
    assert not any(line.startswith("firewall") for line in nr.describe(quiet, offline))


def test_the_firewall_stage_stamps_what_up_records_for_the_config_without_the_node(tmp_path: Path) -> None:
    """The remaining nodes' firewall variables and stage digests are those of the config without the
    removed node, loaded as gpustack.yaml would be: the `up` after it is taken out finds them converged."""
    from gpustack.config.load import load
    from gpustack.engine.stages import stage_inventory
    from gpustack.paths import kubeconfig_path
    from gpustack.render.ansible import extravars

    nodes = [{"name": n, "address": f"10.0.0.{10 + i}", "role": "worker" if i else "control-plane", "user": "ops"}
             for i, n in enumerate(["cp1", "w1", "w2"])]  # fmt: skip
    full, pruned = tmp_path / "gpustack.yaml", tmp_path / "gpustack-without-w1.yaml"
    full.write_text(yaml.safe_dump({"nodes": nodes}))
    pruned.write_text(yaml.safe_dump({"nodes": [n for n in nodes if n["name"] != "w1"]}))
    cfg, edited = load(full, environ={}).config, load(pruned, environ={}).config
    ev = nr.firewall_extravars(cfg, ["w1"])
    assert ev["gpustack_node_addresses"] == ["10.0.0.10", "10.0.0.12"]
    assert ev["gpustack_control_plane_addresses"] == ["10.0.0.10"]
    want = stage_inventory(edited, extravars(edited, kubeconfig_dest=kubeconfig_path(edited.cluster.name)))
    hosts = {n: hv for g in want["all"]["children"].values() for n, hv in (g.get("hosts") or {}).items()}
    assert ev["gpustack_node_remove_firewall_digests"] == {
        n: hv["gpustack_stage_digests"]["firewall"] for n, hv in hosts.items()
    }
    current = stage_inventory(cfg, extravars(cfg, kubeconfig_dest=kubeconfig_path(cfg.cluster.name)))
    assert (
        current["all"]["children"]["control_plane"]["hosts"]["cp1"]["gpustack_stage_digests"]["firewall"]
        != (ev["gpustack_node_remove_firewall_digests"]["cp1"])
    ), "the node list is part of the firewall's digest"


def _cli(args: list[str], state: Path, cfg: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUSTACK_STATE_DIR": str(state), "NO_COLOR": "1", "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    env.pop("GPUSTACK_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "gpustack", *args, "-c", str(cfg)],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


@pytest.fixture
def setup(fake_api: FakeKubeAPI, tmp_path: Path) -> tuple[Path, Path]:
    """A config for cp1/w1/w2 and the state directory, whose admin kubeconfig is the fake API's. No
    firewall of gpustack's: an --offline removal then contacts no host at all."""
    cfg = tmp_path / "gpustack.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "firewall": {"enabled": False},
                "nodes": [
                    {
                        "name": n,
                        "address": f"192.0.2.{10 + i}",
                        "role": "control-plane" if i == 0 else "worker",
                        "user": "ops",
                    }
                    for i, n in enumerate(["cp1", "w1", "w2"])
                ],
            }
        )
    )
    state = tmp_path / "state"
    (state / "clusters" / "gpustack").mkdir(parents=True)
    fake_api.write_kubeconfig(state / "clusters" / "gpustack" / "admin.conf")
    return cfg, state


def test_cli_blocked_by_a_budget_reports_before_any_cordon_then_removes_when_it_allows(
    fake_api: FakeKubeAPI, setup: tuple[Path, Path]
) -> None:
    cfg, state = setup
    fake_api.seed(cluster(allowed=0))
    blocked = _cli(["node", "remove", "w1", "--offline", "--yes"], state, cfg)
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    assert "default/web-6c9f-a" in blocked.stdout and "disruption budget web needs 2 healthy pods" in blocked.stdout
    assert "nothing was changed (no node cordoned)" in blocked.stderr
    w1 = fake_api.get("v1", "Node", "w1")
    assert w1 is not None and not w1["spec"].get("unschedulable")
    assert not [r for r in fake_api.mutating_requests() if not r[1].endswith("/eviction")]
    assert not (state / "runs").exists() or not list((state / "runs").iterdir()), "no run started"

    # the budget allows one disruption now: cordon, evict, no host contacted (--offline), Node deleted
    fake_api.seed([{**cluster(allowed=1)[-1]}])
    done = _cli(["node", "remove", "w1", "--offline", "--yes"], state, cfg)
    assert done.returncode == 0, done.stdout + done.stderr
    assert fake_api.get("v1", "Node", "w1") is None
    assert fake_api.get("v1", "Pod", "web-6c9f-a", "default") is None
    assert fake_api.get("v1", "Node", "w2") is not None
    (run,) = list((state / "runs").iterdir())
    record = json.loads((run / "run.json").read_text())
    assert (record["command"], record["result"], record["cluster"]) == ("node-remove", "ok", "gpustack")
    rows = {r["stage"]: r for r in json.loads((run / "summary.json").read_text())}
    assert list(rows) == ["check", "drain", "delete"] and rows["delete"]["changed"] == 1
    assert "delete them from gpustack.yaml" in done.stdout


def test_cli_refusals_exit_2_and_touch_nothing(fake_api: FakeKubeAPI, setup: tuple[Path, Path]) -> None:
    cfg, state = setup
    fake_api.seed(cluster(allowed=1))
    last = _cli(["node", "remove", "cp1", "--yes"], state, cfg)
    assert last.returncode == 2 and "last control-plane node" in last.stderr
    unknown = _cli(["node", "remove", "w9", "--yes"], state, cfg)
    assert unknown.returncode == 2 and "no node named w9" in unknown.stderr
    assert fake_api.mutating_requests() == []


def test_cli_cluster_unreachable_is_exit_3(setup: tuple[Path, Path], fake_api: FakeKubeAPI) -> None:
    cfg, state = setup
    fake_api.stop()
    gone = _cli(["node", "remove", "w1", "--yes"], state, cfg)
    assert gone.returncode == 3, gone.stderr
    assert "unreachable" in gone.stderr
