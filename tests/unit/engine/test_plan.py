from __future__ import annotations

import pytest

from gpustack import commands
from gpustack.commands.up import PLAN as UP
from gpustack.engine.plan import Stage
from gpustack.errors import UsageError


def ids(stages: list[Stage]) -> list[str]:
    return [s.id for s in stages]


def test_default_runs_every_stage_in_order() -> None:
    assert ids(UP.select()) == list(UP.stage_ids)
    assert UP.stage_ids[0] == "preflight"
    # firewall before the control plane: joins and pod->API traffic need the rules first
    assert UP.stage_ids.index("firewall") < UP.stage_ids.index("control-plane")


def test_only_keeps_preflight_first() -> None:
    assert ids(UP.select(only=["network"])) == ["preflight", "network"]


def test_only_preflight() -> None:
    assert ids(UP.select(only=["preflight"])) == ["preflight"]


def test_from_and_skip() -> None:
    assert ids(UP.select(from_="network", skip=["helm"])) == ["preflight", "network", "kubelet-certs", "cluster"]


def test_skip_preflight_explicitly() -> None:
    assert "preflight" not in ids(UP.select(skip=["preflight"]))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"only": ["nope"]},
        {"skip": ["nope"]},
        {"from_": "nope"},
        {"only": ["os"], "from_": "os"},
        {"only": ["os"], "skip": ["os", "preflight"]},
    ],
)
def test_bad_selection(kwargs: dict[str, object]) -> None:
    with pytest.raises(UsageError) as ei:
        UP.select(**kwargs)  # type: ignore[arg-type]
    assert ei.value.exit_code == 2


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"only": ["os"], "skip": ["os"]}, "--only and --skip both name os"),
        ({"only": ["os", "helm"], "skip": ["helm", "os"]}, "--only and --skip both name os, helm"),
        ({"from_": "cluster", "skip": ["cluster"]}, "--from cluster and --skip cluster contradict"),
        ({"from_": "network", "skip": ["network"]}, "(to start after it: --from helm)"),
    ],
)
def test_contradictory_selection_is_refused_not_run(kwargs: dict[str, object], needle: str) -> None:
    """`--only os --skip os` used to run the preflight alone; `--from cluster --skip cluster` nothing."""
    with pytest.raises(UsageError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        UP.select(**kwargs)  # type: ignore[arg-type]


def test_skipping_a_stage_the_selection_leaves_out_anyway_is_fine() -> None:
    assert ids(UP.select(only=["os"], skip=["cluster"])) == ["preflight", "os"]
    assert ids(UP.select(from_="helm", skip=["os"])) == ["preflight", "helm", "kubelet-certs", "cluster"]


def test_every_command_has_a_sequence_and_up_is_the_default_one() -> None:
    assert commands.sequence("up").stages == UP.stages
    assert commands.sequence("up").playbook == "site.yml"
    with pytest.raises(UsageError, match="no plan for 'nope'"):
        commands.sequence("nope")


def test_preflight_comes_first_in_every_sequence_that_has_it() -> None:
    for seq in commands.SEQUENCES.values():
        ids = seq.stage_ids
        assert "preflight" not in ids[1:], seq.command
        assert len(set(ids)) == len(ids), f"{seq.command}: stage ids are unique"


@pytest.mark.parametrize("command", sorted(commands.SEQUENCES))
def test_every_ansible_stage_is_a_play_of_its_playbook_tagged_with_its_id(command: str) -> None:
    import yaml

    from gpustack.paths import resource_file

    def plays_of(playbook: str) -> list[dict[str, object]]:
        """The plays of a playbook, those of the playbooks it imports in place (node-add.yml: site.yml)."""
        out: list[dict[str, object]] = []
        for p in yaml.safe_load(resource_file("playbooks", playbook).read_text(encoding="utf-8")):
            imported = p.get("ansible.builtin.import_playbook")
            out += plays_of(str(imported)) if imported else [p]
        return out

    seq = commands.sequence(command)
    by_name = {p["name"]: p for p in plays_of(seq.playbook) if "name" in p}
    for stage in seq.stages:
        if stage.runner != "ansible":
            continue
        assert stage.id in by_name, f"{seq.playbook} has no play named {stage.id!r}"
        assert stage.id in by_name[stage.id].get("tags", []), f"play {stage.id!r} is not tagged {stage.id!r}"  # type: ignore[operator]


def test_reset_sequence_runs_no_preflight_and_keeps_local_state_last() -> None:
    seq = commands.sequence("reset")
    assert seq.stage_ids == ("etcd-snapshot", "reset", "local-state")
    assert not seq.converges and commands.sequence("up").converges
    assert [s.runner for s in seq.stages] == ["ansible", "ansible", "python"]
