"""Values the stricter checks must still accept (the bad ones are in tests/unit/cli/test_bad_input.py)."""

from __future__ import annotations

import pytest

from gpustack.config.fields import node_address_problem, url_problem
from gpustack.config.model import Cluster, Node, Proxy, Sources
from gpustack.config.monitoring import Monitoring


@pytest.mark.parametrize(
    "address", ["192.0.2.10", "10.0.0.1", "gpu-01", "gpu-01.lab.example.com", "2001:db8::10", "fd00::1"]
)
def test_node_addresses_accepted(address: str) -> None:
    assert node_address_problem(address) is None
    assert Node(name="n", address=address).address == address


@pytest.mark.parametrize(
    ("address", "needle"),
    [("192.0.2.256", "not a valid IPv4"), ("host.123", "not a valid IPv4"), ("127.0.0.53", "loopback"),
     ("::", "'any address'"), ("ff02::1", "multicast"), ("fe80::1", "link-local"), ("255.255.255.255", "broadcast"),
     ("my.localhost", "loopback name"), ("bad_name!", "IP address or a DNS name")],
)  # fmt: skip
def test_node_addresses_refused(address: str, needle: str) -> None:
    assert needle in (node_address_problem(address) or "")


def test_cluster_values_accepted() -> None:
    c = Cluster(name="lab-1.gpu_a", flannel_iface="enp65s0f0np0", pod_cidr="10.32.0.0/12", service_cidr="10.96.0.0/28")
    assert str(c.pod_cidr) == "10.32.0.0/12" and c.flannel_iface == "enp65s0f0np0"
    assert Cluster(flannel_iface="bond0.100").flannel_iface == "bond0.100"


def test_urls_and_proxies_accepted() -> None:
    s = Sources(helm_url="http://mirror.lab:8080/helm/helm-v{version}-linux-{arch}.tar.gz",
                kubernetes_apt_url="https://mirror/k8s/v{minor}/deb/")  # fmt: skip
    assert "{arch}" in s.helm_url
    p = Proxy(http="http://user:pw@proxy.lab:3128", https="http://proxy.lab:3128/", no_proxy=[".lab", "10.0.0.0/8"])
    assert p.enabled
    assert url_problem("https://hooks.example.com/x?y=1") is None


@pytest.mark.parametrize("value", ["15d", "12h", "30s", "500ms", "2w", "1y"])
def test_durations_accepted(value: str) -> None:
    assert Monitoring(prometheus_retention=value).prometheus_retention == value


def test_versions_users_and_names_accepted() -> None:
    from gpustack.config.model import Versions
    from gpustack.config.monitoring import PrometheusStorage

    v = Versions(flannel="v0.28.9", helm="3.99.0", helm_sha256={"amd64": "a" * 64}, gpu_operator="v26.7.0",
                 dcgm_exporter="4.8.2-1+build.3")  # fmt: skip
    assert v.gpu_operator == "v26.7.0" and v.flannel == "0.28.9"
    assert Node(name="n", address="192.0.2.1", user="svc.deploy@CORP").user == "svc.deploy@CORP"
    assert PrometheusStorage(storage_class="local-path.fast").storage_class == "local-path.fast"
