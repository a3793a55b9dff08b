"""What a bundle must hold (gpustack/bundle/want.py): image references, images named in rendered
objects (the three ways charts name them), the driver's per-OS tag, kubeadm's list, the file
layout and the apt wants. Pure."""

from __future__ import annotations

import pytest
import yaml

from gpustack.bundle import want
from gpustack.config import pins
from gpustack.config.model import Config, Node
from gpustack.paths import resource_dir

CP = Node(name="cp1", address="192.0.2.10", role="control-plane")


@pytest.mark.parametrize(
    ("text", "tagged", "digest"),
    [
        ("registry.k8s.io/pause:3.10.2", "registry.k8s.io/pause:3.10.2", None),
        ("busybox", "docker.io/library/busybox:latest", None),
        ("bitnami/kubectl:1.36", "docker.io/bitnami/kubectl:1.36", None),
        ("localhost:5000/x/y:z", "localhost:5000/x/y:z", None),
        ("nvcr.io/nvidia/driver@sha256:" + "a" * 64, "nvcr.io/nvidia/driver:latest", "sha256:" + "a" * 64),
        (
            "registry.k8s.io/e2e-test-images/agnhost:2.53@sha256:" + "b" * 64,
            "registry.k8s.io/e2e-test-images/agnhost:2.53",
            "sha256:" + "b" * 64,
        ),
    ],
)
def test_parse_ref_normalizes_like_containerd(text: str, tagged: str, digest: str | None) -> None:
    ref = want.parse_ref(text)
    assert ref.tagged == tagged and ref.digest == digest


@pytest.mark.parametrize("bad", ["", "UPPER/case:1", "x:y:z:w", "nvcr.io/a@sha256:short", "a b:1"])
def test_parse_ref_refuses(bad: str) -> None:
    with pytest.raises(ValueError):
        want.parse_ref(bad)


def test_is_ref_strictness() -> None:
    assert want.is_ref("quay.io/p/c:v1") and want.is_ref("busybox:1")
    assert not want.is_ref("busybox")  # no tag: never counted as an image by accident
    assert not want.is_ref("busybox:1", strict=True)  # arguments and env values need a registry
    assert not want.is_ref("{{ .Values.image }}:1") and not want.is_ref("true")


RENDERED = """
apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      initContainers:
        - {name: init, image: "ghcr.io/a/init:v1"}
      containers:
        - name: op
          image: quay.io/p/operator:v0.86.0
          args:
            - --prometheus-config-reloader=quay.io/p/reloader:v0.86.0
            - --log-level=info
            - --web.listen-address=:8080
          env:
            - {name: VALIDATOR_IMAGE, value: nvcr.io/nvidia/validator:v26.7.0}
            - {name: LOG_LEVEL, value: "debug:1"}
---
apiVersion: nvidia.com/v1
kind: ClusterPolicy
spec:
  driver: {enabled: true, repository: nvcr.io/nvidia, image: driver, version: "580.95.05"}
  toolkit: {enabled: true, repository: nvcr.io/nvidia/k8s, image: container-toolkit, version: v1.18.0}
  devicePlugin: {repository: nvcr.io/nvidia, image: k8s-device-plugin, version: "sha256:%s"}
  vgpuManager: {enabled: false, repository: nvcr.io/private, image: vgpu, version: "1.0"}
  gds: {enabled: true, repository: "", image: "", version: ""}
  sandboxWorkloads: {enabled: false}
  vfioManager: {enabled: true, repository: nvcr.io/nvidia, image: cuda, version: "12.8-vfio"}
---
apiVersion: monitoring.coreos.com/v1
kind: Prometheus
spec: {image: "quay.io/prometheus/prometheus:v3.6.0"}
""" % ("c" * 64)


def test_images_in_documents_find_every_way_charts_name_images() -> None:
    found = want.images_in_documents(yaml.safe_load_all(RENDERED))
    refs = {f.ref: f for f in found}
    assert set(refs) == {
        "ghcr.io/a/init:v1",
        "quay.io/p/operator:v0.86.0",
        "quay.io/p/reloader:v0.86.0",
        "nvcr.io/nvidia/validator:v26.7.0",
        "nvcr.io/nvidia/driver:580.95.05",
        "nvcr.io/nvidia/k8s/container-toolkit:v1.18.0",
        "nvcr.io/nvidia/k8s-device-plugin@sha256:" + "c" * 64,
        "quay.io/prometheus/prometheus:v3.6.0",
    }
    assert refs["nvcr.io/nvidia/driver:580.95.05"].driver and not refs["quay.io/p/operator:v0.86.0"].driver
    # with sandbox workloads on, their components' images are needed too
    docs = list(yaml.safe_load_all(RENDERED))
    docs[1]["spec"]["sandboxWorkloads"]["enabled"] = True
    assert "nvcr.io/nvidia/cuda:12.8-vfio" in {f.ref for f in want.images_in_documents(docs)}


def test_the_driver_image_is_per_node_os() -> None:
    driver = want.FoundImage("nvcr.io/nvidia/driver:580.95.05", driver=True)
    releases = [pins.os_release("ubuntu", "22.04"), pins.os_release("ubuntu", "24.04"), pins.os_release("debian", "12")]
    assert want.driver_refs(driver, [r for r in releases if r]) == [
        "nvcr.io/nvidia/driver:580.95.05-ubuntu22.04",
        "nvcr.io/nvidia/driver:580.95.05-ubuntu24.04",
    ]  # Debian: no driver container, so no image
    pinned = want.FoundImage("nvcr.io/nvidia/driver@sha256:" + "d" * 64, driver=True)
    assert want.driver_refs(pinned, [r for r in releases if r]) == [pinned.ref]


