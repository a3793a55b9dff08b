from __future__ import annotations

from pathlib import Path

import yaml

from gpustack.config import pins
from gpustack.config.model import Config, Node, Proxy
from gpustack.render.ansible import extravars, host_vars, inventory, no_proxy
from gpustack.render.kubeadm import render_init_config

CP = Node(name="cp1", address="10.0.0.10", role="control-plane", user="ubuntu", ssh_key=Path("/k/id"))
W = Node(name="w1", address="10.0.0.11", port=2222)


def test_inventory_groups_and_host_vars() -> None:
    inv = inventory(Config(nodes=[CP, W]))
    cp = inv["all"]["children"]["control_plane"]["hosts"]["cp1"]
    w = inv["all"]["children"]["workers"]["hosts"]["w1"]
    assert cp["ansible_host"] == "10.0.0.10" and cp["ansible_user"] == "ubuntu"
    assert cp["ansible_ssh_private_key_file"] == "/k/id"
    assert w["ansible_port"] == 2222 and "ansible_user" not in w
    assert cp["ansible_become"] is True


def test_host_vars_are_the_inventorys_for_the_chosen_nodes() -> None:
    cfg = Config(nodes=[CP, W])
    hosts = inventory(cfg)["all"]["children"]
    assert host_vars(cfg, ["w1", "cp1"]) == [hosts["control_plane"]["hosts"]["cp1"], hosts["workers"]["hosts"]["w1"]]
    assert host_vars(cfg, ["w1"]) == [hosts["workers"]["hosts"]["w1"]] and host_vars(cfg, []) == []


def test_local_node_uses_local_connection() -> None:
    inv = inventory(Config(nodes=[Node(name="me", address="10.0.0.5", role="control-plane", connection="local")]))
    assert inv["all"]["children"]["control_plane"]["hosts"]["me"]["ansible_connection"] == "local"


def test_extravars_contract() -> None:
    ev = extravars(Config(nodes=[CP, W]), kubeconfig_dest=Path("/s/admin.conf"))
    assert ev["gpustack_kubernetes_package_version"] == f"{pins.KUBERNETES['1.36']}-1.1"
    assert ev["gpustack_kubernetes_apt_url"] == "https://pkgs.k8s.io/core:/stable:/v1.36/deb/"
    assert ev["gpustack_helm_downloads"]["amd64"]["sha256"] == pins.HELM_SHA256[pins.HELM_VERSION]["amd64"]
    assert ev["gpustack_helm_downloads"]["amd64"]["url"].endswith(f"helm-v{pins.HELM_VERSION}-linux-amd64.tar.gz")
    assert "gpustack_flannel_manifest_url" not in ev and "kube-flannel-ds" in ev["gpustack_flannel_manifest"]
    assert ev["gpustack_single_node"] is False
    assert ev["gpustack_api_service_ip"] == "10.96.0.1"
    assert ev["gpustack_firewall_tcp_nodeports"] == [], "monitoring is not exposed by default"
    assert ev["gpustack_proxy_env"] == {}
    assert ev["gpustack_kubeconfig_dest"] == "/s/admin.conf"


def test_mirror_sources_are_formatted() -> None:
    cfg = Config.model_validate(
        {
            "nodes": [CP.model_dump()],
            "versions": {"kubernetes": "1.35"},
            "sources": {
                "kubernetes_apt_url": "http://mirror/k8s/v{minor}/",
                "helm_url": "http://mirror/helm-{version}-{arch}.tgz",
            },
        }
    )
    ev = extravars(cfg, kubeconfig_dest=Path("/k"))
    assert ev["gpustack_kubernetes_apt_url"] == "http://mirror/k8s/v1.35/"
    assert ev["gpustack_helm_downloads"]["arm64"]["url"] == f"http://mirror/helm-{pins.HELM_VERSION}-arm64.tgz"


def test_proxy_env_and_no_proxy() -> None:
    cfg = Config(nodes=[CP, W], proxy=Proxy(http="http://p:3128", https="http://p:3128", no_proxy=["registry.local"]))
    ev = extravars(cfg, kubeconfig_dest=Path("/k"))
    env = ev["gpustack_proxy_env"]
    assert env["HTTP_PROXY"] == env["https_proxy"] == "http://p:3128"
    np = env["NO_PROXY"].split(",")
    for must in (
        "localhost",
        "127.0.0.1",
        "10.244.0.0/16",
        "10.96.0.0/12",
        ".svc",
        "10.0.0.10",  # the API endpoint (the control plane's address)
        "registry.local",
    ):
        assert must in np
    assert no_proxy(cfg) == np
    # a worker's address is not needed: the list stays the same when nodes come and go, so the
    # existing hosts' proxy drop-ins (and containerd, the kubelet) are not touched by `node add`
    assert "10.0.0.11" not in np
    more = cfg.model_copy(update={"nodes": [CP, W, W.model_copy(update={"name": "w2", "address": "10.0.0.12"})]})
    assert no_proxy(more) == np


def test_kubeadm_config_single_node_has_no_taint() -> None:
    docs = list(yaml.safe_load_all(render_init_config(Config(nodes=[CP]))))
    init, cluster, kubelet = docs
    assert init["kind"] == "InitConfiguration" and init["nodeRegistration"]["taints"] == []
    assert init["localAPIEndpoint"]["advertiseAddress"] == "10.0.0.10"
    assert init["nodeRegistration"]["criSocket"] == "unix:///run/containerd/containerd.sock"
    assert cluster["networking"] == {
        "podSubnet": "10.244.0.0/16",
        "serviceSubnet": "10.96.0.0/12",
        "dnsDomain": "cluster.local",
    }
    assert cluster["kubernetesVersion"] == f"v{pins.KUBERNETES['1.36']}"
    assert kubelet["cgroupDriver"] == "systemd"


def test_kubeadm_config_multi_node_keeps_default_taint() -> None:
    init = next(yaml.safe_load_all(render_init_config(Config(nodes=[CP, W]))))
    assert "taints" not in init["nodeRegistration"]
