"""firewall.admin_cidrs and the firewall role's variables (gpustack/render/firewall.py), and the
rules the role's script renders from them."""

from __future__ import annotations

import ast
import socket
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from pydantic import ValidationError

from gpustack.config.model import Config, Firewall, Node
from gpustack.render import firewall
from gpustack.render.ansible import extravars

CP = Node(name="cp1", address="10.0.0.10", role="control-plane", user="ubuntu")
W = Node(name="w1", address="10.0.0.11")
ROLE = Path(__file__).resolve().parents[3] / "playbooks" / "roles" / "firewall"


def test_admin_cidrs_are_ipv4_networks() -> None:
    assert Firewall().admin_cidrs == [], "default: only the cluster's nodes"
    fw = Firewall.model_validate({"admin_cidrs": ["203.0.113.0/24", "198.51.100.7"]})
    assert [str(c) for c in fw.admin_cidrs] == ["203.0.113.0/24", "198.51.100.7/32"]
    for bad, says in (
        (["203.0.113.1/24"], "did you mean 203.0.113.0/24"),
        (["office"], "not an IPv4 network"),
        (["2001:db8::/32"], "not an IPv4 network"),
        ("203.0.113.0/24", "valid list"),
    ):
        with pytest.raises(ValidationError, match=says):
            Firewall.model_validate({"admin_cidrs": bad})


@pytest.mark.parametrize("port", [2379, 2381, 6443, 10250, 10257, 10259])
def test_extra_ports_cannot_reopen_a_control_plane_port(port: int) -> None:
    with pytest.raises(ValidationError, match=f"{port}: control-plane ports stay closed"):
        Firewall.model_validate({"extra_tcp_ports": [8080, port]})
    assert Firewall.model_validate({"extra_tcp_ports": [8080, 31000]}).extra_tcp_ports == [8080, 31000]


def test_controller_address_is_the_route_to_the_first_control_plane(monkeypatch: pytest.MonkeyPatch) -> None:
    class Sock:
        def __init__(self, *_: Any) -> None:
            self.target: tuple[str, int] | None = None

        def __enter__(self) -> Sock:
            return self

        def __exit__(self, *_: Any) -> None:
            return None

        def connect(self, target: tuple[str, int]) -> None:
            self.target = target
            if target[0] == "10.9.9.9":
                raise OSError("Network is unreachable")

        def getsockname(self) -> tuple[str, int]:
            assert self.target == ("10.0.0.10", 6443)
            return (source, 40000)

    monkeypatch.setattr(socket, "socket", Sock)
    cfg = Config(nodes=[CP, W])
    source = "192.168.1.50"
    assert firewall.controller_address(cfg) == "192.168.1.50"
    source = "10.0.0.11"  # gpustack runs on a node: accepted as one anyway
    assert firewall.controller_address(cfg) == ""
    source = "127.0.0.1"  # gpustack runs on the control plane itself
    assert firewall.controller_address(cfg) == ""
    unreachable = Config(nodes=[Node(name="cp1", address="10.9.9.9", role="control-plane")])
    assert firewall.controller_address(unreachable) == ""
    named = Config(nodes=[Node(name="cp1", address="cp1.example.com", role="control-plane")])
    assert firewall.controller_address(named) == "", "a hostname is not looked up"