def test_kubeadm_images() -> None:
    out = "registry.k8s.io/kube-apiserver:v1.36.4\n\nregistry.k8s.io/etcd:3.6.6-0\nW1124 warning line\n"
    assert want.kubeadm_images(out) == ["registry.k8s.io/kube-apiserver:v1.36.4", "registry.k8s.io/etcd:3.6.6-0"]


def test_pinned_images_and_who_runs_them() -> None:
    wants = {w.ref: w for w in want.pinned_images(Config(nodes=[CP]))}
    assert wants[f"registry.k8s.io/kube-apiserver:v{pins.KUBERNETES['1.36']}"].nodes == "control-plane"
    assert wants[f"registry.k8s.io/kube-proxy:v{pins.KUBERNETES['1.36']}"].nodes == "all"
    assert wants["registry.k8s.io/pause:3.10.2"].digest == pins.IMAGE_DIGESTS["registry.k8s.io/pause:3.10.2"]
    assert wants["registry.k8s.io/e2e-test-images/agnhost:2.53"].digest is not None
    assert wants[pins.VERIFY_CUDA_IMAGE].digest is None  # pinned by tag only
    assert not any("kube-vip" in r for r in wants)
    assert wants[pins.DCGM_IMAGE].digest == pins.IMAGE_DIGESTS[pins.DCGM_IMAGE]  # gpustack diag's
    ha = Config(
        nodes=[CP, *(Node(name=f"cp{i}", address=f"192.0.2.{10 + i}", role="control-plane") for i in (2, 3))],
        cluster={"virtual_ip": "192.0.2.100"},
    )
    assert {w.ref: w for w in want.pinned_images(ha)}[pins.KUBE_VIP_IMAGE].nodes == "control-plane"
    # a digest from gpustack.yaml replaces the pin's
    own = Config(nodes=[CP], versions={"image_digests": {"registry.k8s.io/pause:3.10.2": "sha256:" + "e" * 64}})
    assert {w.ref: w for w in want.pinned_images(own)}["registry.k8s.io/pause:3.10.2"].digest == "sha256:" + "e" * 64


def test_files_follow_the_config_and_its_layout() -> None:
    files = {(f.name, f.arch): f for f in want.files(Config(nodes=[CP]), ["amd64", "arm64"])}
    assert files[("runc", "arm64")].sha256 == pins.RUNC_SHA256[pins.RUNC_VERSION]["arm64"]
    assert files[("runc", "arm64")].path == f"files/runc/{pins.RUNC_VERSION}/arm64/runc.arm64"
    assert all(f.sha256 for f in files.values()), "every download has a pinned sha256"
    assert "kube-flannel.yml" not in {name for name, _ in files}, "rendered by gpustack, never downloaded"
    distro = want.files(
        Config(nodes=[CP], versions={"kubernetes": "1.35", "containerd_source": "distribution"}), ["amd64"]
    )
    # the CNI plugins and crictl come from their archives always; etcd's archive for `etcd restore` (its etcdutl)
    assert {f.name for f in distro} == {"helm", "cni-plugins", "crictl", "etcd"}
    etcd = files[("etcd", "arm64")]
    assert etcd.path == f"files/etcd/{pins.ETCD_VERSION}/arm64/etcd-v{pins.ETCD_VERSION}-linux-arm64.tar.gz"
    assert etcd.sha256 == pins.ETCD_SHA256[pins.ETCD_VERSION]["arm64"]
    assert (
        etcd.url
        == f"https://github.com/etcd-io/etcd/releases/download/v{pins.ETCD_VERSION}/" + etcd.path.split("/")[-1]
    )
    crictl = files[("crictl", "arm64")]
    assert crictl.path == f"files/crictl/{pins.CRICTL_VERSION}/arm64/crictl-v{pins.CRICTL_VERSION}-linux-arm64.tar.gz"
    assert crictl.sha256 == pins.CRICTL_SHA256[pins.CRICTL_VERSION]["arm64"]
    assert files[("cni-plugins", "amd64")].sha256 == pins.CNI_PLUGINS_SHA256[pins.CNI_PLUGINS_VERSION]["amd64"]


def test_apt_wants() -> None:
    cfg = Config(nodes=[CP])
    ubuntu = pins.os_release("ubuntu", "22.04")
    assert ubuntu is not None
    os_want = want.os_apt_want(cfg, resource_dir("playbooks"), ubuntu)
    assert os_want.repo == "ubuntu-22.04" and {"python3-apt", "apt-transport-https", "conntrack"} <= set(
        os_want.packages
    )
    assert want.kubernetes_apt_want(cfg).packages == tuple(
        f"{p}={pins.KUBERNETES['1.36']}-1.1" for p in ("kubelet", "kubeadm", "kubectl")
    )
    lines, keyring = want.apt_sources(cfg, ubuntu)
    assert lines[0] == "http://archive.ubuntu.com/ubuntu jammy main universe" and keyring.endswith(
        "ubuntu-archive-keyring.gpg"
    )
    mirrored = Config(
        nodes=[CP],
        sources={
            "os_apt": {"ubuntu-22.04": ["http://mirror.example/ubuntu jammy main"]},
            "os_apt_keyring": {"ubuntu": "/k.gpg"},
        },
    )
    assert want.apt_sources(mirrored, ubuntu) == (["http://mirror.example/ubuntu jammy main"], "/k.gpg")
    with pytest.raises(ValueError, match="not a supported OS"):
        want.parse_release("centos-9")
