"""Every version pin and download checksum gpustack uses, in one table.

Sources (checked November 2026): Kubernetes patch releases and Helm archive checksums as
published upstream (and mirrored in Kubespray's checksum table); Flannel release v0.28.4;
chart versions from each chart's index. To move a pin, change it here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

# Kubernetes minor -> newest patch gpustack pins. The GPU Operator validates 1.33-1.36.
KUBERNETES: dict[str, str] = {
    "1.34": "1.34.11",
    "1.35": "1.35.8",
    "1.36": "1.36.4",
}
KUBERNETES_DEFAULT = "1.36"
# pkgs.k8s.io package revision appended to the upstream version (kubeadm=1.36.4-1.1).
KUBERNETES_PACKAGE_REVISION = "1.1"

FLANNEL_VERSION = "0.28.4"

HELM_VERSION = "3.18.4"
# sha256 of https://get.helm.sh/helm-v<version>-linux-<arch>.tar.gz
HELM_SHA256: dict[str, dict[str, str]] = {
    "3.18.4": {
        "amd64": "f8180838c23d7c7d797b208861fecb591d9ce1690d8704ed1e4cb8e2add966c1",
        "arm64": "c0a45e67eef0c7416a8a8c9e9d5d2d30d70e4f4d3f7bea5de28241fffa8f3b89",
    },
}


@dataclass(frozen=True)
class Chart:
    name: str
    repo: str
    version: str


CHARTS: dict[str, Chart] = {
    "gpu-operator": Chart("gpu-operator", "https://helm.ngc.nvidia.com/nvidia", "v26.7.0"),
    "kube-prometheus-stack": Chart(
        "kube-prometheus-stack", "https://prometheus-community.github.io/helm-charts", "88.5.3"
    ),
    "dcgm-exporter": Chart("dcgm-exporter", "https://nvidia.github.io/dcgm-exporter/helm-charts", "4.8.2"),
}

# verify's workload images. CUDA base runs nvidia-smi (mounted by the NVIDIA runtime); the DCGM
# image ships /usr/bin/dcgmproftester12 for `verify --load`. Tags not checked against the registry
# from this sandbox: verify on a host with egress before moving them.
VERIFY_CUDA_IMAGE = "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu24.04"
VERIFY_DCGM_IMAGE = "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04"
# verify's pod-network probe: Kubernetes' own e2e test image; `agnhost connect HOST:PORT` resolves the
# name (CoreDNS) and opens a TCP connection, exit 0 or 1 with DNS:/TIMEOUT/REFUSED/OTHER: on stderr.
VERIFY_NET_IMAGE = "registry.k8s.io/e2e-test-images/agnhost:2.53"

# Ansible: ansible-core comes from PyPI (pyproject.toml); the playbooks use two collections besides
# ansible.builtin (ansible.posix: sysctl, firewalld; community.general: modprobe). They are taken
# from the Ansible community package's wheel (pinned by version and sha256; only these two
# directories are unpacked: ~11 MB instead of the 470 MB bundle) by `python -m gpustack.bootstrap`.
ANSIBLE_COLLECTIONS = {"ansible.posix": "2.1.0", "community.general": "11.4.2"}
ANSIBLE_COLLECTIONS_WHEEL = ("ansible", "12.3.0", "cd156f82fa87f7a899212b0efa9f7ca3a24d609212de9f78428a572eb01e5414")

# Default package sources; every one can be pointed at a mirror in gpustack.yaml (sources:).
KUBERNETES_APT_URL = "https://pkgs.k8s.io/core:/stable:/v{minor}/deb/"
KUBERNETES_APT_KEY_URL = "https://pkgs.k8s.io/core:/stable:/v{minor}/deb/Release.key"
HELM_URL = "https://get.helm.sh/helm-v{version}-linux-{arch}.tar.gz"
FLANNEL_MANIFEST_URL = "https://github.com/flannel-io/flannel/releases/download/v{version}/kube-flannel.yml"


def kubernetes_patch(version: str) -> str:
    """Resolve '1.36' or '1.36.4' to a pinned patch version; raise KeyError when unknown."""
    parts = version.lstrip("v").split(".")
    minor = ".".join(parts[:2])
    pinned = KUBERNETES[minor]
    if len(parts) == 3 and ".".join(parts) != pinned:
        raise KeyError(version)
    return pinned
