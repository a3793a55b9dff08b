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
