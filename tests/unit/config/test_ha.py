"""HA control plane config: an odd number of control-plane nodes behind one endpoint (a load
balancer or kube-vip's virtual IP); every refusal exits 2 naming the field. The kubeadm config
points every node at the endpoint and the certificate carries every control plane's names."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack.config.load import load
from gpustack.config.model import Config
from gpustack.errors import ConfigError
from gpustack.render.kubeadm import api_endpoint, cert_sans, render_init_config

THREE = """\
nodes:
  - {name: cp1, address: 192.0.2.10, role: control-plane}
  - {name: cp2, address: 192.0.2.11, role: control-plane}
  - {name: cp3, address: 192.0.2.12, role: control-plane}
  - {name: w1, address: 192.0.2.20}
"""


def load_text(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "gpustack.yaml"
    path.write_text(text)
    return load(path, environ={}, cwd=tmp_path).config


def refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_text(tmp_path, text)
    assert err.value.exit_code == 2
    return err.value.message


def test_three_control_planes_behind_a_load_balancer(tmp_path: Path) -> None:
    cfg = load_text(tmp_path, THREE + "cluster: {control_plane_endpoint: 'k8s-api.example.com:8443'}\n")
    assert [n.name for n in cfg.control_planes] == ["cp1", "cp2", "cp3"]
    assert api_endpoint(cfg) == "k8s-api.example.com:8443"
    assert 'controlPlaneEndpoint: "k8s-api.example.com:8443"' in render_init_config(cfg)
    assert cert_sans(cfg)[:3] == ["k8s-api.example.com", "192.0.2.10", "cp1"]


def test_three_control_planes_with_a_virtual_ip(tmp_path: Path) -> None:
    cfg = load_text(tmp_path, THREE + "cluster: {virtual_ip: 192.0.2.100}\n")
    assert api_endpoint(cfg) == "192.0.2.100:6443"
    assert {"192.0.2.100", "192.0.2.12", "cp3"} <= set(cert_sans(cfg))


def test_an_endpoint_without_a_port_means_6443(tmp_path: Path) -> None:
    cfg = load_text(tmp_path, THREE + "cluster: {control_plane_endpoint: lb.example.com}\n")
    assert api_endpoint(cfg) == "lb.example.com:6443"


def test_an_even_count_is_refused_naming_the_field(tmp_path: Path) -> None:
    four = THREE.replace("{name: w1, address: 192.0.2.20}", "{name: cp4, address: 192.0.2.13, role: control-plane}")
    msg = refused(tmp_path, four + "cluster: {virtual_ip: 192.0.2.100}\n")
    assert "nodes[3].role: 4 control-plane nodes: etcd needs an odd number" in msg


def test_several_control_planes_need_an_endpoint(tmp_path: Path) -> None:
    assert "cluster.control_plane_endpoint:" in refused(tmp_path, THREE)


@pytest.mark.parametrize(
    ("cluster", "says"),
    [
        ("{virtual_ip: 192.0.2.100, control_plane_endpoint: lb.example.com}", "cluster.virtual_ip: set either"),
        ("{virtual_ip: 192.0.2.11}", "cluster.virtual_ip: 192.0.2.11 is a node's address"),
        ("{control_plane_endpoint: 'lb.example.com:99999'}", "cluster.control_plane_endpoint"),
        ("{control_plane_endpoint: '127.0.0.1:6443'}", "loopback"),
        ("{virtual_ip: not-an-ip}", "cluster.virtual_ip"),
    ],
)
def test_bad_endpoints_are_refused(tmp_path: Path, cluster: str, says: str) -> None:
    assert says in refused(tmp_path, THREE + f"cluster: {cluster}\n")


def test_one_control_plane_keeps_its_own_address(tmp_path: Path) -> None:
    cfg = load_text(tmp_path, "nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\n")
    assert api_endpoint(cfg) == "192.0.2.10:6443" and cert_sans(cfg) == ["192.0.2.10", "cp1"]
