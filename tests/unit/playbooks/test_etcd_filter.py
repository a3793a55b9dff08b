"""gpustack_etcd_members_to_remove: the removed control planes' members in `etcdctl member list
--write-out=json` (the shape etcd 3.5/3.6 prints), by name or peer address, with hex IDs."""

from __future__ import annotations

import json

import pytest
from conftest import PLAYBOOKS, load_path

etcd = load_path("gpustack_etcd_filter", PLAYBOOKS / "filter_plugins" / "gpustack_etcd.py")

LIST = {
    "header": {"cluster_id": 17237436991929493444, "member_id": 9372538179322589801, "raft_term": 3},
    "members": [
        {
            "ID": 9372538179322589801,
            "name": "cp1",
            "peerURLs": ["https://10.0.0.10:2380"],
            "clientURLs": ["https://10.0.0.10:2379"],
        },
        {
            "ID": 10501334649042878790,
            "name": "cp2",
            "peerURLs": ["https://10.0.0.11:2380"],
            "clientURLs": ["https://10.0.0.11:2379"],
        },
        # a member that never started has no name yet: found by its peer address
        {"ID": 18249187646912138824, "peerURLs": ["https://10.0.0.12:2380"]},
    ],
}


def test_members_by_name_and_by_peer_address_with_exact_hex_ids() -> None:
    found = etcd.etcd_members_to_remove(json.dumps(LIST), [{"name": "cp2", "address": "10.0.0.99"}])
    assert found == [{"id": "91bc3c398fb3c146", "name": "cp2"}]
    assert int(found[0]["id"], 16) == 10501334649042878790  # beyond 2**53: no float rounding
    found = etcd.etcd_members_to_remove(LIST, [{"name": "cp3", "address": "10.0.0.12"}])
    assert found == [{"id": format(18249187646912138824, "x"), "name": "10.0.0.12"}]
    assert etcd.etcd_members_to_remove(LIST, [{"name": "gone", "address": "10.0.0.50"}]) == []


def test_not_json_is_an_error() -> None:
    with pytest.raises(Exception, match="did not print JSON"):  # AnsibleFilterError
        etcd.etcd_members_to_remove("Error: context deadline exceeded", [])
