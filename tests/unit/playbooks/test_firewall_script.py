"""The templated /usr/local/sbin/gpustack-firewall, run for real in a throw-away network namespace.

Each test runs inside `unshare --net` (an anonymous namespace that disappears with the
process), so the machine's own firewall is never touched. Needs root and iptables; skipped
otherwise. Both iptables backends (nft and legacy) are exercised when present.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
from conftest import PLAYBOOKS

TEMPLATE = PLAYBOOKS / "roles" / "firewall" / "templates" / "gpustack-firewall.sh.j2"
VARS = {
    "ansible_managed": "Ansible managed",
    "firewall_chain": "GPUSTACK-INPUT",
    "firewall_nodeport_chain": "GPUSTACK-PREROUTING",
    "gpustack_node_address": "192.0.2.2",
    "gpustack_pod_cidr": "10.244.0.0/16",
    "gpustack_api_service_ip": "10.96.0.1",
    "gpustack_virtual_ip": "",
    "firewall_ipv4_node_addresses": ["192.0.2.2", "192.0.2.3"],
    # a worker that also has an IPv6 address in gpustack.yaml's node list (a node listed by it)
    "firewall_ipv6_node_addresses": ["2001:db8::3"],
    "firewall_ipv6_etcd_peers": [],
    "firewall_node_tcp_ports": ["6443", "10250", "10257", "10259", "2381"],
    "firewall_etcd_tcp_ports": "2379:2380",
    # this node is a control plane; 192.0.2.3 is a worker: etcd is open to 192.0.2.2 only
    "firewall_ipv4_etcd_peers": ["192.0.2.2"],
    "firewall_vxlan_udp_port": 8472,
    "firewall_closed_tcp_ports": "2379:2381,6443,10250,10257,10259",
    "gpustack_firewall_admin_cidrs": ["203.0.113.0/24"],
    # the admin network and the machine gpustack runs from
    "firewall_ipv4_api_admins": ["203.0.113.0/24", "198.51.100.1"],
    "gpustack_firewall_open_tcp_ports": [31000],
    "gpustack_firewall_nodeport_range": "30000:32767",
    "gpustack_firewall_tcp_nodeports": [30090, 30300],
}
# established + loopback + 4 pod rules + 2 nodes x (5 tcp + 1 udp) + 1 etcd peer + 2 API admins + closed
# + 2 nodeports + RETURN
EXPECTED_RULES = 1 + 1 + 4 + 2 * 6 + 1 + 2 + 1 + 2 + 1
# loopback + not-new + not-local + 2 nodes + pods + 1 admin network + 1 open port + tcp and udp DROP + RETURN
EXPECTED_NODEPORT_RULES = 3 + 2 + 1 + 1 + 1 + 2 + 1
# IPv6: established + loopback + 1 node x (5 tcp + tcp and udp NodePorts) + 1 open port + closed + NodePorts tcp
# and udp DROP + RETURN (no etcd peer: the control plane has no IPv6 address; no admin network: IPv4 only)
EXPECTED_IPV6_RULES = 1 + 1 + 7 + 1 + 1 + 2 + 1


def render(**overrides: object) -> str:
    # Ansible's template module uses trim_blocks=True
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    return env.from_string(TEMPLATE.read_text()).render({**VARS, **overrides})


def _can_unshare() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False).returncode == 0


BACKENDS = [b for b in ("nft", "legacy")
            if all(shutil.which(f"{t}-{b}{r}") for t in ("iptables", "ip6tables") for r in ("", "-restore"))]  # fmt: skip
needs_netns = pytest.mark.skipif(not _can_unshare() or not BACKENDS, reason="needs root, unshare and iptables")


def in_netns(script: Path, backend: str, body: str) -> subprocess.CompletedProcess[str]:
    """Run a shell snippet in a fresh network namespace; $FW is the script, $IPT iptables."""
    env = dict(
        os.environ,
        FW=str(script),
        IPT=f"iptables-{backend}",
        IP6T=f"ip6tables-{backend}",
        GPUSTACK_IPTABLES=f"iptables-{backend}",
        GPUSTACK_IP6TABLES=f"ip6tables-{backend}",
    )
    return subprocess.run(
        ["unshare", "--net", "sh", "-c", body],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "gpustack-firewall"
    path.write_text(render())
    path.chmod(0o755)
    return path


def test_renders_valid_sh(script: Path) -> None:
    subprocess.run(["sh", "-n", str(script)], check=True)
    text = script.read_text()
    assert "dport 22 " not in text
    # each chain (IPv4 filter and mangle, IPv6 filter) ends in one unconditional RETURN: everything else is the
    # site's to decide
    assert text.count("\n-j RETURN\n") == 3


def test_pods_reach_the_virtual_ip() -> None:
    text = render(gpustack_virtual_ip="192.0.2.100")
    assert "-s 10.244.0.0/16 -d 192.0.2.100 -p tcp -m tcp --dport 6443" in text
    assert "gpustack:pods-to-virtual-ip" not in render()


def test_ipv6_node_address_is_left_out_of_the_ipv4_rules() -> None:
    text = render(gpustack_node_address="2001:db8::2")
    assert "2001:db8::2" not in text
    assert "-d 10.96.0.1" in text


def test_ipv6_rules_come_from_the_ipv6_addresses_only() -> None:
    text = render(firewall_ipv6_etcd_peers=["2001:db8::2"])
    v6 = text.split("rules_filter6() {")[1].split("RULES\n}")[0]
    assert "-s 2001:db8::2 -p tcp -m tcp --dport 2379:2380 -m comment --comment gpustack:etcd-peers" in v6
    assert "192.0.2." not in v6 and "10.244." not in v6 and "203.0.113." not in v6


@needs_netns
@pytest.mark.parametrize("backend", BACKENDS)
def test_apply_check_remove(script: Path, backend: str) -> None:
    r = in_netns(
        script,
        backend,
        """
        set -e
        $IPT -P INPUT DROP
        $IPT -A INPUT -p tcp --dport 22 -j ACCEPT
        $IPT -A INPUT -s 198.51.100.7 -j ACCEPT
        before=$($IPT -S INPUT)
        if $FW check; then echo "check passed before apply"; exit 1; fi
        $FW apply
        $FW check
        $FW apply                      # idempotent
        $FW check
        echo "== INPUT"; $IPT -S INPUT
        echo "== PREROUTING"; $IPT -t mangle -S PREROUTING
        echo "== NODEPORTS"; $IPT -t mangle -S GPUSTACK-PREROUTING
        echo "== CHAIN"; $IPT -S GPUSTACK-INPUT
        echo "== INPUT6"; $IP6T -S INPUT
        echo "== CHAIN6"; $IP6T -S GPUSTACK-INPUT
        echo "== END"
        $FW remove
        $FW remove                     # idempotent
        if $IP6T -n -L GPUSTACK-INPUT >/dev/null 2>&1; then echo "IPv6 chain left behind"; exit 1; fi
        [ "$($IP6T -S INPUT)" = "-P INPUT ACCEPT" ] || { echo "IPv6 jump left behind"; exit 1; }
        after=$($IPT -S INPUT)
        [ "$before" = "$after" ] || { echo "INPUT changed: $after"; exit 1; }
        if $IPT -n -L GPUSTACK-INPUT >/dev/null 2>&1; then echo "chain left behind"; exit 1; fi
        if $IPT -t mangle -n -L GPUSTACK-PREROUTING >/dev/null 2>&1; then echo "mangle chain left behind"; exit 1; fi
        [ "$($IPT -t mangle -S PREROUTING)" = "-P PREROUTING ACCEPT" ] || { echo "mangle jump left behind"; exit 1; }
        echo done
    """,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    input_rules = r.stdout.split("== INPUT\n")[1].split("== PREROUTING\n")[0].splitlines()
    assert input_rules == [
        "-P INPUT DROP",
        "-A INPUT -j GPUSTACK-INPUT",
        "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT",
        "-A INPUT -s 198.51.100.7/32 -j ACCEPT",
    ]
    # iptables-nft quotes comments, iptables-legacy does not
    chain = r.stdout.split("== CHAIN\n")[1].split("== INPUT6\n")[0].replace('"', "").splitlines()
    assert chain[0] == "-N GPUSTACK-INPUT"
    assert len(chain) - 1 == EXPECTED_RULES
    assert chain[-1] == "-A GPUSTACK-INPUT -j RETURN"
    assert not any("--dport 22 " in line for line in chain)
    assert chain[-2:-4:-1] == [
        "-A GPUSTACK-INPUT -p tcp -m tcp --dport 30300 -m comment --comment gpustack:nodeport -j ACCEPT",
        "-A GPUSTACK-INPUT -p tcp -m tcp --dport 30090 -m comment --comment gpustack:nodeport -j ACCEPT",
    ]
    assert chain[-4] == (
        "-A GPUSTACK-INPUT -p tcp -m multiport --dports 2379:2381,6443,10250,10257,10259 "
        "-m comment --comment gpustack:closed -j DROP"
    )
    # IPv6: the same chain name in ip6tables' filter INPUT, its one jump first
    assert r.stdout.split("== INPUT6\n")[1].split("== CHAIN6\n")[0].splitlines() == [
        "-P INPUT ACCEPT", "-A INPUT -j GPUSTACK-INPUT"]  # fmt: skip
    chain6 = r.stdout.split("== CHAIN6\n")[1].split("== END")[0].replace('"', "").splitlines()
    assert chain6[0] == "-N GPUSTACK-INPUT" and len(chain6) - 1 == EXPECTED_IPV6_RULES
    assert (
        "-A GPUSTACK-INPUT -s 2001:db8::3/128 -p tcp -m tcp --dport 10250 -m comment --comment gpustack:nodes -j ACCEPT"
        in chain6
    )
    assert chain6[-4:] == [
        "-A GPUSTACK-INPUT -p tcp -m multiport --dports 2379:2381,6443,10250,10257,10259 "
        "-m comment --comment gpustack:closed -j DROP",
        "-A GPUSTACK-INPUT -p tcp -m tcp --dport 30000:32767 -m comment --comment gpustack:nodeports-closed -j DROP",
        "-A GPUSTACK-INPUT -p udp -m udp --dport 30000:32767 -m comment --comment gpustack:nodeports-closed -j DROP",
        "-A GPUSTACK-INPUT -j RETURN",
    ]
    prerouting = r.stdout.split("== PREROUTING\n")[1].split("== NODEPORTS\n")[0].splitlines()
    assert prerouting == ["-P PREROUTING ACCEPT", "-A PREROUTING -j GPUSTACK-PREROUTING"]
    nodeports = r.stdout.split("== NODEPORTS\n")[1].split("== CHAIN\n")[0].replace('"', "").splitlines()
    assert nodeports[0] == "-N GPUSTACK-PREROUTING"
    assert len(nodeports) - 1 == EXPECTED_NODEPORT_RULES
    assert nodeports[-3:] == [
        "-A GPUSTACK-PREROUTING -p tcp -m tcp --dport 30000:32767 -m comment --comment gpustack:nodeports-closed -j DROP",
        "-A GPUSTACK-PREROUTING -p udp -m udp --dport 30000:32767 -m comment --comment gpustack:nodeports-closed -j DROP",
        "-A GPUSTACK-PREROUTING -j RETURN",
    ]


@needs_netns
@pytest.mark.parametrize("backend", BACKENDS)
def test_drift_is_detected_and_repaired(script: Path, backend: str) -> None:
    r = in_netns(
        script,
        backend,
        """
        set -e
        $IPT -A INPUT -p tcp --dport 22 -j ACCEPT
        $FW apply
        repaired() { if $FW check; then exit "$1"; fi; $FW apply; $FW check; }
        $IPT -D GPUSTACK-INPUT 3;                          repaired 11
        $IPT -A GPUSTACK-INPUT -p tcp --dport 1 -j ACCEPT; repaired 12
        $IPT -I INPUT 1 -s 198.51.100.9 -j ACCEPT;         repaired 13
        $IPT -A INPUT -j GPUSTACK-INPUT;                   repaired 14
        $IPT -D INPUT -j GPUSTACK-INPUT;                   repaired 15
        $IPT -t mangle -D PREROUTING -j GPUSTACK-PREROUTING;  repaired 16
        $IPT -t mangle -D GPUSTACK-PREROUTING 4;              repaired 17
        $IPT -t mangle -I PREROUTING 1 -s 198.51.100.9 -j ACCEPT; repaired 18
        $IP6T -D GPUSTACK-INPUT 3;                         repaired 19
        $IP6T -D INPUT -j GPUSTACK-INPUT;                  repaired 20
        [ "$($IPT -t mangle -S PREROUTING | sed -n 2p)" = "-A PREROUTING -j GPUSTACK-PREROUTING" ]
        [ "$($IPT -S INPUT | grep -c -- '-j GPUSTACK-INPUT')" = 1 ]
        $IPT -S INPUT
    """,
    )
    assert r.returncode == 0, f"rc={r.returncode}\n{r.stdout}{r.stderr}"
    lines = [line for line in r.stdout.splitlines() if line.startswith(("-P", "-A"))]
    assert lines == [
        "-P INPUT ACCEPT",
        "-A INPUT -j GPUSTACK-INPUT",
        "-A INPUT -s 198.51.100.9/32 -j ACCEPT",
        "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT",
    ]


def test_usage(script: Path) -> None:
    r = subprocess.run([str(script), "bogus"], capture_output=True, text=True, check=False)
    assert r.returncode == 2
    assert "usage" in r.stderr
