"""`gpustack up` (host layer) on a real host that already runs a host firewall: ufw or firewalld.

The firewall role keeps its own iptables chain GPUSTACK-INPUT behind one jump at the top of
INPUT; with ufw active that jump must precede ufw's chains and leave ufw's own rules alone; with
firewalld running (nftables backend, which filters in its own nftables table as well) the role
also binds the pod network and the node addresses to a firewalld zone ``gpustack`` that opens
the cluster ports. Both firewalls are installed in the bed's root but masked; the prepare hooks
enable one at boot.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .cluster import UpRun, up, write_config
from .hosts import Host, Testbed
from .prepare import enable_firewalld, enable_ufw
from .pytest_plugin import TestbedFactory
from .services import Sources

POD_CIDR = "10.244.0.0/16"
API_SERVICE_IP = "10.96.0.1"
JUMP = "-A INPUT -j GPUSTACK-INPUT"
#: the address of a node that left the cluster
GONE = "10.213.0.99"


def _run_up(bed: Testbed, tmp_path: Path, sources: Sources) -> UpRun:
    cfg = write_config(bed, tmp_path / "gpustack.yaml", sources)
    first = up(cfg, tmp_path / "state")
    assert first.rc == 0, first.output
    summary = first.summary()
    assert summary["firewall"]["status"] in {"ok", "changed"}, summary
    return first


def _assert_converged(bed: Testbed, tmp_path: Path) -> None:
    second = up(tmp_path / "gpustack.yaml", tmp_path / "state")
    assert second.rc == 0, second.output
    changed = second.changed()
    assert all(v == 0 for v in changed.values()), changed


def _assert_our_chain(host: Host) -> list[str]:
    """GPUSTACK-INPUT exists, its single jump is the first rule of INPUT; returns INPUT's rules."""
    rules = host.sudo("iptables -w -S", check=True).stdout
    assert "-N GPUSTACK-INPUT" in rules
    ours = [r for r in rules.splitlines() if r.startswith("-A GPUSTACK-INPUT")]
    assert any(f"-s {POD_CIDR} -d {host.address}/32 -p tcp" in r and "--dport 6443" in r for r in ours), ours
    assert any(
        f"-s {POD_CIDR} -d {API_SERVICE_IP}/32 -p tcp" in r and "--dport 443" in r and r.endswith("-j ACCEPT")
        for r in ours
    ), ours
    assert ours[-1] == "-A GPUSTACK-INPUT -j RETURN"
    input_rules = host.sudo("iptables -w -S INPUT", check=True).stdout.splitlines()
    assert input_rules[1] == JUMP, input_rules
    assert input_rules.count(JUMP) == 1, input_rules
    return input_rules


def test_up_with_ufw_active(
    testbed_factory: TestbedFactory,
    tmp_path: Path,
    sources: Sources,
) -> None:
    bed = testbed_factory(["ufwhost"], prepare=enable_ufw("default deny incoming", "allow 22/tcp"))
    host = bed.hosts[0]
    status = host.sudo("ufw status verbose", check=True).stdout
    assert "Status: active" in status and "deny (incoming)" in status, status
    ufw_jumps_before = [r for r in host.sudo("iptables -w -S INPUT", check=True).stdout.splitlines() if "-j ufw-" in r]
    assert ufw_jumps_before, "ufw hooked its chains into INPUT"

    _run_up(bed, tmp_path, sources)

    input_rules = _assert_our_chain(host)
    # INPUT: policy, our jump, then ufw's jumps unchanged and in their order
    assert input_rules[0] == "-P INPUT DROP", input_rules
    assert [r for r in input_rules if "-j ufw-" in r] == ufw_jumps_before
    assert all(i > 1 for i, r in enumerate(input_rules) if "-j ufw-" in r)
    # ufw still active with its own rules
    status = host.sudo("ufw status verbose", check=True).stdout
    assert "Status: active" in status and "deny (incoming)" in status, status
    assert any(line.startswith("22/tcp") and "ALLOW IN" in line for line in status.splitlines()), status
    assert host.sudo("iptables -w -S ufw-user-input", check=True).stdout.count("--dport 22") >= 1

    # ufw reloading its rules (stop + start of its chains) leaves our jump on top
    host.sudo("ufw reload", check=True)
    _assert_our_chain(host)
    _assert_converged(bed, tmp_path)
    _assert_our_chain(host)


