"""gpustack's firewall on real hosts: the control-plane ports and the NodePorts closed to a machine
that is no cluster node, open to the nodes, the site's own rules untouched and SSH never cut.

Two hosts (fw1 control plane, fw2 worker) with a stock INPUT policy (ACCEPT) and rules of the site's
own (a chain with a rule in filter, a MARK rule in mangle PREROUTING). A listener on fw1 answers on
etcd's (2379), the API server's (6443), the kubelet's (10250) port, a NodePort (30090) and a port of
the site's (7777): kubeadm and the kubelet are the bed's doubles, so the listener stands in for the
servers (stopped while `up` runs: its preflight refuses ports in use). A stranger (a network namespace on the bed's
bridge, tests/testbed/stranger.py) reaches all of them before `up` and holds an SSH session to fw1
throughout. After `up`: the stranger reaches only 7777; fw2 reaches the API server, the kubelet and
the NodePort (not etcd: it is a worker); fw1 reaches its own etcd; this machine (the one gpustack runs
from) reaches the API server only. The site's rules, as `iptables-save` prints them without gpustack's
chains, are byte-identical. Then `firewall.admin_cidrs` with the stranger's address: only the
firewall stage changes, the stranger reaches the API server and the NodePort, still not etcd or the
kubelet; the next `up` changes nothing. `render`'s firewall/<node>.sh is the script each host got. ~8 min (3 `up` runs, 2 hosts)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from .cluster import run_gpustack, up, write_config
from .hosts import Host
from .network import BRIDGE_ADDRESS
from .pytest_plugin import TestbedFactory
from .services import Sources
from .stranger import LISTENER, PROBE, stranger

NAMES = ["fw1", "fw2"]
SHARED = "/var/lib/gpustack-doubles-cluster"
PORTS = [2379, 6443, 10250, 30090, 7777]
#: the site's own firewall on a stock host: INPUT's policy stays ACCEPT
SITE_FIREWALL = [
    "iptables -w -N SITE-RULES",
    "iptables -w -A SITE-RULES -p tcp --dport 7777 -j ACCEPT",
    "iptables -w -A INPUT -j SITE-RULES",
    "iptables -w -t mangle -A PREROUTING -p tcp --dport 7777 -j MARK --set-mark 7",
]


def site_rules(host: Host) -> str:
    """`iptables-save` of filter and mangle without gpustack's chains, jumps and the counters."""
    text = host.sudo("iptables-save -t filter; iptables-save -t mangle", check=True).stdout
    lines = [re.sub(r" \[\d+:\d+\]$", "", line) for line in text.splitlines() if not line.startswith("#")]
    return "\n".join(line for line in lines if "GPUSTACK" not in line)


def listening(host: Host, on: bool) -> None:
    """The stand-in servers on or off (off while `up` runs: its preflight refuses ports in use)."""
    if on:
        ports = " ".join(map(str, PORTS))
        host.sudo(f"systemd-run --collect --unit=gs-listener python3 /usr/local/lib/gs-listener.py {ports}", check=True)
        host.sudo("for i in $(seq 50); do ss -ltn | grep -q ':7777 ' && exit 0; sleep 0.2; done; exit 1", check=True)
    else:
        host.sudo("systemctl stop gs-listener", check=True)


def reach_from(host: Host, target: str, port: int) -> str:
    return host.run(f"python3 -c '{PROBE}' {host.address} {target} {port}", check=True).stdout.strip()


def reach_from_here(target: str, port: int) -> str:
    r = subprocess.run(
        [sys.executable, "-c", PROBE, BRIDGE_ADDRESS, target, str(port)],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return r.stdout.strip()


def test_control_plane_ports_and_nodeports_closed_to_strangers(
    testbed_factory: TestbedFactory, tmp_path: Path, sources: Sources
) -> None:
    shared = tmp_path / "cluster"
    shared.mkdir()
    bed = testbed_factory(NAMES, nspawn_args={n: [f"--bind={shared}:{SHARED}"] for n in NAMES})
    fw1, fw2 = bed.host("fw1"), bed.host("fw2")
    for cmd in SITE_FIREWALL:
        fw1.sudo(cmd, check=True)
    before = site_rules(fw1)
    fw1.write_file("/usr/local/lib/gs-listener.py", LISTENER)
    listening(fw1, True)

    with stranger("fwx") as outsider:
        deadline = time.monotonic() + 30
        while outsider.reach(fw1.address, 7777) != "open" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert {p: outsider.reach(fw1.address, p) for p in PORTS} == dict.fromkeys(PORTS, "open"), "a stock host"
        session = subprocess.Popen(
            ["ip", "netns", "exec", "gs-fwx", *fw1.ssh_args(), "--", "while :; do echo tick; sleep 1; done"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert session.stdout is not None and session.stdout.readline().strip() == "tick", "SSH from the stranger"

            config = write_config(bed, tmp_path / "gpustack.yaml", sources)
            state = tmp_path / "state"
            listening(fw1, False)
            built = up(config, state)
            assert built.rc == 0, built.output
            listening(fw1, True)
            # `render` shows the very script the run installed (gpustack/render/firewall_script.py)
            rendered = run_gpustack(config, state, "render", "--out", str(tmp_path / "render"))
            assert rendered.rc == 0, rendered.output
            for host in (fw1, fw2):
                installed = host.sudo("cat /usr/local/sbin/gpustack-firewall", check=True).stdout
                assert installed == (tmp_path / "render" / "firewall" / f"{host.name}.sh").read_text(), host.name

            assert {p: outsider.reach(fw1.address, p) for p in PORTS} == {
                2379: "closed", 6443: "closed", 10250: "closed", 30090: "closed", 7777: "open"
            }  # fmt: skip
            assert {p: reach_from(fw2, fw1.address, p) for p in PORTS} == {
                2379: "closed", 6443: "open", 10250: "open", 30090: "open", 7777: "open"
            }, "a worker: the API server, the kubelet and the NodePorts, not etcd"  # fmt: skip
            assert reach_from(fw1, fw1.address, 2379) == "open", "a control plane reaches etcd"
            assert reach_from_here(fw1.address, 6443) == "open", "the machine gpustack runs from"
            assert reach_from_here(fw1.address, 10250) == "closed"
            assert site_rules(fw1) == before, "the site's rules are byte-identical"

            # an admin network: the API server and the NodePorts, nothing else; only the firewall changes
            admin = write_config(
                bed, tmp_path / "gpustack-admin.yaml", sources, extra={"firewall": {"admin_cidrs": [outsider.address]}}
            )
            listening(fw1, False)
            opened = up(admin, state)
            assert opened.rc == 0, opened.output
            listening(fw1, True)
            assert {s for s, n in opened.changed().items() if n} == {"firewall"}, opened.changed()
            assert {p: outsider.reach(fw1.address, p) for p in PORTS} == {
                2379: "closed", 6443: "open", 10250: "closed", 30090: "open", 7777: "open"
            }  # fmt: skip
            listening(fw1, False)
            again = up(admin, state)
            assert again.rc == 0, again.output
            assert all(n == 0 for n in again.changed().values()), again.changed()
            assert site_rules(fw1) == before

            assert session.poll() is None, "the stranger's SSH session is still up"
            assert session.stdout.readline().strip() == "tick"
        finally:
            session.kill()
            session.wait(timeout=30)
