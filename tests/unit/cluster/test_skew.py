"""The version-skew rules of `gpustack upgrade` and `up`'s refusal of a changed version (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack.cluster import skew
from gpustack.config import pins
from gpustack.config.model import Config, Node
from gpustack.errors import ConfigError


def cfg(version: str = "1.35", *, workers: int = 2, cps: int = 1, **versions: Any) -> Config:
    nodes = [Node(name=f"cp{i + 1}", address=f"10.0.0.{i + 1}", role="control-plane") for i in range(cps)]
    nodes += [Node(name=f"w{i + 1}", address=f"10.0.1.{i + 1}") for i in range(workers)]
    return Config.model_validate(
        {"nodes": [n.model_dump() for n in nodes], "versions": {"kubernetes": version, **versions}}
    )


def cluster(**nodes: str) -> skew.ClusterVersions:
    return skew.ClusterVersions(nodes, tuple(n for n in nodes if n.startswith("cp")))


def facts_with(versions: dict[str, str | None]) -> dict[str, Any]:
    return {
        n: {"kubernetes": {"gpustack_marker": {"kubernetes_version": v} if v else None}} for n, v in versions.items()
    }


def test_resolve_target_picks_the_pinned_patch() -> None:
    assert skew.resolve_target("1.36") == pins.KUBERNETES["1.36"]
    assert skew.resolve_target(pins.KUBERNETES["1.35"]) == pins.KUBERNETES["1.35"]


@pytest.mark.parametrize("bad", ["1.99", "1.36.1", "latest", ""])
def test_resolve_target_refuses_what_is_not_pinned(bad: str) -> None:
    with pytest.raises(skew.SkewError) as err:
        skew.resolve_target(bad)
    assert err.value.exit_code == 2 and "pinned versions" in (err.value.hint or "")


def test_one_minor_up_is_allowed() -> None:
    assert skew.upgrade_problems(cluster(cp1="1.35.8", w1="1.35.8", w2="1.35.8"), "1.36.4") == []


def test_a_skipped_minor_is_refused_naming_the_next_one() -> None:
    (why,) = skew.upgrade_problems(cluster(cp1="1.34.11", w1="1.34.11"), "1.36.4")
    assert "skips a minor" in why and "--to 1.35" in why


def test_a_downgrade_is_refused() -> None:
    (why,) = skew.upgrade_problems(cluster(cp1="1.36.4", w1="1.36.4"), "1.35.8")
    assert "downgrades are not supported" in why


def test_a_patch_upgrade_and_a_resumed_upgrade_are_allowed() -> None:
    # the control plane already moved, a worker has not: re-running the same upgrade continues it
    assert skew.upgrade_problems(cluster(cp1="1.36.4", w1="1.35.8", w2="1.36.4"), "1.36.4") == []


def test_a_kubelet_newer_than_the_api_server_is_refused() -> None:
    (why,) = skew.upgrade_problems(cluster(cp1="1.35.8", w1="1.36.4"), "1.36.4")
    assert "w1" in why and "newer than the API server" in why


def test_the_api_server_is_the_oldest_control_plane() -> None:
    # an HA control plane half-way through: the kubelets may not pass the oldest API server
    c = cluster(cp1="1.36.4", cp2="1.35.8", cp3="1.35.8", w1="1.35.8")
    assert c.apiserver == "1.35.8"
    assert skew.upgrade_problems(c, "1.36.4") == []


def test_a_kubelet_left_too_far_behind_is_refused() -> None:
    (why,) = skew.upgrade_problems(cluster(cp1="1.36.4", w1="1.32.0"), "1.36.4")
    assert "w1" in why and "3 minors" in why


@pytest.mark.parametrize(
    ("kubelet", "api", "ok"),
    [("1.36.4", "1.36.4", True), ("1.33.0", "1.36.4", True), ("1.32.9", "1.36.4", False), ("1.36.4", "1.35.8", False)],
)
def test_kubelet_allowed(kubelet: str, api: str, ok: bool) -> None:
    assert skew.kubelet_allowed(kubelet, api) is ok


def test_check_upgrade_reports_the_matrix_too() -> None:
    # containerd 1.7 is too old for Kubernetes 1.36 (the matrix): refused before any host changes
    c = cfg("1.35", containerd="1.7.28", containerd_sha256={"amd64": "0" * 64})
    with pytest.raises(skew.SkewError) as err:
        skew.check_upgrade(c, cluster(cp1="1.35.8"), "1.36.4")
    assert "versions.containerd" in err.value.message and "too old for Kubernetes 1.36" in err.value.message
    assert isinstance(err.value, ConfigError)


def test_check_upgrade_passes_a_clean_one_minor_upgrade() -> None:
    skew.check_upgrade(cfg("1.35"), cluster(cp1="1.35.8", w1="1.35.8"), "1.36.4")


def test_installed_versions_reads_the_marker_and_skips_hosts_without_one() -> None:
    facts = facts_with({"cp1": "1.35.8", "w1": None})
    facts["w2"] = {}
    assert skew.installed_versions(facts) == {"cp1": "1.35.8"}


def test_up_with_a_changed_version_points_at_upgrade() -> None:
    c = cfg("1.36")
    with pytest.raises(skew.SkewError) as err:
        skew.refuse_version_change(c, facts_with({"cp1": "1.35.8", "w1": "1.35.8", "w2": None}))
    assert err.value.exit_code == 2
    assert f"gpustack upgrade --to {pins.KUBERNETES['1.36']}" in err.value.message
    assert "cp1 runs 1.35.8" in err.value.message and "w2" not in err.value.message


def test_up_with_an_older_version_is_not_a_downgrade() -> None:
    why = skew.version_change_problem(cfg("1.35"), {"cp1": "1.36.4"})
    assert why is not None and "downgrades are not supported" in why


def test_up_on_fresh_or_converged_hosts_is_allowed() -> None:
    c = cfg("1.36")
    skew.refuse_version_change(c, facts_with({"cp1": None, "w1": None}))
    skew.refuse_version_change(c, facts_with({"cp1": c.versions.kubernetes, "w1": c.versions.kubernetes}))


def test_upgrade_order_control_plane_first_then_workers_one_at_a_time() -> None:
    steps = skew.upgrade_order(cfg("1.35", cps=3, workers=2), "1.36.4")
    assert [(s.node, s.action) for s in steps] == [
        ("cp1", "apply"),
        ("cp2", "node"),
        ("cp3", "node"),
        ("w1", "worker"),
        ("w2", "worker"),
    ]
    assert "kubeadm upgrade apply v1.36.4" in steps[0].detail
    assert steps[3].detail.startswith("drain") and steps[3].detail.endswith("uncordon")


def test_a_single_node_is_not_drained() -> None:
    (step,) = skew.upgrade_order(cfg("1.35", workers=0), "1.36.4")
    assert "drain" not in step.detail and "uncordon" not in step.detail
