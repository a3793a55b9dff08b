"""The control-plane fixture's placement of kubeadm's output on loopback (tests/controlplane/kubeadm_phases.py):
pure functions, no binaries."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpustack.config.model import Config
from gpustack.render.kubeadm import render_init_config
from tests.controlplane import kubeadm_phases as kp

PORTS = kp.Ports(apiserver=30001, etcd_client=30002, etcd_peer=30003, etcd_metrics=30004, controller_manager=30005,
                 scheduler=30006)  # fmt: skip
CFG = Config.model_validate({"nodes": [{"name": "cp-0", "address": kp.ADVERTISE, "role": "control-plane"}]})


def placed(tmp: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    docs = yaml.safe_load_all(kp.place(render_init_config(CFG), pki=tmp / "pki", ports=PORTS))
    return {d["kind"]: d for d in docs}


def test_only_placement_changes(tmp_path: Path) -> None:
    """gpustack's own settings survive; what changes is the endpoint, directories and ports."""
    original = {d["kind"]: d for d in yaml.safe_load_all(render_init_config(CFG))}
    out = placed(tmp_path)
    assert out["InitConfiguration"]["nodeRegistration"] == original["InitConfiguration"]["nodeRegistration"]
    assert out["InitConfiguration"]["localAPIEndpoint"] == {"advertiseAddress": kp.ADVERTISE, "bindPort": 30001}
    cluster = out["ClusterConfiguration"]
    for key in ("clusterName", "kubernetesVersion", "networking"):
        assert cluster[key] == original["ClusterConfiguration"][key]
    assert cluster["controlPlaneEndpoint"] == "127.0.0.1:30001"
    assert cluster["certificatesDir"] == str(tmp_path / "pki")
    assert {"name": "bind-address", "value": "127.0.0.1"} in cluster["apiServer"]["extraArgs"]
    # gpustack's own flags (security:) survive, the placement only adds to them
    ours = original["ClusterConfiguration"]
    assert cluster["apiServer"]["extraArgs"] == [
        *ours["apiServer"]["extraArgs"],
        {"name": "bind-address", "value": "127.0.0.1"},
    ]
    assert cluster["apiServer"]["extraVolumes"] == ours["apiServer"]["extraVolumes"]
    assert set(original["ClusterConfiguration"]["apiServer"]["certSANs"]) < set(cluster["apiServer"]["certSANs"])
    assert cluster["controllerManager"]["extraArgs"] == [
        *ours["controllerManager"]["extraArgs"],
        {"name": "secure-port", "value": "30005"},
    ]
    assert cluster["scheduler"]["extraArgs"] == [
        *ours["scheduler"]["extraArgs"],
        {"name": "secure-port", "value": "30006"},
    ]
    assert out["KubeletConfiguration"] == original["KubeletConfiguration"]


def test_etcd_moves_to_loopback_and_its_ports() -> None:
    args = ["etcd", f"--advertise-client-urls=https://{kp.ADVERTISE}:2379",
            f"--listen-client-urls=https://127.0.0.1:2379,https://{kp.ADVERTISE}:2379",
            "--listen-metrics-urls=http://127.0.0.1:2381", f"--listen-peer-urls=https://{kp.ADVERTISE}:2380",
            f"--initial-cluster=cp-0=https://{kp.ADVERTISE}:2380", "--cert-file=/etc/kubernetes/pki/etcd/server.crt",
            "--snapshot-count=10000"]  # fmt: skip
    out = kp.relocate(args, root=Path("/w/pki"), ports=PORTS)
    assert out == ["etcd", "--advertise-client-urls=https://127.0.0.1:30002",
                   "--listen-client-urls=https://127.0.0.1:30002", "--listen-metrics-urls=http://127.0.0.1:30004",
                   "--listen-peer-urls=https://127.0.0.1:30003", "--initial-cluster=cp-0=https://127.0.0.1:30003",
                   "--cert-file=/w/pki/etcd/server.crt", "--snapshot-count=10000"]  # fmt: skip


def test_kubeconfig_paths_and_the_etcd_endpoint_of_the_api_server() -> None:
    args = ["kube-controller-manager", "--kubeconfig=/etc/kubernetes/controller-manager.conf",
            "--root-ca-file=/etc/kubernetes/pki/ca.crt"]  # fmt: skip
    assert kp.relocate(args, root=Path("/w/pki"), ports=PORTS)[1:] == [
        "--kubeconfig=/w/pki/controller-manager.conf", "--root-ca-file=/w/pki/ca.crt"]  # fmt: skip
    api = kp.relocate(["kube-apiserver", "--etcd-servers=https://127.0.0.1:2379"], root=Path("/w"), ports=PORTS)
    assert api[1] == "--etcd-servers=https://127.0.0.1:30002"


def test_kubeconfigs_point_at_loopback() -> None:
    text = f"server: https://{kp.ADVERTISE}:30001\n"
    assert kp.kubeconfig_on_loopback(text, 30001) == "server: https://127.0.0.1:30001\n"


def test_the_hardening_files_and_the_audit_log_move_under_the_root() -> None:
    args = ["kube-apiserver", "--encryption-provider-config=/etc/kubernetes/enc/encryption-config.yaml",
            "--audit-log-path=/var/log/kubernetes/audit/audit.log"]  # fmt: skip
    assert kp.relocate(args, root=Path("/w/pki"), ports=PORTS)[1:] == [
        "--encryption-provider-config=/w/pki/enc/encryption-config.yaml",
        "--audit-log-path=/w/pki/var-log-kubernetes/audit/audit.log",
    ]
    assert kp.host_path("/etc/kubernetes/enc/encryption-config.yaml", Path("/w/pki")) == Path(
        "/w/pki/enc/encryption-config.yaml"
    )
    assert kp.host_path("/var/log/kubernetes/audit/audit.log", Path("/w/pki")) == Path(
        "/w/pki/var-log-kubernetes/audit/audit.log"
    )
    with pytest.raises(ValueError):
        kp.host_path("/etc/passwd", Path("/w/pki"))
