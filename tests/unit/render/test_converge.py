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
    # same inputs, same digests; the converged run's host patterns are not an input
    again = converge.with_stage_digests(inventory(cfg), {**ev, "gpustack_stage_hosts": {"os": "cp"}}, "tree1")
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


def _digests(cfg: Config, tmp_path: Path) -> dict[str, dict[str, str]]:
    inv = converge.with_stage_digests(inventory(cfg), extravars(cfg, kubeconfig_dest=tmp_path / "a"), "tree")
    return {h: hv["gpustack_stage_digests"] for g in inv["all"]["children"].values() for h, hv in g["hosts"].items()}


def _grown(cfg: Config, name: str, address: str, role: str) -> Config:
    data = cfg.model_dump(mode="json")
    data["nodes"].append({"name": name, "address": address, "role": role, "user": "ops"})
    return Config.model_validate(data)


def test_a_new_node_changes_only_the_stages_that_read_the_node_list(tmp_path: Path) -> None:
    """node add / up with new nodes: the existing hosts keep every stage digest but the firewall's
    (its peer rules list every node) and, on the control plane, the control-plane stage's (the
    kubeadm config's certSANs and single-node taint; written only before kubeadm ran)."""
    one = Config.model_validate(
        {"nodes": [{"name": "cp", "address": "10.0.0.10", "role": "control-plane", "user": "ops"}]}
    )
    before, after = _digests(one, tmp_path), _digests(_grown(one, "w1", "10.0.0.11", "worker"), tmp_path)
    assert {s for s in before["cp"] if before["cp"][s] != after["cp"][s]} == {"firewall", "control-plane"}
    three = _cfg()
    before, after = _digests(three, tmp_path), _digests(_grown(three, "w3", "10.0.0.13", "worker"), tmp_path)
    assert {s for s in before["cp"] if before["cp"][s] != after["cp"][s]} == {"firewall"}
    assert {s for s in before["w1"] if before["w1"][s] != after["w1"][s]} == {"firewall"}


def test_node_set_vars_are_every_extra_var_that_follows_the_node_list(tmp_path: Path) -> None:
    """Adding a worker, or a control plane to an HA cluster, changes exactly these extra vars."""

    def changed(a: Config, b: Config) -> set[str]:
        ea, eb = extravars(a, kubeconfig_dest=tmp_path / "k"), extravars(b, kubeconfig_dest=tmp_path / "k")
        return {k for k in ea.keys() | eb.keys() if ea.get(k) != eb.get(k)}

    one = Config.model_validate({"nodes": [{"name": "cp", "address": "10.0.0.10", "role": "control-plane", "user": "ops"}],
                                 "proxy": {"http": "http://proxy:3128"}})  # fmt: skip
    ha = Config.model_validate(
        {
            "nodes": [
                {"name": f"cp{i}", "address": f"10.0.0.{10 + i}", "role": "control-plane", "user": "ops"}
                for i in range(3)
            ],
            "cluster": {"virtual_ip": "10.0.0.100"},
            "proxy": {"http": "http://proxy:3128"},
        }
    )
    seen = changed(one, _grown(one, "w1", "10.0.0.11", "worker"))
    seen |= changed(ha, _grown(_grown(ha, "cp3", "10.0.0.13", "control-plane"), "cp4", "10.0.0.14", "control-plane"))
    seen |= changed(_cfg(), _grown(_cfg(), "w3", "10.0.0.13", "worker"))
    assert seen == set(converge.NODE_SET_VARS)


def test_node_set_vars_readers_are_the_roles_that_read_them() -> None:
    """Each NODE_SET_VARS entry names exactly the site.yml stages whose roles mention the variable."""
    import yaml

    from gpustack.paths import resource_dir

    root = resource_dir("playbooks")
    plays = yaml.safe_load((root / "site.yml").read_text(encoding="utf-8"))
    text: dict[str, str] = {}
    for play in plays:
        for role in play.get("roles") or []:
            name = role["role"] if isinstance(role, dict) else role
            files = sorted((root / "roles" / name).rglob("*"))
            text[play["name"]] = text.get(play["name"], "") + "".join(
                f.read_text(encoding="utf-8") for f in files if f.is_file()
            )
    for var, readers in {**converge.NODE_SET_VARS, **converge.STAGE_ONLY_VARS}.items():
        assert {stage for stage, body in text.items() if var in body} == set(readers), var


def test_only_limits_stages_to_some_nodes_whatever_their_stamps() -> None:
    inv = inventory(_cfg())
    facts = _facts({"cp": {"firewall": False, "os": True}, "w1": {"firewall": True}, "w2": {}})
    only = {s: ["w2"] for s in ("os", "containerd", "control-plane", "workers")}
    patterns, _ = converge.stage_hosts(
        ["os", "firewall", "containerd", "control-plane", "workers"], inv, facts, only=only
    )
    assert patterns == {
        "os": "w2",
        "firewall": "cp,w2",  # not limited: every node whose stamp does not match
        "containerd": "w2",
        "control-plane": converge.NO_HOSTS,  # w2 is no control plane
        "workers": "w2",
    }
    converged = _facts({"w2": {"os": True, "workers": True}})
    patterns, _ = converge.stage_hosts(["os", "workers"], inv, converged, only={"os": ["w2"], "workers": ["w2"]})
    assert patterns == {"os": converge.NO_HOSTS, "workers": converge.NO_HOSTS}, "a re-run finds the new node converged"
