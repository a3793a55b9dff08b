"""`gpustack bundle list`: every artifact a run needs, per config and OS."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpustack.bundle import catalog
from gpustack.config import pins
from gpustack.config.model import Config, Node, Versions
from gpustack.paths import resource_dir

from ..cli.test_cli import GOOD, run

CP = Node(name="cp1", address="192.0.2.10", role="control-plane")


def by(items: list[catalog.Item], kind: str) -> dict[str, catalog.Item]:
    return {i.name: i for i in items if i.kind == kind}


@pytest.mark.parametrize("release", pins.OS_RELEASES, ids=lambda o: f"{o.id}-{o.version}")
def test_every_supported_os_has_its_package_list(release: pins.OsRelease) -> None:
    items = catalog.items(Config(nodes=[CP]), resource_dir("playbooks"), release)
    apt = by(items, "apt")
    assert {"ca-certificates", "python3-apt", "iptables", "kubelet", "kubeadm", "kubectl", "kubernetes-cni"} <= set(apt)
    assert apt["kubeadm"].version == f"{pins.KUBERNETES['1.36']}-1.1"
    assert apt["kubeadm"].checksum == f"gpg:{pins.KUBERNETES_APT_KEY_FINGERPRINT}"
    assert ("apt-transport-https" in apt) == (release.version in ("22.04", "12"))
    assert "containerd" not in apt  # release archives by default


def test_files_images_and_charts_follow_the_config() -> None:
    cfg = Config(nodes=[CP], versions=Versions(kubernetes="1.35", containerd_source="distribution"))
    items = catalog.items(cfg, resource_dir("playbooks"), pins.os_release("ubuntu", "24.04"))  # type: ignore[arg-type]
    files, images, charts = by(items, "file"), by(items, "image"), by(items, "chart")
    assert "containerd (amd64)" not in files and by(items, "apt")["containerd"].version == "1.7"
    assert files["helm (amd64)"].checksum == "sha256:" + pins.HELM_SHA256[pins.HELM_VERSION]["amd64"]
    assert images["registry.k8s.io/kube-apiserver"].version == f"v{pins.KUBERNETES['1.35']}"
    assert images["registry.k8s.io/pause"].version == "3.10.1"
    assert images["registry.k8s.io/pause"].checksum == pins.IMAGE_DIGESTS["registry.k8s.io/pause:3.10.1"]
    agnhost = images["registry.k8s.io/e2e-test-images/agnhost"]
    assert agnhost.version == "2.53" and agnhost.checksum.startswith("sha256:") and len(agnhost.checksum) == 71
    assert "no verified digest" in images["nvcr.io/nvidia/cuda"].note
    assert images["nvcr.io/nvidia/cuda"].version == pins.VERIFY_CUDA_IMAGE.rsplit(":", 1)[1]
    assert set(charts) == set(pins.CHARTS)
    assert charts["gpu-operator"].note == f"archive gpu-operator-{pins.CHARTS['gpu-operator'].version}.tgz"
    # what only the fetched artifacts know is listed with the command that resolves it
    assert (
        f"kubeadm config images list --kubernetes-version v{pins.KUBERNETES['1.35']}"
        in images["registry.k8s.io/etcd, registry.k8s.io/coredns/coredns"].note
    )


def test_cli_json_and_bad_os(tmp_path: Path) -> None:
    (tmp_path / "gpustack.yaml").write_text(GOOD)
    r = run("bundle", "list", "--os", "debian-12", "--output", "json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert {d["kind"] for d in data} == {"file", "apt", "image", "chart"}
    bad = run("bundle", "list", "--os", "centos-9", cwd=tmp_path)
    assert bad.returncode == 2 and "not a supported OS" in bad.stderr and "debian-13" in bad.stderr


def test_ha_with_a_virtual_ip_needs_kube_vip() -> None:
    nodes = [CP, *(Node(name=f"cp{i}", address=f"192.0.2.{10 + i}", role="control-plane") for i in (2, 3))]
    ubuntu = pins.os_release("ubuntu", "24.04")
    assert ubuntu is not None
    plain = by(
        catalog.items(
            Config(nodes=nodes, cluster={"control_plane_endpoint": "lb.example:6443"}),
            resource_dir("playbooks"),
            ubuntu,
        ),
        "image",
    )
    assert "ghcr.io/kube-vip/kube-vip" not in plain
    vip = by(
        catalog.items(Config(nodes=nodes, cluster={"virtual_ip": "192.0.2.100"}), resource_dir("playbooks"), ubuntu),
        "image",
    )
    assert vip["ghcr.io/kube-vip/kube-vip"].version == pins.KUBE_VIP_VERSION
