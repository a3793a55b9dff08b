"""Whether the cluster stage turns the chart's etcd scrape on: every etcd mirror pod in kube-system serves its
metrics beyond loopback (gpustack.cluster.layer.etcd_metrics_exposed), read through the fake API server (TEST
DOUBLE of kube-apiserver, tests/fakes/kube_api.py). The real kubeadm's manifest is read by
tests/controlplane/test_etcd_metrics.py."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack.cluster.layer import etcd_metrics_exposed, metrics_beyond_loopback
from gpustack.runners.kube import Kube
from tests.fakes.kube_api import FakeKubeAPI

#: kubeadm 1.36's default (phases/etcd/local.go) and what gpustack sets with firewall.enabled
LOOPBACK = "--listen-metrics-urls=http://127.0.0.1:2381"
EVERYWHERE = "--listen-metrics-urls=http://0.0.0.0:2381"


def etcd_pod(node: str, *flags: str, namespace: str = "kube-system", component: str = "etcd") -> dict[str, Any]:
    """An etcd mirror pod as the kubelet publishes kubeadm's static pod (labels component/tier, ComponentPod)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"etcd-{node}", "namespace": namespace,
                     "labels": {"component": component, "tier": "control-plane"}},
        "spec": {"nodeName": node, "containers": [{"name": "etcd", "image": "registry.k8s.io/etcd:3.6.8-0",
                                                    "command": ["etcd", "--name=" + node, *flags]}]},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([LOOPBACK], False),
        ([EVERYWHERE], True),
        (["--listen-metrics-urls=http://localhost:2381"], False),
        (["--listen-metrics-urls=http://[::1]:2381"], False),
        (["--listen-metrics-urls=http://127.0.0.1:2381,http://10.0.0.1:2381"], True),
        (["--listen-metrics-urls=http://[::]:2381"], True),
        ([], False),  # no flag: metrics only on the client URLs, behind a client certificate
    ],
)
def test_the_flag_decides(flags: list[str], expected: bool) -> None:
    assert metrics_beyond_loopback(["etcd", "--data-dir=/var/lib/etcd", *flags]) is expected


def test_every_member_must_listen_beyond_loopback(fake_api: FakeKubeAPI, kube: Kube) -> None:
    fake_api.seed([etcd_pod("cp1", EVERYWHERE), etcd_pod("cp2", EVERYWHERE)])
    assert etcd_metrics_exposed(kube) is True
    # a member kubeadm made before gpustack set the flag (an existing cluster): no scrape, no etcdMembersDown
    fake_api.seed([etcd_pod("cp3", LOOPBACK)])
    assert etcd_metrics_exposed(kube) is False


def test_no_etcd_mirror_pod_is_no_scrape(fake_api: FakeKubeAPI, kube: Kube) -> None:
    # an external or managed etcd; an etcd pod outside kube-system or of another component does not count
    fake_api.seed([etcd_pod("x", EVERYWHERE, namespace="default"), etcd_pod("y", EVERYWHERE, component="etcd-proxy")])
    assert etcd_metrics_exposed(kube) is False
