"""playbooks/roles/reset/library/gpustack_netfilter_cleanup.py: `gpustack reset` removes the chains Kubernetes,
Flannel and CNI plugins made, and nothing else (no table flush, no policy change, no other rule)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from conftest import PLAYBOOKS, load_path

SAVE = (Path(__file__).parent / "data" / "iptables-save-filter-k8s.txt").read_text()
PREFIXES = ["KUBE-", "FLANNEL", "CNI-"]


@pytest.fixture(scope="module")
def cleanup() -> ModuleType:
    return load_path(
        "gpustack_netfilter_cleanup", PLAYBOOKS / "roles" / "reset" / "library" / "gpustack_netfilter_cleanup.py"
    )


def test_parse_save_keeps_quoted_comments_whole(cleanup: ModuleType) -> None:
    chains, rules = cleanup.parse_save(SAVE)
    assert chains[:3] == ["INPUT", "FORWARD", "OUTPUT"] and "ufw-user-input" in chains
    assert (
        "INPUT",
        ["-m", "comment", "--comment", "kubernetes health check service ports", "-j", "KUBE-NODEPORTS"],
    ) in rules


def test_plan_removes_only_kubernetes_chains_and_the_jumps_into_them(cleanup: ModuleType) -> None:
    deletions, doomed = cleanup.plan(SAVE, PREFIXES)
    assert doomed == [
        "FLANNEL-FWD",
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-FIREWALL",
        "KUBE-FORWARD",
        "KUBE-KUBELET-CANARY",
        "KUBE-NODEPORTS",
        "KUBE-PROXY-CANARY",
        "KUBE-PROXY-FIREWALL",
        "KUBE-SERVICES",
    ]
    deleted_from = [chain for chain, _ in deletions]
    assert deleted_from.count("INPUT") == 4 and deleted_from.count("FORWARD") == 4 and deleted_from.count("OUTPUT") == 3
    targets = {argv[argv.index("-j") + 1] for _, argv in deletions}
    assert targets <= set(doomed)
    # never: the host's own rules, ufw's, gpustack's own chain (the firewall role removes it)
    flat = [" ".join(argv) for _, argv in deletions]
    assert not any("GPUSTACK-INPUT" in r or "ufw" in r or "--dport 22" in r for r in flat)
    # rules inside removed chains go with the chain (flush), not one by one
    assert not any(chain in doomed for chain in deleted_from)


def test_plan_on_a_host_without_kubernetes_does_nothing(cleanup: ModuleType) -> None:
    clean = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 22 -j ACCEPT\nCOMMIT\n"
    assert cleanup.plan(clean, PREFIXES) == ([], [])


def test_builtin_chains_are_never_removed_even_if_a_prefix_matches(cleanup: ModuleType) -> None:
    _, doomed = cleanup.plan(SAVE, ["INPUT", "FORWARD", "KUBE-FIREWALL"])
    assert doomed == ["KUBE-FIREWALL"]
