"""etcd's metrics for Prometheus (issue 27), with the real kubeadm 1.36.5 and etcd 3.6.8 of the shared control plane:
the etcd manifest kubeadm renders from gpustack's configuration (firewall.enabled, the default) listens for metrics on
every address, kubeadm's probes still reach it, the running etcd serves the counter doctor M12 reads over plain
HTTP, and the cluster stage's reader (gpustack.cluster.layer.etcd_metrics_exposed) turns the scrape on for a mirror
pod made of that very manifest and off for kubeadm's default. About 1 s on the shared fixture."""

from __future__ import annotations

import copy
import urllib.request
from typing import Any

import yaml

from gpustack.cluster.layer import etcd_metrics_exposed
from gpustack.runners.kubeconfig import kube_from_file

from . import kubeadm_phases as kp
from .cluster import ControlPlane, kubectl


def manifest(cp: ControlPlane) -> dict[str, Any]:
    """The etcd static pod manifest the real kubeadm wrote (its dry-run directory, before the test relocation)."""
    return dict(yaml.safe_load((cp.pki / "etcd.yaml").read_text()))


def test_kubeadm_renders_etcd_metrics_on_every_address(control_plane: ControlPlane) -> None:
    etcd = manifest(control_plane)
    command = kp.command_of(etcd)
    assert "--listen-metrics-urls=http://0.0.0.0:2381" in command
    assert not [a for a in command if a.startswith("--listen-metrics-urls=http://127.0.0.1")]
    # kubeadm points its probes at the first metrics URL (util/staticpod GetEtcdProbeEndpoint): 0.0.0.0 is this host
    container = etcd["spec"]["containers"][0]
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}  # kubeadm names the probe port
    for probe in ("livenessProbe", "startupProbe"):
        get = container[probe]["httpGet"]
        port = ports.get(get["port"], get["port"])
        assert (get["host"], port, get["scheme"]) == ("0.0.0.0", 2381, "HTTP"), probe


def test_etcd_serves_the_leader_counter_over_plain_http(control_plane: ControlPlane) -> None:
    url = f"http://{kp.LOOPBACK}:{control_plane.ports.etcd_metrics}/metrics"  # the flag above, relocated
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    assert "\netcd_server_leader_changes_seen_total " in text
    assert "\netcd_mvcc_db_total_size_in_bytes " in text


def test_the_cluster_stage_scrapes_a_mirror_pod_of_this_manifest(control_plane: ControlPlane) -> None:
    """The manifest as the kubelet publishes it (a mirror pod in kube-system), read through the real API server."""
    kube = kube_from_file(control_plane.admin_kubeconfig)
    ours = manifest(control_plane)
    ours["metadata"] = {**ours["metadata"], "name": "etcd-metrics-test", "namespace": "kube-system"}
    ours["spec"]["nodeName"] = "etcd-metrics-test-node"  # no such node: the pod is only read, never run
    kubeadms = copy.deepcopy(ours)
    kubeadms["metadata"]["name"] = "etcd-metrics-test-default"
    command = kubeadms["spec"]["containers"][0]["command"]
    command[:] = [a.replace("http://0.0.0.0:2381", "http://127.0.0.1:2381") for a in command]
    try:
        assert etcd_metrics_exposed(kube) is False  # no etcd mirror pod in this test cluster: nothing to scrape
        kubectl(control_plane, "create", "-f", "-", stdin=yaml.safe_dump(ours))
        assert etcd_metrics_exposed(kube) is True
        kubectl(control_plane, "create", "-f", "-", stdin=yaml.safe_dump(kubeadms))
        assert etcd_metrics_exposed(kube) is False  # one member on kubeadm's loopback default
    finally:
        for name in ("etcd-metrics-test", "etcd-metrics-test-default"):
            kubectl(control_plane, "delete", "pod", name, "--namespace=kube-system", "--grace-period=0", "--force",
                    "--ignore-not-found", "--wait=false")  # fmt: skip
