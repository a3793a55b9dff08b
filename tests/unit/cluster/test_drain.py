"""gpustack/cluster/drain.py with the real kubernetes client against the fake API server, whose Eviction API
answers as the real one does (PodDisruptionBudgets: 429 when the budget allows no disruption)."""

from __future__ import annotations

import pytest

from gpustack.cluster import drain
from gpustack.runners.kube import Kube
from tests.fakes.kube_api import FakeKubeAPI

from ..nodes_cluster import cluster, pdb, pod


def pods_on(api: FakeKubeAPI, node: str) -> list[str]:
    return sorted(
        f"{k[3]}/{k[4]}" for k, o in api.objects.items() if k[2] == "pods" and o["spec"].get("nodeName") == node
    )


def test_classify_follows_kubectl_drain() -> None:
    objs = [
        pod("web", "w1"),
        pod("ds", "w1", owner=("DaemonSet", "flannel")),
        pod("static", "w1", owner=("Node", "w1"), mirror=True),
        pod("done", "w1", owner=None, phase="Succeeded"),
        pod("loose", "w1", owner=None),
        pod("cache", "w1", owner=("StatefulSet", "cache"), empty_dir=True),
    ]
    c = drain.classify(objs)
    assert [p.name for p in c.evict] == ["web", "done", "cache"]
    assert [(p.name, why.split(":")[0]) for p, why in c.skipped] == [("ds", "DaemonSet pod"), ("static", "static pod")]
    assert [p.name for p in c.unmanaged] == ["loose"]
    assert c.evict[2].note == "emptyDir data is lost" and c.evict[0].owner == "ReplicaSet/web-6c9f"


def test_preview_lists_the_pods_a_budget_blocks_and_changes_nothing(fake_api: FakeKubeAPI, kube: Kube) -> None:
    fake_api.seed(cluster(allowed=0))
    before = {k: dict(v) for k, v in fake_api.objects.items()}
    fake_api.reset_requests()
    p = drain.preview(kube, "w1")
    assert not p.ok
    assert [(q.ref, why) for q, why in p.blocked] == [
        (
            "default/web-6c9f-a",
            "Cannot evict pod as it would violate the pod's disruption budget.; "
            "The disruption budget web needs 2 healthy pods and has 2 currently",
        )
    ]
    assert [q.ref for q in p.pods.evict] == ["default/cache-0", "default/web-6c9f-a"]
    # nothing changed: the only writes were dry-run evictions
    assert fake_api.objects.keys() == before.keys()
    assert fake_api.get("v1", "Node", "w1")["spec"] == {}  # type: ignore[index]
    assert {m for m, path, _ in fake_api.mutating_requests()} == {"POST"}
    assert all(path.endswith("/eviction") for _, path, _ in fake_api.mutating_requests())
    assert drain.preview(kube, "w1").problems() == p.problems()  # still blocked: the budget was not used up


def test_drain_cordons_evicts_and_waits_when_the_budget_allows(fake_api: FakeKubeAPI, kube: Kube) -> None:
    fake_api.seed(cluster(allowed=1))
    assert drain.preview(kube, "w1").ok
    result = drain.drain(kube, "w1", timeout=5, interval=0.01)
    assert result.cordoned and sorted(result.evicted) == ["default/cache-0", "default/web-6c9f-a"]
    assert pods_on(fake_api, "w1") == ["kube-flannel/kube-flannel-ds-x"]  # the DaemonSet's pod stays
    w1 = fake_api.get("v1", "Node", "w1")
    assert w1 is not None and w1["spec"]["unschedulable"] is True
    assert w1["metadata"]["annotations"][drain.CORDON_ANNOTATION]
    assert fake_api.get("policy/v1", "PodDisruptionBudget", "web", "default")["status"]["disruptionsAllowed"] == 0  # type: ignore[index]
    # the other worker's web pod is now the last one: its budget blocks a second drain
    assert not drain.preview(kube, "w2").ok


def test_a_drain_that_times_out_uncordons_and_names_the_budget(fake_api: FakeKubeAPI, kube: Kube) -> None:
    fake_api.seed(cluster(allowed=0))
    clock = iter(float(t) for t in range(100))
    with pytest.raises(drain.DrainError) as ei:
        drain.drain(kube, "w1", timeout=3, interval=0, clock=lambda: next(clock), sleep=lambda s: None)
    assert "default/web-6c9f-a" in ei.value.message and "disruption budget web" in ei.value.message
    assert "uncordoned again" in (ei.value.hint or "")
    w1 = fake_api.get("v1", "Node", "w1")
    assert w1 is not None and not w1["spec"].get("unschedulable") and not w1["metadata"].get("annotations")
    # what could go went: the cache pod was evicted before the deadline
    assert "default/web-6c9f-a" in pods_on(fake_api, "w1") and "default/cache-0" not in pods_on(fake_api, "w1")


def test_a_node_someone_else_cordoned_stays_cordoned_after_a_failed_drain(fake_api: FakeKubeAPI, kube: Kube) -> None:
    objs = cluster(allowed=0)
    objs[1]["spec"] = {"unschedulable": True}  # w1 cordoned by the operator
    fake_api.seed(objs)
    with pytest.raises(drain.DrainError):
        drain.drain(kube, "w1", timeout=0, interval=0)
    w1 = fake_api.get("v1", "Node", "w1")
    assert w1 is not None and w1["spec"]["unschedulable"] is True


def test_unmanaged_pods_are_refused_before_any_eviction(fake_api: FakeKubeAPI, kube: Kube) -> None:
    fake_api.seed([*cluster(allowed=1), pod("debug", "w1", owner=None)])
    p = drain.preview(kube, "w1")
    assert not p.ok and p.problems() == [
        "default/debug: not managed by a controller: evicting it deletes it for good (delete or move it yourself)"
    ]
    with pytest.raises(drain.DrainError, match="default/debug"):
        drain.drain(kube, "w1", timeout=5, interval=0.01)
    assert len(pods_on(fake_api, "w1")) == 4  # nothing evicted


def test_eviction_api_semantics_of_the_fake(fake_api: FakeKubeAPI, kube: Kube) -> None:
    """The fake's Eviction API: no budget -> deleted; two budgets -> 500; finished pods skip the budget;
    dry run deletes nothing; a gone pod is reported as such."""
    fake_api.seed(
        [
            pod("free", "w1", labels={"app": "free"}),
            pod("twice", "w1", labels={"app": "both"}),
            pod("done", "w1", labels={"app": "web"}, phase="Succeeded"),
            pdb("a", "both", allowed=1),
            {**pdb("b", "both", allowed=1), "metadata": {"name": "b", "namespace": "default"}},
            pdb("web", "web", allowed=0),
        ]
    )
    assert kube.evict("free", "default", dry_run=True).outcome == "allowed"
    assert fake_api.get("v1", "Pod", "free", "default") is not None
    assert kube.evict("free", "default").outcome == "allowed"
    assert fake_api.get("v1", "Pod", "free", "default") is None
    assert kube.evict("free", "default").outcome == "gone"
    with pytest.raises(Exception, match="more than one PodDisruptionBudget"):
        kube.evict("twice", "default")
    assert kube.evict("done", "default").outcome == "allowed"