def test_extravars_carry_the_firewall_sources(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(firewall, "controller_address", lambda cfg: "192.168.1.50")
    cfg = Config.model_validate(
        {
            "nodes": [CP.model_dump(), W.model_dump()],
            "firewall": {"admin_cidrs": ["203.0.113.0/24"], "extra_tcp_ports": [31000, 8080, 31000]},
        }
    )
    ev = extravars(cfg, kubeconfig_dest=tmp_path / "k")
    assert ev["gpustack_firewall_admin_cidrs"] == ["203.0.113.0/24"]
    assert ev["gpustack_firewall_controller_address"] == "192.168.1.50"
    assert ev["gpustack_firewall_open_tcp_ports"] == [8080, 31000]
    assert ev["gpustack_firewall_nodeport_range"] == "30000:32767"
    off = cfg.model_copy(update={"firewall": Firewall(enabled=False)})
    assert extravars(off, kubeconfig_dest=tmp_path / "k")["gpustack_firewall_controller_address"] == ""


def _api_admins(ev: dict[str, Any]) -> list[str]:
    """The role's firewall_ipv4_api_admins as Ansible's Jinja resolves it (rendered as a Python list)."""
    raw = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["firewall_ipv4_api_admins"]
    value = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(raw).render(ev)
    return list(ast.literal_eval(value.strip()))


def test_the_api_admins_are_the_admin_networks_and_this_machine() -> None:
    ev = {"gpustack_firewall_admin_cidrs": ["203.0.113.0/24"], "gpustack_firewall_controller_address": "192.168.1.50"}
    assert _api_admins(ev) == ["203.0.113.0/24", "192.168.1.50"]
    ev["gpustack_firewall_controller_address"] = ""
    assert _api_admins(ev) == ["203.0.113.0/24"]


def test_plan_up_shows_who_reaches_what(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpustack.commands.up import details

    monkeypatch.setattr(firewall, "controller_address", lambda cfg: "192.168.1.50")
    cfg = Config.model_validate(
        {
            "nodes": [CP.model_dump(), W.model_dump()],
            "firewall": {"admin_cidrs": ["203.0.113.0/24"], "extra_tcp_ports": [31000]},
        }
    )
    [(_title, columns, rows)] = [t for t in details(cfg, None) if t[0].startswith("firewall stage")]
    assert columns == ["ports", "accepted from", "everyone else"]
    by_port = {r[0]: r[1:] for r in rows}
    api, etcd = by_port["6443/tcp (API server)"], by_port["2379-2380/tcp (etcd)"]
    assert api == [
        "nodes (cp1, w1); pods (10.244.0.0/16); admin_cidrs (203.0.113.0/24); loopback; this machine (192.168.1.50)",
        "dropped",
    ]
    assert etcd == ["control planes (cp1); loopback", "dropped"]
    # etcd's metrics: Prometheus runs on any node, or beside etcd in the pod network
    assert by_port["2381/tcp (etcd metrics, plain HTTP)"] == [
        "nodes (cp1, w1); pods (10.244.0.0/16); loopback",
        "dropped",
    ]
    assert by_port["30000-32767 tcp/udp (NodePorts)"] == [
        "nodes (cp1, w1); pods (10.244.0.0/16); admin_cidrs (203.0.113.0/24); everyone: 31000",
        "dropped before kube-proxy's DNAT",
    ]
    assert rows[-1][2] == "your own rules decide (the chains end in RETURN)"
    off = cfg.model_copy(update={"firewall": Firewall(enabled=False)})
    assert not [t for t in details(off, None) if t[0].startswith("firewall stage")]


def test_render_writes_each_nodes_firewall_script(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import subprocess

    from gpustack.render.files import generated_files

    monkeypatch.setattr(firewall, "controller_address", lambda cfg: "192.168.1.50")
    cfg = Config.model_validate(
        {"nodes": [CP.model_dump(), W.model_dump()], "firewall": {"admin_cidrs": ["203.0.113.0/24"]}}
    )
    files = generated_files(cfg, state_root=tmp_path)
    cp, w = files["firewall/cp1.sh"], files["firewall/w1.sh"]
    for script in (cp, w):
        subprocess.run(["sh", "-n"], input=script, text=True, check=True)
        assert (
            "-s 203.0.113.0/24 -p tcp -m tcp --dport 6443 -m comment --comment gpustack:admins-to-apiserver" in script
        )
        assert "-s 192.168.1.50 -p tcp -m tcp --dport 6443" in script
        assert "-s 203.0.113.0/24 -m comment --comment gpustack:admins -j RETURN" in script
        assert "--dport 30000:32767 -m comment --comment gpustack:nodeports-closed -j DROP" in script
    # etcd: on the control plane, open to the control planes; a worker has no etcd rule
    assert "-s 10.0.0.10 -p tcp -m tcp --dport 2379:2380" in cp and "--dport 2379:2380 -m comment" not in w
    assert "-s 10.244.0.0/16 -d 10.0.0.11 -p tcp -m tcp --dport 6443" in w
    # etcd's metrics port: from every node and, to the node's own address, the pod network; closed to the rest
    for script, address in ((cp, "10.0.0.10"), (w, "10.0.0.11")):
        assert "-s 10.0.0.11 -p tcp -m tcp --dport 2381 -m comment --comment gpustack:nodes -j ACCEPT" in script
        assert f"-s 10.244.0.0/16 -d {address} -p tcp -m tcp --dport 2381 -m comment" in script
        assert "--dports 2379:2381,6443,10250,10257,10259 -m comment --comment gpustack:closed -j DROP" in script
    off = cfg.model_copy(update={"firewall": Firewall(enabled=False)})
    assert not [p for p in generated_files(off, state_root=tmp_path) if p.startswith("firewall/")]
