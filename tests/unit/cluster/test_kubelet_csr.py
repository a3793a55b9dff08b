"""The kubelet serving-certificate approver's rules (gpustack/cluster/kubelet_csr.py) on requests made as a kubelet
makes them (tests/kubelet_csrs.py); the real API server and signer: tests/controlplane/test_kubelet_csr.py."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack.checks.certs import pending_serving
from gpustack.cluster.kubelet_csr import Approval, approve_pending, describe, judge
from gpustack.config.model import Config
from gpustack.runners.kube import Kube
from tests.kubelet_csrs import csr_object, request_pem

INVENTORY = {"w1": "10.0.0.11", "w2": "10.0.0.12"}


def node(name: str, ip: str, hostname: str) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": hostname}]}}  # fmt: skip


NODES = {"w1": node("w1", "10.0.0.11", "gpu-w1"), "w2": node("w2", "10.0.0.12", "gpu-w2")}


def from_node(
    csr: dict[str, Any], name: str, groups: tuple[str, ...] = ("system:nodes", "system:authenticated")
) -> dict[str, Any]:
    csr["spec"] = {**csr["spec"], "username": f"system:node:{name}", "groups": list(groups)}
    return csr


def good(name: str = "w1", **kw: Any) -> dict[str, Any]:
    pem = request_pem(f"system:node:{name}", dns=(f"gpu-{name}",), ips=(INVENTORY[name],))
    return from_node(csr_object(f"csr-{name}", pem, **kw), name)


def test_the_nodes_own_request_is_approved() -> None:
    verdict = judge(good(), NODES, INVENTORY)
    assert verdict.approve, verdict.reason
    assert verdict.node == "w1" and "10.0.0.11" in verdict.reason and "gpu-w1" in verdict.reason
    with_encipherment = good(usages=("key encipherment", "digital signature", "server auth"))
    assert judge(with_encipherment, NODES, INVENTORY).approve


@pytest.mark.parametrize(
    ("cn", "dns", "ips", "requester", "expected"),
    [
        ("system:node:w2", ("gpu-w2",), ("10.0.0.12",), "w1", "not system:node:w1"),  # another node's name
        ("system:node:w1", ("gpu-w1",), ("10.0.0.12",), "w1", "IP(s) 10.0.0.12"),  # another node's address
        ("system:node:w1", ("gpu-w1",), ("192.0.2.7",), "w1", "IP(s) 192.0.2.7"),  # a foreign IP
        ("system:node:w1", ("kubernetes.default.svc",), (), "w1", "DNS name(s) kubernetes.default.svc"),
        ("system:node:w1", ("gpu-w2",), ("10.0.0.11",), "w1", "DNS name(s) gpu-w2"),
        ("system:node:w1", (), (), "w1", "no DNS or IP"),
        ("system:node:w9", ("gpu-w9",), ("10.0.0.19",), "w9", "not in gpustack.yaml"),
    ],
)
def test_a_request_for_names_that_are_not_the_requesters_is_refused(
    cn: str, dns: tuple[str, ...], ips: tuple[str, ...], requester: str, expected: str
) -> None:
    csr = from_node(csr_object("csr-x", request_pem(cn, dns=dns, ips=ips)), requester)
    verdict = judge(csr, NODES, INVENTORY)
    assert not verdict.approve and expected in verdict.reason, verdict.reason


def test_the_requester_must_be_a_node_and_the_subject_a_nodes() -> None:
    pem = request_pem("system:node:w1", dns=("gpu-w1",), ips=("10.0.0.11",))
    by_admin = csr_object("csr-a", pem)
    by_admin["spec"] |= {"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins"]}
    assert "not a node" in judge(by_admin, NODES, INVENTORY).reason
    not_in_group = from_node(csr_object("csr-b", pem), "w1", groups=("system:authenticated",))
    assert "not a node" in judge(not_in_group, NODES, INVENTORY).reason
    wrong_org = from_node(
        csr_object("csr-c", request_pem("system:node:w1", dns=("gpu-w1",), org="system:masters")), "w1"
    )
    assert "organization" in judge(wrong_org, NODES, INVENTORY).reason
    client_usage = from_node(csr_object("csr-d", pem, usages=("digital signature", "client auth")), "w1")
    assert "usages" in judge(client_usage, NODES, INVENTORY).reason
    no_node = judge(good("w2"), {"w1": NODES["w1"]}, INVENTORY)
    assert not no_node.approve and "no Node object" in no_node.reason
    garbage = from_node(csr_object("csr-e", b"not a request"), "w1")
    assert "not a PEM" in judge(garbage, NODES, INVENTORY).reason


def test_a_node_object_cannot_widen_what_the_inventory_allows() -> None:
    """The kubelet writes its own Node status: an address added there is still not the node's in gpustack.yaml."""
    widened = node("w1", "10.0.0.11", "gpu-w1")
    widened["status"]["addresses"].append({"type": "ExternalIP", "address": "203.0.113.5"})
    csr = from_node(
        csr_object("csr-w", request_pem("system:node:w1", dns=("gpu-w1",), ips=("10.0.0.11", "203.0.113.5"))), "w1"
    )
    verdict = judge(csr, {**NODES, "w1": widened}, INVENTORY)
    assert not verdict.approve and "203.0.113.5" in verdict.reason


def test_only_pending_kubelet_serving_requests_are_considered() -> None:
    approved = good()
    approved["status"] = {"conditions": [{"type": "Approved", "status": "True"}]}
    client = good("w2")
    client["spec"]["signerName"] = "kubernetes.io/kube-apiserver-client-kubelet"
    pending = good("w2")
    assert pending_serving([approved, client, pending]) == [pending]


def test_describe_names_each_request() -> None:
    ok = judge(good(), NODES, INVENTORY)
    bad = judge(from_node(csr_object("csr-x", request_pem("system:node:w2", dns=("gpu-w2",))), "w1"), NODES, INVENTORY)
    lines = describe(Approval([ok], [bad]))
    assert lines[0].startswith("approved csr-w1") and lines[1].startswith("left pending csr-x of w1")


def test_a_server_without_the_certificates_api_has_nothing_to_approve(kube: Kube) -> None:
    """The fake API server (tests/fakes/kube_api.py) serves no certificates.k8s.io/v1, as discovery says; every
    real one does (tests/controlplane/test_kubelet_csr.py)."""
    result = approve_pending(kube, Config.model_validate({"nodes": [{"name": "w1", "address": "10.0.0.11"}]}))
    assert not result.served and result.approved == [] and result.refused == []
