"""gpustack/render/converge.py: per-host stage digests and the hosts each stage still visits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpustack.config.model import Config
from gpustack.render import converge
from gpustack.render.ansible import extravars, inventory


def _cfg() -> Config:
    return Config.model_validate(
        {
            "nodes": [
                {"name": "cp", "address": "10.0.0.10", "role": "control-plane", "user": "ops"},
                {"name": "w1", "address": "10.0.0.11", "role": "worker", "user": "ops"},
                {"name": "w2", "address": "10.0.0.12", "role": "worker", "user": "ops"},
            ]
        }
    )


def _facts(verdicts: dict[str, dict[str, bool]]) -> dict[str, Any]:
    return {host: {"stages": {s: {"converged": v} for s, v in by_stage.items()}} for host, by_stage in verdicts.items()}


def test_tree_digest_follows_contents_not_times(tmp_path: Path) -> None:
    (tmp_path / "roles").mkdir()
    (tmp_path / "roles" / "a.yml").write_text("x: 1\n")
    first = converge.tree_digest(tmp_path)
    (tmp_path / "roles" / "a.yml").write_text("x: 1\n")
    assert converge.tree_digest(tmp_path) == first
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "m.pyc").write_bytes(b"\0")
    assert converge.tree_digest(tmp_path) == first, "caches are not inputs"
    (tmp_path / "roles" / "a.yml").write_text("x: 2\n")
    assert converge.tree_digest(tmp_path) != first


def test_digests_change_with_inputs_and_differ_per_host_and_stage(tmp_path: Path) -> None:
    cfg = _cfg()
    ev = extravars(cfg, kubeconfig_dest=tmp_path / "admin.conf")
    inv = converge.with_stage_digests(inventory(cfg), ev, "tree1")
    hosts = {**inv["all"]["children"]["control_plane"]["hosts"], **inv["all"]["children"]["workers"]["hosts"]}
    digests = {h: hv["gpustack_stage_digests"] for h, hv in hosts.items()}
    assert set(digests["cp"]) == set(converge.STAGE_GROUPS) - {"workers"}
    assert set(digests["w1"]) == {"os", "firewall", "containerd", "kubernetes", "workers"}
    assert digests["cp"]["os"] != digests["w1"]["os"], "host vars are inputs"
    assert digests["cp"]["os"] != digests["cp"]["firewall"], "a stage's digest is its own"
    # same inputs, same digests; the preflight's facts directory is not an input
    again = converge.with_stage_digests(
        inventory(cfg), {**ev, "gpustack_facts_dir": "/tmp/other", "gpustack_stage_hosts": {"os": "cp"}}, "tree1"
    )
    assert again["all"]["children"]["workers"]["hosts"]["w1"]["gpustack_stage_digests"] == digests["w1"]
    # a changed playbook tree or extra var changes every digest
    other_tree = converge.with_stage_digests(inventory(cfg), ev, "tree2")
    assert (
        other_tree["all"]["children"]["workers"]["hosts"]["w1"]["gpustack_stage_digests"]["os"] != digests["w1"]["os"]
    )
    changed = converge.with_stage_digests(inventory(cfg), {**ev, "gpustack_pod_cidr": "10.250.0.0/16"}, "tree1")
    assert changed["all"]["children"]["workers"]["hosts"]["w1"]["gpustack_stage_digests"]["os"] != digests["w1"]["os"]
    # the input inventory is not modified
    assert "gpustack_stage_digests" not in inventory(cfg)["all"]["children"]["workers"]["hosts"]["w1"]


def test_stage_hosts_leaves_out_only_converged_hosts() -> None:
    inv = inventory(_cfg())
    facts = _facts(
        {
            "cp": {"os": True, "firewall": True, "control-plane": True, "network": False},
            "w1": {"os": True, "firewall": False, "workers": True},
            "w2": {"os": True, "workers": True},
        }
    )
    stages = ["os", "firewall", "containerd", "control-plane", "workers", "network"]
    patterns, converged = converge.stage_hosts(stages, inv, facts)
    assert patterns["os"] == converge.NO_HOSTS and converged["os"] == ["cp", "w1", "w2"]
    assert patterns["firewall"] == "w1,w2", "w2 has no verdict for the stage: visited"
    assert patterns["containerd"] == "all" and converged["containerd"] == []
    assert patterns["control-plane"] == converge.NO_HOSTS
    assert patterns["workers"] == converge.NO_HOSTS
    assert patterns["network"] == "control_plane"


def test_stage_hosts_must_run_and_missing_facts_visit_everything() -> None:
    inv = inventory(_cfg())
    facts = _facts({"cp": {"control-plane": True, "os": True}})
    patterns, _ = converge.stage_hosts(["os", "control-plane"], inv, facts, must_run=["control-plane"])
    assert patterns == {"os": "w1,w2", "control-plane": "control_plane"}
    patterns, converged = converge.stage_hosts(["os"], inv, {})
    assert patterns == {"os": "all"} and converged == {"os": []}
    # a verdict that is not literally true (a string, a missing key) never skips a host
    odd = {"cp": {"stages": {"os": {"converged": "yes"}}}, "w1": {"stages": {"os": {}}}}
    assert converge.stage_hosts(["os"], inv, odd)[0] == {"os": "all"}
