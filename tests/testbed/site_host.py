"""What a real server brings before gpustack (tests/testbed/test_up_single.py's host has all of it):
its own firewall, unattended-upgrades as Debian configures it and a kernel installed to boot next
without its headers; and what kube-proxy, the kubelet and Flannel leave behind for `reset` to remove."""

from __future__ import annotations

import os
import re

from .hosts import Host
from .prepare import write_files

#: What kube-proxy, the kubelet and Flannel leave in iptables (names as they make them).
KUBE_TRACES = [
    "iptables -w -N KUBE-FIREWALL",
    "iptables -w -A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP",
    "iptables -w -A INPUT -j KUBE-FIREWALL",
    "iptables -w -N KUBE-SERVICES",
    "iptables -w -A OUTPUT -m conntrack --ctstate NEW -m comment --comment 'kubernetes service portals' -j KUBE-SERVICES",
    "iptables -w -N FLANNEL-FWD",
    "iptables -w -A FORWARD -m comment --comment 'flanneld forward' -j FLANNEL-FWD",
    "iptables -w -t nat -N KUBE-POSTROUTING",
    "iptables -w -t nat -A POSTROUTING -m comment --comment 'kubernetes postrouting rules' -j KUBE-POSTROUTING",
    "iptables -w -t nat -N CNI-HOSTPORT-DNAT",
    "iptables -w -t nat -A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
    "ip6tables -w -N KUBE-FIREWALL",
    "ip6tables -w -A INPUT -j KUBE-FIREWALL",
    "ip link add cni0 type bridge",
    "ip link add flannel.1 type vxlan id 1 dstport 8472 nolearning",  # as Flannel makes it
    "mkdir -p /etc/cni/net.d /var/lib/kubelet/pods /var/lib/etcd",
    "echo '{}' > /etc/cni/net.d/10-flannel.conflist",
]
#: The site's own firewall: a chain, a rule in it, and a DROP policy on INPUT with SSH allowed.
SITE_FIREWALL = [
    "iptables -w -N SITE-RULES",
    "iptables -w -A SITE-RULES -p tcp --dport 7777 -j ACCEPT",
    "iptables -w -A INPUT -j SITE-RULES",
    "iptables -w -A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
    "iptables -w -A INPUT -p tcp --dport 22 -j ACCEPT",
    "iptables -w -A INPUT -i lo -j ACCEPT",
    "iptables -w -P INPUT DROP",
]

NEXT_KERNEL = re.sub(r"-(\d+)-", lambda m: f"-{int(m.group(1)) + 1}-", os.uname().release, count=1)
if os.uname().release == NEXT_KERNEL:
    NEXT_KERNEL += "+next"

#: unattended-upgrades as Debian configures it (its program is a stand-in: the hosts have no archive to
#: install it from), and a kernel installed to boot next without its headers
SERVER_FILES = write_files({
    "/usr/bin/unattended-upgrade": "#!/bin/sh\nexit 0\n",
    "/etc/apt/apt.conf.d/20auto-upgrades":
        'APT::Periodic::Update-Package-Lists "1";\nAPT::Periodic::Unattended-Upgrade "1";\n',
    "/etc/apt/apt.conf.d/50unattended-upgrades":
        'Unattended-Upgrade::Origins-Pattern {\n  "origin=Debian,codename=${distro_codename},label=Debian-Security";\n};\n'
        'Unattended-Upgrade::Package-Blacklist {\n  "nvidia-";\n};\n',
    f"/lib/modules/{NEXT_KERNEL}/kernel/.keep": "",
    f"/boot/vmlinuz-{NEXT_KERNEL}": "",
}, mode=0o755)  # fmt: skip


#: a rule of the site's that drops pod traffic (doctor's H04 finds it)
POD_DROP = "-s 10.244.0.0/16 -j DROP"
TOOLKIT_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
#: what the NVIDIA container toolkit writes for containerd 2 (config version 3): the nvidia runtime
NVIDIA_RUNTIME = """\
version = 3
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]
    BinaryName = "/usr/bin/nvidia-container-runtime"
"""


def netfilter(host: Host) -> dict[str, str]:
    """`-S` of every table of both families (the rules and policies, without counters)."""
    return {
        f"{tool} -t {table}": host.sudo(f"{tool} -w -t {table} -S", check=True).stdout
        for tool in ("iptables", "ip6tables")
        for table in ("filter", "nat", "mangle", "raw")
    }