def _firewalld_zone(host: Host, *, permanent: bool) -> dict[str, list[str]]:
    flag = "--permanent " if permanent else ""
    text = host.sudo(f"firewall-cmd {flag}--zone=gpustack --list-all", check=True).stdout
    out: dict[str, list[str]] = {}
    for line in text.splitlines()[1:]:
        key, _, value = line.strip().partition(":")
        out[key.strip()] = value.split()
    return out


def test_up_with_firewalld_running(
    testbed_factory: TestbedFactory,
    tmp_path: Path,
    sources: Sources,
) -> None:
    bed = testbed_factory(["fwdhost"], prepare=enable_firewalld())
    host = bed.hosts[0]
    state = host.sudo("firewall-cmd --state", check=False)
    if state.stdout.strip() != "running":
        journal = host.sudo("journalctl -b -u firewalld --no-pager | tail -40", check=False).stdout
        pytest.fail(f"firewalld is not running in the host: {state.stdout}{state.stderr}\n{journal}")
    backend = host.sudo("grep -E '^FirewallBackend=' /etc/firewalld/firewalld.conf", check=True).stdout.strip()
    assert backend == "FirewallBackend=nftables"
    default_zone = host.sudo("firewall-cmd --get-default-zone", check=True).stdout.strip()
    default_before = host.sudo(f"firewall-cmd --zone={default_zone} --list-all", check=True).stdout
    # a zone as an earlier gpustack left it with a node that has since left the cluster (node remove,
    # or taken out of gpustack.yaml): its address bound, its etcd rule there
    etcd_rule = 'rule family="ipv4" source address="{}" port port="2379-2380" protocol="tcp" accept'
    host.sudo(
        "firewall-cmd --permanent --new-zone=gpustack && firewall-cmd --permanent --zone=gpustack"
        f" --add-source={GONE} && firewall-cmd --permanent --zone=gpustack --add-rich-rule='{etcd_rule.format(GONE)}'"
        " && firewall-cmd --reload",
        check=True,
    )

    _run_up(bed, tmp_path, sources)

    assert host.sudo("firewall-cmd --state", check=True).stdout.strip() == "running"
    for permanent in (True, False):
        zone = _firewalld_zone(host, permanent=permanent)
        assert set(zone["sources"]) == {POD_CIDR, host.address}, (permanent, zone)
        assert {"6443/tcp", "10250/tcp", "8472/udp", "30090/tcp", "30300/tcp"} <= set(zone["ports"]), (
            permanent,
            zone,
        )
        # the nodes keep SSH (they left the default zone); pods and nodes may forward to each other
        assert "ssh" in zone["services"] and zone["forward"] == ["yes"], (permanent, zone)
        # the node that left is accepted no more: only this (control-plane) node has etcd's rule
        flag = "--permanent " if permanent else ""
        rules = host.sudo(f"firewall-cmd {flag}--zone=gpustack --list-rich-rules", check=True).stdout.splitlines()
        assert rules == [etcd_rule.format(host.address)], (permanent, rules)
    # firewalld's own nftables table carries the zone (no nft CLI in the root: libnftables)
    list_table = "import nftables; print(nftables.Nftables().cmd('list table inet firewalld')[1])"
    ruleset = host.sudo(f'python3 -c "{list_table}"', check=True).stdout
    assert "gpustack" in ruleset and POD_CIDR in ruleset
    # the default zone keeps what it had (ssh ...) and gains the NodePorts
    default_after = host.sudo(f"firewall-cmd --zone={default_zone} --list-all", check=True).stdout
    services = next(line for line in default_before.splitlines() if line.strip().startswith("services:"))
    assert services in default_after
    assert "30090/tcp" in default_after and "30300/tcp" in default_after
    # ...and our iptables chain is there as well
    _assert_our_chain(host)

    _assert_converged(bed, tmp_path)
    _assert_our_chain(host)
    assert set(_firewalld_zone(host, permanent=False)["sources"]) == {POD_CIDR, host.address}
