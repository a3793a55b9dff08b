"""gpustack_flag_drift (role security_apply): the managed flags of a static pod manifest on the host that differ from
gpustack.yaml's security:, held to the same answer as gpustack/cluster/security_apply.py's judgement of the mirror pod
(the twin that `gpustack security apply` prints before it asks), on kubeadm's ``--name=value`` command lines."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from conftest import PLAYBOOKS, load_path

from gpustack.cluster import security_apply as sa
from gpustack.commands.security_apply import flag_vars
from gpustack.config.model import Config

flags = load_path("gpustack_flags_filter", PLAYBOOKS / "filter_plugins" / "gpustack_flags.py")
NODES = [{"name": "cp1", "address": "192.0.2.11", "role": "control-plane", "connection": "local"}]


def cfg(**sec: Any) -> Config:
    return Config.model_validate({"nodes": NODES, "security": sec})


def manifest(command: list[str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": command[0], "command": command}]}}


SETTINGS = [
    {},
    {"encryption_at_rest": False},
    {"audit": {"enabled": False}, "profiling": True},
    {"tls_cipher_suites": [], "extend_token_expiration": True},
    {"encryption_at_rest": False, "audit": {"enabled": False, "max_age": 7}},
]


@pytest.mark.parametrize(("built", "now"), list(itertools.product(range(len(SETTINGS)), repeat=2)))
def test_the_filter_and_the_mirror_pod_judgement_agree(built: int, now: int) -> None:
    was, want = cfg(**SETTINGS[built]), cfg(**SETTINGS[now])
    sent = flag_vars(want)
    for component in sa.COMPONENTS:
        command = [component, "--bind-address=127.0.0.1", *(f"--{k}={v}" for k, v in sa.wanted(was)[component].items())]
        on_host = flags.flag_drift(manifest(command), sent[component])
        from_api = sorted(ch.flag for ch in sa.component_drift(component, command, sa.wanted(want)[component]))
        assert on_host == from_api
        assert (on_host == []) == (sa.wanted(was)[component] == sa.wanted(want)[component])


def test_a_bare_boolean_flag_is_true_and_a_file_without_containers_is_refused() -> None:
    want = {"managed": ["profiling"], "flags": {"profiling": "true"}}
    assert flags.flag_drift(manifest(["kube-scheduler", "--profiling"]), want) == []
    assert flags.flag_drift(manifest(["kube-scheduler", "--profiling=false"]), want) == ["profiling"]
    with pytest.raises(flags.AnsibleFilterError, match="not a static pod manifest"):
        flags.flag_drift({"kind": "Pod"}, want)
