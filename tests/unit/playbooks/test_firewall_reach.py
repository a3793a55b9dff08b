"""Who reaches what through the templated gpustack-firewall: real packets between two throw-away
network namespaces joined by a veth pair.

``node`` runs the script (the VARS of test_firewall_script: it is control plane 192.0.2.2), listens on
the API server's, etcd's (client and metrics) and the kubelet's ports and on 7777 (a port of the site's, nothing of
gpustack's), and stands in for kube-proxy with its NodePort DNAT in nat PREROUTING (30090 -> 9090, as
KUBE-NODEPORTS rewrites a NodePort to a pod): the NodePort is filtered on its original port, before
the DNAT. The other namespace connects from four source addresses: a worker of the cluster
(192.0.2.3), a pod (10.244.1.5: Prometheus beside etcd, on the node's own address), an address of
``firewall.admin_cidrs`` (203.0.113.5) and a stranger (198.51.100.77); and over IPv6
(the node 2001:db8::2, listening dual-stack) from the worker's IPv6 address (2001:db8::3, in the node list) and
an IPv6 stranger (2001:db8::77): ip6tables' chain gives IPv6 the same verdicts (no kube-proxy DNAT over IPv6:
the NodePort itself listens).
Needs root, ``ip`` and iptables; skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_firewall_script import BACKENDS, needs_netns, render

LISTENER = """
import socket, sys, threading
def serve(port):
    s = socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port)); s.listen(16)
    while True:
        c, _ = s.accept(); c.sendall(b"ok"); c.close()
for p in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(p),), daemon=True).start()
print("listening", flush=True)
threading.Event().wait()
"""
PROBE = """
import socket, sys
src, port = sys.argv[1], int(sys.argv[2])
v6 = ":" in src
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET); s.settimeout(1.0); s.bind((src, 0))
try:
    s.connect(("2001:db8::2" if v6 else "192.0.2.2", port)); print("open" if s.recv(2) == b"ok" else "odd")
except OSError:
    print("closed")
"""
NODE, POD, ADMIN, STRANGER = "192.0.2.3", "10.244.1.5", "203.0.113.5", "198.51.100.77"
NODE6, STRANGER6 = "2001:db8::3", "2001:db8::77"
PORTS = [2379, 2381, 6443, 10250, 30090, 7777]
#: source -> the ports it reaches (192.0.2.3 is a worker: no etcd client or peer port, but etcd's metrics for a
#: Prometheus there; a pod: the API server, the kubelet's and etcd's metrics; the admin network: API and NodePorts)
EXPECTED = {
    NODE: {2379: "closed", 2381: "open", 6443: "open", 10250: "open", 30090: "open", 7777: "open"},
    POD: {2379: "closed", 2381: "open", 6443: "open", 10250: "open", 30090: "open", 7777: "open"},
    ADMIN: {2379: "closed", 2381: "closed", 6443: "open", 10250: "closed", 30090: "open", 7777: "open"},
    STRANGER: {2379: "closed", 2381: "closed", 6443: "closed", 10250: "closed", 30090: "closed", 7777: "open"},
    NODE6: {2379: "closed", 2381: "open", 6443: "open", 10250: "open", 30090: "open", 7777: "open"},
    STRANGER6: {2379: "closed", 2381: "closed", 6443: "closed", 10250: "closed", 30090: "closed", 7777: "open"},
}


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def pair() -> Iterator[tuple[str, str]]:
    """Two named namespaces (``ip netns exec`` needs names): the node and the outside, on one veth."""
    if not shutil.which("ip"):
        pytest.skip("needs iproute2")  # installed by scripts/test.sh; under its PYTEST_NO_SKIPS a skip fails CI
    node, out = f"gsfw-n{os.getpid()}", f"gsfw-o{os.getpid()}"
    _ip("netns", "add", node)
    _ip("netns", "add", out)
    try:
        _ip("link", "add", "gsfwa", "netns", node, "type", "veth", "peer", "name", "gsfwb", "netns", out)
        _ip("-n", node, "addr", "add", "192.0.2.2/24", "dev", "gsfwa")
        _ip("-n", node, "addr", "add", "2001:db8::2/64", "dev", "gsfwa", "nodad")
        for ns, dev in ((node, "gsfwa"), (out, "gsfwb")):
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", dev, "up")
        for address in (NODE, POD, ADMIN, STRANGER):
            _ip("-n", out, "addr", "add", f"{address}/24", "dev", "gsfwb")
        for address in (NODE6, STRANGER6):
            _ip("-n", out, "addr", "add", f"{address}/64", "dev", "gsfwb", "nodad")
        for net in ("10.244.1.0/24", "203.0.113.0/24", "198.51.100.0/24"):
            _ip("-n", node, "route", "add", net, "dev", "gsfwa")
        yield node, out
    finally:
        _ip("netns", "del", node)
        _ip("netns", "del", out)


def _reach(out: str, source: str, port: int) -> str:
    r = subprocess.run(
        ["ip", "netns", "exec", out, sys.executable, "-c", PROBE, source, str(port)],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return r.stdout.strip()


@needs_netns
@pytest.mark.parametrize("backend", BACKENDS)
def test_strangers_reach_only_the_sites_ports(pair: tuple[str, str], backend: str, tmp_path: Path) -> None:
    node, out = pair
    script = tmp_path / "gpustack-firewall"
    script.write_text(render())
    script.chmod(0o755)
    ipt = f"iptables-{backend}"
    env = dict(os.environ, GPUSTACK_IPTABLES=ipt, GPUSTACK_IP6TABLES=f"ip6tables-{backend}")
    node_exec = ["ip", "netns", "exec", node]
    # kube-proxy's part: the NodePort DNATed to the "pod" in nat PREROUTING; the node's own INPUT stays ACCEPT
    subprocess.run(
        [*node_exec, ipt, "-w", "-t", "nat", "-A", "PREROUTING", "-p", "tcp", "--dport", "30090",
         "-j", "DNAT", "--to-destination", "192.0.2.2:9090"],
        check=True, timeout=30,
    )  # fmt: skip
    listener = subprocess.Popen(
        [*node_exec, sys.executable, "-c", LISTENER, "2379", "2381", "6443", "10250", "9090", "30090", "7777"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert listener.stdout is not None and listener.stdout.readline().strip() == "listening"
        for stranger in (STRANGER, STRANGER6):
            assert {p: _reach(out, stranger, p) for p in PORTS} == dict.fromkeys(PORTS, "open"), "no script: all open"
        subprocess.run([*node_exec, str(script), "apply"], check=True, env=env, timeout=60)
        after = {s: {p: _reach(out, s, p) for p in PORTS} for s in EXPECTED}
        assert after == EXPECTED
        subprocess.run([*node_exec, str(script), "remove"], check=True, env=env, timeout=60)
        for stranger in (STRANGER, STRANGER6):
            assert {p: _reach(out, stranger, p) for p in PORTS} == dict.fromkeys(PORTS, "open")
    finally:
        listener.kill()
        listener.wait(timeout=30)
