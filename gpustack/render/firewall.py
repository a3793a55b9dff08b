"""The firewall role's contract beyond the node lists: who else may reach the API server and the NodePorts.

gpustack's chain (playbooks/roles/firewall/templates/gpustack-firewall.sh.j2) accepts the cluster's own
traffic and drops the control-plane ports and the NodePorts for everyone else (docs/decisions.md,
"Firewall: closed control-plane ports"). Two sources besides the nodes and the pod network are let in:

- ``firewall.admin_cidrs``: the API server's port and the NodePorts;
- the machine gpustack runs from, the API server's port only: it installs the charts and reads the
  cluster through the API server (helm, the checks), so a run must not lock itself out. Its address is
  the one this machine's kernel picks to reach the first control plane (no packet is sent); a machine
  behind NAT is seen under another address and belongs in ``firewall.admin_cidrs``. gpustack running
  on a node needs nothing: the nodes are accepted anyway.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from gpustack.config.model import Config

#: kube-apiserver's ``--service-node-port-range`` default (kubernetes.io, "Service" > "type: NodePort");
#: gpustack's kubeadm configuration leaves it as it is.
NODEPORT_RANGE = "30000:32767"


def controller_address(cfg: Config) -> str:
    """This machine's IPv4 address toward the first control plane; "" when it is a node of the
    cluster, loopback, not IPv4, or there is no route (the control plane is named by a hostname:
    no lookup is made, the address would depend on DNS)."""
    target = cfg.control_plane.address
    try:
        ipaddress.IPv4Address(target)
    except ValueError:
        return ""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, 6443))
            address = str(s.getsockname()[0])
    except OSError:
        return ""
    if ipaddress.IPv4Address(address).is_loopback or address in {n.address for n in cfg.nodes}:
        return ""
    return address


def firewall_vars(cfg: Config) -> dict[str, Any]:
    """Extra vars of the firewall role (playbooks/roles/firewall) besides the node lists."""
    return {
        "gpustack_firewall_admin_cidrs": [str(c) for c in cfg.firewall.admin_cidrs],
        "gpustack_firewall_controller_address": controller_address(cfg) if cfg.firewall.enabled else "",
        "gpustack_firewall_nodeport_range": NODEPORT_RANGE,
        # firewall.extra_tcp_ports: open to every source (the NodePorts among them too)
        "gpustack_firewall_open_tcp_ports": sorted(set(cfg.firewall.extra_tcp_ports)),
    }


def plan_rows(cfg: Config) -> list[list[str]]:
    """`gpustack plan up`: who reaches what once the firewall stage has run (also on an existing cluster,
    whose next `up` rewrites the chains: a source not listed here loses the port). Empty when gpustack
    manages no firewall."""
    if not cfg.firewall.enabled:
        return []
    nodes = ", ".join(n.name for n in cfg.nodes)
    pods = f"pods ({cfg.cluster.pod_cidr})"
    admins = ", ".join(str(c) for c in cfg.firewall.admin_cidrs)
    here = controller_address(cfg)
    api = [f"nodes ({nodes})", pods, *([f"admin_cidrs ({admins})"] if admins else []), "loopback"]
    if here:
        api.append(f"this machine ({here})")
    nodeports = [f"nodes ({nodes})", pods, *([f"admin_cidrs ({admins})"] if admins else [])]
    open_ports = [p for p in cfg.firewall.extra_tcp_ports if 30000 <= p <= 32767]
    rows = [
        ["6443/tcp (API server)", "; ".join(api), "dropped"],
        [
            "2379-2380/tcp (etcd)",
            f"control planes ({', '.join(n.name for n in cfg.control_planes)}); loopback",
            "dropped",
        ],
        ["2381/tcp (etcd metrics, plain HTTP)", f"nodes ({nodes}); {pods}; loopback", "dropped"],
        ["10250/tcp (kubelet)", f"nodes ({nodes}); {pods}; loopback", "dropped"],
        ["10257, 10259/tcp (controller-manager, scheduler)", f"nodes ({nodes}); loopback", "dropped"],
        [
            f"{NODEPORT_RANGE.replace(':', '-')} tcp/udp (NodePorts)",
            "; ".join(nodeports) + (f"; everyone: {', '.join(map(str, open_ports))}" if open_ports else ""),
            "dropped before kube-proxy's DNAT",
        ],
    ]
    if cfg.firewall.extra_tcp_ports:
        rows.append(["extra_tcp_ports", ", ".join(map(str, cfg.firewall.extra_tcp_ports)), "open to everyone"])
    rows.append(["anything else (SSH included)", "-", "your own rules decide (the chains end in RETURN)"])
    return rows
