"""A machine on the test bed's bridge that is no cluster node: a bare network namespace (no systemd,
no SSH) with an address of the bed's subnet, from which connections to the hosts are tried.

Named ``gs-<name>`` like the hosts' namespaces, so a crashed run's leftovers are removed by the
bed's own cleanup (tests/testbed/network.py, ``cleanup_stale``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ._proc import run
from .network import BRIDGE, SUBNET, TestbedNetwork, netns_name

#: connect from SOURCE to HOST:PORT; "open" when the listener answered, "closed" on no answer or refusal
PROBE = """
import socket, sys
src, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(); s.settimeout(2.0); s.bind((src, 0))
try:
    s.connect((host, port)); print("open" if s.recv(2) == b"ok" else "odd")
except OSError:
    print("closed")
"""

#: answers "ok" on each port given, until killed (run on a test host: python3 is in its root)
LISTENER = """
import socket, sys, threading
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(16)
    while True:
        c, _ = s.accept(); c.sendall(b"ok"); c.close()
for p in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(p),), daemon=True).start()
threading.Event().wait()
"""


@dataclass(frozen=True)
class Stranger:
    name: str
    address: str

    def reach(self, host: str, port: int) -> str:
        """ "open" or "closed": a TCP connection from this namespace to ``host:port``."""
        r = subprocess.run(
            ["ip", "netns", "exec", netns_name(self.name), sys.executable, "-c", PROBE, self.address, host, str(port)],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        return r.stdout.strip()


@contextmanager
def stranger(name: str) -> Iterator[Stranger]:
    """A namespace on the bridge with a free address of the bed's subnet (call inside a running bed)."""
    address = TestbedNetwork.allocate_address()
    ns = netns_name(name)
    try:
        run(["ip", "netns", "add", ns], timeout=30)
        run(["ip", "link", "add", ns, "type", "veth", "peer", "name", "eth0", "netns", ns], timeout=30)
        run(["ip", "link", "set", ns, "master", BRIDGE, "up"], timeout=30)
        inside = ["ip", "-n", ns]
        run([*inside, "link", "set", "lo", "up"], timeout=30)
        run([*inside, "addr", "add", f"{address}/{SUBNET.prefixlen}", "dev", "eth0"], timeout=30)
        run([*inside, "link", "set", "eth0", "up"], timeout=30)
        yield Stranger(name, address)
    finally:
        run(["ip", "netns", "del", ns], timeout=30, check=False)
        run(["ip", "link", "del", ns], timeout=30, check=False)
        TestbedNetwork.free_address(address)
