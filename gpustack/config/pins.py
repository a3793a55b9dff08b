"""Every version pin, download checksum and compatibility rule gpustack uses, in one table.

Sources (checked November 2026): Kubernetes patch releases (kubernetes.io/releases/<minor>),
containerd/runc release-archive and Helm archive checksums, each from two independent sources named in
:data:`CHECKSUM_SOURCES` (Kubespray's checksum table, roles/kubespray_defaults/vars/main/checksums.yml,
where it has the version); the pause tag per Kubernetes minor as Kubespray pins it
(pod_infra_supported_versions); the pkgs.k8s.io signing key fingerprint as published with the
repositories; Flannel release v0.28.9; chart versions from each chart's repository. When upstream
support of each pinned branch ends: gpustack/config/horizons.py. To move a pin, change it here and
nowhere else (docs/maintaining.md). What could not be verified from the build sandbox says so
(``None``), it is never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpustack.config.versions import at_least as at_least
from gpustack.config.versions import version_tuple as version_tuple

# Kubernetes minor -> newest patch gpustack pins. The GPU Operator validates 1.33-1.37. 1.35.9 and 1.36.5: the
# 2026-09-15 patch day (kubernetes.io/releases/1.35 and /1.36). 1.37.2 and 1.34.12: the tags on the Go module proxy
# (k8s.io/kubernetes v1.37.2, 2026-10-27T12:01:04Z; v1.34.12, 2026-09-23T17:08:30Z: `go list -m -json`). 1.34 reached
# its end of life on 2026-10-27 and is upgrade-only (KubernetesLine.upgrade_only): kept at its last patch so clusters
# on it can still add nodes and upgrade; `gpustack version` and `doctor` say it is past support. 1.37 is offered,
# the default stays 1.36 (docs/decisions.md).
KUBERNETES: dict[str, str] = {
    "1.34": "1.34.12",
    "1.35": "1.35.9",
    "1.36": "1.36.5",
    "1.37": "1.37.2",
}
KUBERNETES_DEFAULT = "1.36"
# pkgs.k8s.io package revision appended to the upstream version (kubeadm=1.36.4-1.1).
KUBERNETES_PACKAGE_REVISION = "1.1"

FLANNEL_VERSION = "0.28.9"  # fixes CVE-2026-46600 and CVE-2026-56852 (flannel ca937945)

# HA control plane with cluster.virtual_ip: kube-vip as a static pod on every control-plane node
# (ARP, leader election). The version Kubespray defaults to (kubernetes-sigs/kubespray
# roles/kubespray_defaults/defaults/main/download.yml at 46dbdd39, 2026-08-21: kube_vip_version 1.0.3). Pinned by tag
# only: no digest could be verified from the build sandbox.
KUBE_VIP_VERSION = "v1.0.3"
KUBE_VIP_IMAGE = f"ghcr.io/kube-vip/kube-vip:{KUBE_VIP_VERSION}"
# Flannel's manifest is rendered by gpustack (gpustack/render/flannel.py), not downloaded: per
# release, the flannel-cni-plugin tag that release's kube-flannel.yml runs in its install-cni-plugin
# init container (v0.28.9: Documentation/kube-flannel.yml and chart/kube-flannel/values.yaml). Only releases
# whose objects the renderer writes are listed (0.28.4 is gone: install-conf and the health port are
# 0.28.6/0.28.9 objects). Images pinned by tag only: no digest could be verified from the build sandbox
# (versions.image_digests adds one).
FLANNEL_CNI_PLUGIN: dict[str, str] = {"0.28.9": "v1.9.1-flannel3"}
#: flanneld's health endpoint (--healthz-port; hostNetwork, so it listens on every node's 0.0.0.0:8081).
FLANNEL_HEALTHZ_PORT = 8081
FLANNEL_IMAGE = "ghcr.io/flannel-io/flannel:v{version}"
FLANNEL_CNI_PLUGIN_IMAGE = "ghcr.io/flannel-io/flannel-cni-plugin:{tag}"

# --- the compatibility matrix ------------------------------------------------------------


@dataclass(frozen=True)
class KubernetesLine:
    """What one Kubernetes minor needs from the host and its container runtime."""

    minor: str
    # oldest containerd the kubelet of this minor runs with at all (1.35 is the last minor with 1.x): below it
    # the config is refused
    containerd_min: str
    # from 1.35 the kubelet refuses cgroup v1 by default (failCgroupV1)
    cgroup_v2_required: bool
    # the sandbox (pause) image tag kubeadm of this minor expects; containerd is configured with it
    pause: str
    # containerd's own recommendation for this minor, one floor per containerd branch ("the versions which are
    # recommended ... most thoroughly tested": containerd RELEASES.md "Kubernetes Support", main 91be73ba,
    # 2026-07-29; the EOL 1.6 entry of the 1.34 row left out). Below a floor, or on an unlisted branch older than
    # the newest listed one, the preflight (P18) and doctor (C04) warn.
    containerd_recommended: tuple[str, ...] = ()
    # past its end of life: pinned only so clusters on it can add nodes and upgrade (`gpustack upgrade --to` the
    # next minor); the matrix does not refuse the containerd such a cluster already runs
    upgrade_only: bool = False


# containerd_min: the oldest floor containerd's RELEASES.md lists for the minor (1.7.28 on 1.34/1.35; it was the
# kubelet's bare minimum, 1.7.0, before issue 30); 1.36 keeps the kubelet's 2.0.0 (no 1.x) so that an unlisted older
# 2.x (the test bed's Debian-built 2.1) is a warning, not a refusal (docs/decisions.md). 1.35 also lists 2.3.0: every branch RELEASES.md lists for 1.35 (2.2, 2.1,
# 1.7) is past its end of life by 2026-11-06, and NVIDIA validates containerd 1.8-2.3 with Kubernetes 1.33-1.36
# (NVIDIA/cloud-native-docs gpu-operator/platform-support.rst at 52dcb7b8, "Containerd 1.8 - 2.3"), so 1.35 would
# otherwise have no runtime gpustack could install without its own doctor flagging it (docs/decisions.md).
KUBERNETES_LINES: dict[str, KubernetesLine] = {
    "1.34": KubernetesLine("1.34", containerd_min="1.7.28", cgroup_v2_required=False, pause="3.10.1",
                           containerd_recommended=("2.1.3", "2.0.6", "1.7.28"), upgrade_only=True),
    "1.35": KubernetesLine("1.35", containerd_min="1.7.28", cgroup_v2_required=True, pause="3.10.1",
                           containerd_recommended=("2.3.0", "2.2.0", "2.1.5", "1.7.28")),
    "1.36": KubernetesLine("1.36", containerd_min="2.0.0", cgroup_v2_required=True, pause="3.10.2",
                           containerd_recommended=("2.3.0", "2.2.0")),
    # 1.37: kubeadm's PauseVersion 3.10.2 (cmd/kubeadm/app/constants/constants.go at v1.37.2). containerd's
    # RELEASES.md has no 1.37 row in the newest copy readable here (main 301026e5, 2026-08-22, before 1.37's
    # release); 2.3 is what NVIDIA validates with 1.37 (NVIDIA/cloud-native-docs#488, "Containerd 1.8 - 2.3") and the
    # branch RELEASES.md lists first for 1.36. Revisit when RELEASES.md lists 1.37.
    "1.37": KubernetesLine("1.37", containerd_min="2.0.0", cgroup_v2_required=True, pause="3.10.2",
                           containerd_recommended=("2.3.0",)),
}  # fmt: skip


def containerd_recommendation(containerd: str, minor: str) -> str:
    """ "" when ``containerd`` is what containerd recommends for Kubernetes ``minor`` (a listed branch at or above
    its floor); else why not, naming the recommendation."""
    line = kubernetes_line(minor)
    floors = line.containerd_recommended
    have = version_tuple(containerd)
    if not floors or len(have) < 2:
        return ""
    listed = ", ".join(f"{f}+" for f in floors)
    for floor in floors:
        if version_tuple(floor)[:2] == have[:2]:
            if have >= version_tuple(floor):
                return ""
            return f"containerd recommends {floor} or newer on the {floor.rsplit('.', 1)[0]} branch for Kubernetes {line.minor} ({listed})"
    return f"containerd {'.'.join(map(str, have[:2]))} is not among containerd's recommendations for Kubernetes {line.minor} ({listed})"


def containerd_refusal(containerd: str, minor: str) -> str:
    """Why the matrix refuses to install ``containerd`` for Kubernetes ``minor`` ("" when it does not): below the
    floor of a branch RELEASES.md lists for the minor, or a branch newer than every listed one (tested by nobody
    for that minor). An unlisted branch older than the newest listed one is left to the warning
    (:func:`containerd_recommendation`) and to the support horizons. Never for an ``upgrade_only`` minor."""
    line = kubernetes_line(minor)
    have = version_tuple(containerd)
    if line.upgrade_only or not line.containerd_recommended or len(have) < 2:
        return ""
    listed = ", ".join(f"{f}+" for f in line.containerd_recommended)
    for floor in line.containerd_recommended:
        if version_tuple(floor)[:2] == have[:2] and have < version_tuple(floor):
            return f"containerd {containerd} is below {floor}, the floor containerd's RELEASES.md lists for Kubernetes {line.minor} ({listed})"
    if have[:2] > max(version_tuple(f)[:2] for f in line.containerd_recommended):
        return (f"containerd {'.'.join(map(str, have[:2]))} is newer than every branch containerd's RELEASES.md lists "
                f"for Kubernetes {line.minor} ({listed})")  # fmt: skip
    return ""


PAUSE_IMAGE = "registry.k8s.io/pause:{tag}"


def kubernetes_line(minor: str) -> KubernetesLine:
    """The matrix line of a running kubelet's minor: its own, else the nearest (a minor newer than the newest line
    needs at least what the newest needs; one older than the oldest, what the oldest needs)."""
    if minor in KUBERNETES_LINES:
        return KUBERNETES_LINES[minor]
    lines = sorted(KUBERNETES_LINES.values(), key=lambda kl: version_tuple(kl.minor))
    below = [kl for kl in lines if version_tuple(kl.minor) <= version_tuple(minor)]
    return below[-1] if below else lines[0]


@dataclass(frozen=True)
class OsRelease:
    """A supported host OS. ``distribution_containerd``: the minor the OS archive ships (the
    distribution's containerd is only used where it satisfies the Kubernetes minor and the
    user asks for it). ``driver_container``: the GPU Operator publishes a driver container for
    it; elsewhere the NVIDIA driver must be preinstalled."""

    id: str
    version: str
    codename: str
    name: str
    distribution_containerd: str
    driver_container: bool


OS_RELEASES: tuple[OsRelease, ...] = (
    OsRelease("ubuntu", "22.04", "jammy", "Ubuntu 22.04 LTS", "1.7", driver_container=True),
    OsRelease("ubuntu", "24.04", "noble", "Ubuntu 24.04 LTS", "1.7", driver_container=True),
    OsRelease("debian", "12", "bookworm", "Debian 12", "1.6", driver_container=False),
    OsRelease("debian", "13", "trixie", "Debian 13", "1.7", driver_container=False),
)


@dataclass(frozen=True)
class GpuOperatorRange:
    """Kubernetes minors a GPU Operator release is validated on (both ends included)."""

    kubernetes_min: str
    kubernetes_max: str
    # wider ranges on some OS releases, (os id, version) -> (min, max)
    per_os: tuple[tuple[tuple[str, str], tuple[str, str]], ...] = ()

    def range_for(self, os_id: str | None = None, version: str | None = None) -> tuple[str, str]:
        for key, rng in self.per_os:
            if key == (os_id, version):
                return rng
        return self.kubernetes_min, self.kubernetes_max


#: NVIDIA/cloud-native-docs gpu-operator/platform-support.rst for v26.7.0, as amended after the release: #488 (merged
#: 2026-09-04) raised the upper bound to 1.37 everywhere, #490 (2026-09-08) the Ubuntu 24.04 lower bound from 1.32 to
#: 1.33, so one range for every OS.
GPU_OPERATOR_VALIDATED: dict[str, GpuOperatorRange] = {
    "v26.7.0": GpuOperatorRange("1.33", "1.37"),
}

# --- container runtime -------------------------------------------------------------------

# containerd 2.3, the LTS branch (2026-04-30 .. 2028-04-30, containerd RELEASES.md); 2.3.4 (tag 2026-08-12) is what
# Kubespray master defaults to (46dbdd39, 2026-08-21). 2.3.5 and 2.3.6 are security releases with one checksum source
# each (gpustack/config/security_releases.py): reported as open security releases, not pinned.
CONTAINERD_VERSION = "2.3.4"
# sha256 of https://github.com/containerd/containerd/releases/download/v<v>/containerd-<v>-linux-<arch>.tar.gz
CONTAINERD_SHA256: dict[str, dict[str, str]] = {
    "2.3.4": {
        "amd64": "9d68969855fbf676cdb8ed758e420fb048d61f984f61de3e53eddfebe484d168",
        "arm64": "a985fbb7e18fc0362d31a055338f5d7b0e087a3e27f14c70d1c5965399a29f95",
    },
    "2.2.7": {
        "amd64": "91cd216ea26a1b8b512219d3f205375c967e7b7de4dae571bc3dd16bfacd34b5",
        "arm64": "84eb0a161e20ad45465202fa2d6d93b3d9b74666c363e9908706d590a86e2618",
    },
    "2.1.9": {
        "amd64": "0083d2a4c2e77eeb20e55b6d955822fb957ff386c0c23959c8b27f598317586c",
        "arm64": "2fbc3053b09812092f6bf316a509d849960eb0cb9332ec88c2f49676d648fd67",
    },
}
# the config.toml version each containerd line writes (`containerd config default`), from the first release of
# the line: 1.x writes 2, 2.0-2.2 write 3, 2.3 writes 4 (containerd RELEASES.md "Daemon Configuration": version 4
# needs v2.3.0). Older versions are migrated in memory at every start, newer ones refused ("unsupported config
# version"). gpustack writes what the installed containerd writes: version 4 moves only the server settings
# ([grpc], [ttrpc], [debug], [metrics]) into plugins (containerd v2.3.4 cmd/containerd/server/config/config.go,
# serviceMigrate), the CRI tables gpustack edits keep their version-3 names; and a drop-in of a higher version than
# config.toml is refused at start ("drop-in config version 4 higher than root config version 3", LoadConfigWithPlugins),
# which a version-3 config.toml would risk once the NVIDIA toolkit writes its drop-in in 2.3's version.
CONTAINERD_CONFIG_VERSIONS: tuple[tuple[str, int], ...] = (("1.0", 2), ("2.0", 3), ("2.3", 4))


def containerd_config_version(containerd: str) -> int | None:
    """The config version ``containerd`` (e.g. "2.1.9") writes and expects; None for an unparsable version."""
    found = [cv for first, cv in CONTAINERD_CONFIG_VERSIONS if version_tuple(containerd) >= version_tuple(first)]
    return found[-1] if found and version_tuple(containerd) else None


# what containerd 2.3.4 builds against (script/setup/runc-version at tag v2.3.4: v1.4.3)
RUNC_VERSION = "1.4.3"
# sha256 of https://github.com/opencontainers/runc/releases/download/v<v>/runc.<arch> (a static binary)
RUNC_SHA256: dict[str, dict[str, str]] = {
    "1.4.3": {
        "amd64": "f6ae8efc0fa40079e1475e97cbe9d1bd3f106a28d6af78a11d9f1bd565515e60",
        "arm64": "633301e2e32f8a5ad54031aab4901eb00308bec677dd15faa2751e8f9dab5ca4",
    },
    "1.3.6": {
        "amd64": "3f3921dbbee7723e9868f97e88e51ffc910206e3ba55646e74d93d24ea76023c",
        "arm64": "6be27a061ef89bb14c6cb495405bba80f46cea213b8f79378a6086b1bac6b747",
    },
}
# The CNI plugins (containernetworking/plugins: bridge, host-local, loopback, portmap, which Flannel's conflist and
# containerd use) and crictl (kubernetes-sigs/cri-tools: certs renew and etcd snapshots run it) come from their
# release archives, verified like containerd (docs/decisions.md "CNI plugins and crictl from the release archives").
# 1.9.1: the newest plugins tag (v1.9.1, 2026-02-19), Kubespray's cni_version (19b73f4f, #13198). crictl 1.36.0 (tag
# v1.36.0, 2026-04-24): the newest cri-tools tag readable here (ba03eabc, 2026-08-13), what Kubespray installs with
# Kubernetes 1.36 and 1.37 (crictl_version: the newest below the next minor); cri-tools' README compatibility
# matrix: one crictl minor per Kubernetes minor, all from master. kubeadm's package stopped depending on cri-tools at
# 1.32 (kubernetes/release cmd/krel/templates/latest/metadata.yaml at f618b2a3), so without this no crictl is
# installed; the kubelet's still depends on kubernetes-cni (>= 1.2.0): that package stays, held, and the verified
# plugins replace its files in /opt/cni/bin.
CNI_PLUGINS_VERSION = "1.9.1"
# sha256 of https://github.com/containernetworking/plugins/releases/download/v<v>/cni-plugins-linux-<arch>-v<v>.tgz
CNI_PLUGINS_SHA256: dict[str, dict[str, str]] = {
    "1.9.1": {
        "amd64": "b98f74a0f8522f0a83867178729c1aa70f2158f90c45a2ca8fa791db1c76b303",
        "arm64": "56171987d3947707c3563db2f4001bccaf50fd63468611b9f3cbecb1375ee7ec",
    },
}
CRICTL_VERSION = "1.36.0"
# sha256 of https://github.com/kubernetes-sigs/cri-tools/releases/download/v<v>/crictl-v<v>-linux-<arch>.tar.gz
CRICTL_SHA256: dict[str, dict[str, str]] = {
    "1.36.0": {
        "amd64": "83855e114566a8a8c44c548d515670f51de3a5e1da8b2effb59870e2f10c25a3",
        "arm64": "68328594ccf780a80ae2b092d9f6ce484eec7cf540c275242e8fd954bfd95332",
    },
}
# etcdutl (etcd 3.6 moved `snapshot restore` out of etcdctl) for `gpustack etcd restore` on a control plane whose etcd
# image lacks it (kubernetes cluster/images/etcd ships etcd and etcdctl only): the release of the etcd kubeadm 1.36.5
# deploys, downloaded there only then (roles/etcd_restore/tasks/etcdutl.yml; docs/decisions.md "etcdutl from etcd's
# release archive"). One checksum source: CHECKSUM_SOURCES.
ETCD_VERSION = "3.6.8"
# sha256 of https://github.com/etcd-io/etcd/releases/download/v<v>/etcd-v<v>-linux-<arch>.tar.gz
ETCD_SHA256: dict[str, dict[str, str]] = {
    "3.6.8": {
        "amd64": "cf9cfe91a4856cb90eed9c99e6aee4b708db2c7888b88a6f116281f04b0ea693",
        "arm64": "438f56a700d17ce761510a3e63e6fa5c1d587b2dd4d7a22c179c09a649366760",
    },
}
ETCD_URL = "https://github.com/etcd-io/etcd/releases/download/v{version}/etcd-v{version}-linux-{arch}.tar.gz"
CNI_PLUGINS_URL = "https://github.com/containernetworking/plugins/releases/download/v{version}/cni-plugins-linux-{arch}-v{version}.tgz"
CRICTL_URL = (
    "https://github.com/kubernetes-sigs/cri-tools/releases/download/v{version}/crictl-v{version}-linux-{arch}.tar.gz"
)
CONTAINERD_URL = (
    "https://github.com/containerd/containerd/releases/download/v{version}/containerd-{version}-linux-{arch}.tar.gz"
)
RUNC_URL = "https://github.com/opencontainers/runc/releases/download/v{version}/runc.{arch}"

# Helm 4 (docs/decisions.md: Helm 3 gets security fixes only until Feb 2027; pyhelm3 0.5.8 already
# builds Helm 4's flags). Helm 4 supports only its newest minor: 4.3.0 (2026-09-09) ended 4.2's support.
HELM_VERSION = "4.3.0"
# sha256 of https://get.helm.sh/helm-v<version>-linux-<arch>.tar.gz
HELM_SHA256: dict[str, dict[str, str]] = {
    "4.3.0": {
        "amd64": "86584a54def73570558f66f5111cc53dfed56689637ae32c1201205d494f54fb",
        "arm64": "31c5794dd55c66a51e6b7d2e2ac7a114ae8b1de41ff1d9ba51748ac973b06a08",
    },
    "4.2.4": {
        "amd64": "c306b46f719b0a4da32d0f78ee21bf90ce8d602f15b22ab753f0674d1670a7f3",
        "arm64": "564de2191b881e9f71b5606b25345821ea1682f06ab90499d3ab22b530176da1",
    },
    "3.18.4": {
        "amd64": "f8180838c23d7c7d797b208861fecb591d9ce1690d8704ed1e4cb8e2add966c1",
        "arm64": "c0a45e67eef0c7416a8a8c9e9d5d2d30d70e4f4d3f7bea5de28241fffa8f3b89",
    },
}

#: Where each pinned checksum comes from: two independent public sources per download. Kubespray's table:
#: kubernetes-sigs/kubespray roles/kubespray_defaults/vars/main/checksums.yml, whose updater
#: (scripts/component_hash_update) reads the release assets' own sha256 files, named here so a maintainer can check
#: them: containerd's ``.../releases/download/v<v>/containerd-<v>-linux-<arch>.tar.gz.sha256sum``, runc's PGP-signed
#: ``.../releases/download/v<v>/runc.sha256sum``, Helm's ``https://get.helm.sh/helm-v<v>-linux-<arch>.tar.gz.sha256sum``.
CHECKSUM_SOURCES: dict[tuple[str, str], str] = {
    ("containerd", "2.3.4"): "Kubespray checksums.yml (master 46dbdd39, 2026-08-21, #13423); kubernetes/kops pins the "
    "same two in a test fixture (mockOCIFileRepository, containerd v2.3.4 amd64/arm64); upstream: "
    "https://github.com/containerd/containerd/releases/download/v2.3.4/containerd-2.3.4-linux-{amd64,arm64}.tar.gz.sha256sum",
    ("containerd", "2.2.7"): "Kubespray checksums.yml (46dbdd39); upstream: "
    "https://github.com/containerd/containerd/releases/download/v2.2.7/containerd-2.2.7-linux-{amd64,arm64}.tar.gz.sha256sum",
    ("containerd", "2.1.9"): "Kubespray checksums.yml (46dbdd39); upstream: "
    "https://github.com/containerd/containerd/releases/download/v2.1.9/containerd-2.1.9-linux-{amd64,arm64}.tar.gz.sha256sum",
    ("runc", "1.4.3"): "Kubespray checksums.yml (e15b1f27, 2026-07-14, #13368); kubernetes/kops pins the same two in a "
    "test fixture (mockOCIFileRepository, runc v1.4.3 amd64/arm64); upstream (PGP-signed): "
    "https://github.com/opencontainers/runc/releases/download/v1.4.3/runc.sha256sum",
    ("runc", "1.3.6"): "Kubespray checksums.yml (46dbdd39); upstream (PGP-signed): "
    "https://github.com/opencontainers/runc/releases/download/v1.3.6/runc.sha256sum",
    ("helm", "4.3.0"): "no Kubespray entry (it has no Helm 4): upstream "
    "https://get.helm.sh/helm-v4.3.0-linux-{amd64,arm64}.tar.gz.sha256sum, matched by several independent public "
    "Dockerfiles that check both with sha256sum --check (GitHub code search: helm-v4.3.0 86584a54)",
    ("helm", "4.2.4"): "upstream https://get.helm.sh/helm-v4.2.4-linux-{amd64,arm64}.tar.gz.sha256sum; "
    "https://github.com/helm/helm/releases/tag/v4.2.4; Kubespray has no Helm 4",
    ("helm", "3.18.4"): "Kubespray checksums.yml (46dbdd39); upstream "
    "https://get.helm.sh/helm-v3.18.4-linux-{amd64,arm64}.tar.gz.sha256sum",
    ("cni-plugins", "1.9.1"): "Kubespray checksums.yml cni_binary_checksums (19b73f4f, 2026-04-21, #13198); "
    "flannel-io/flannel pins the same two in its e2e suite (e2e/cluster.go at 1412cba0, cniPluginSHA256); upstream: "
    "https://github.com/containernetworking/plugins/releases/download/v1.9.1/cni-plugins-linux-{amd64,arm64}-v1.9.1.tgz.sha256",
    ("crictl", "1.36.0"): "Kubespray checksums.yml crictl_checksums (28bdeb85, 2026-05-01, #13219); matched by "
    "independent public build scripts that check both with sha256sum -c (GitHub code search: crictl 83855e11, "
    "68328594); upstream: "
    "https://github.com/kubernetes-sigs/cri-tools/releases/download/v1.36.0/crictl-v1.36.0-linux-{amd64,arm64}.tar.gz.sha256",
    ("etcd", "3.6.8"): "one source: Kubespray checksums.yml etcd_binary_checksums (46dbdd39, 2026-08-21; its "
    "updater reads upstream's https://github.com/etcd-io/etcd/releases/download/v3.6.8/SHA256SUMS, not readable "
    "here); independent public install scripts pin the same two (GitHub code search: cf9cfe91, 438f56a7)",
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

#: dcgm-exporter chart -> the exporter image gpustack runs with it: GPU Operator v26.7.0's (NVIDIA/gpu-operator tag v26.7.0
#: deployments/gpu-operator/values.yaml dcgmExporter.version), so both gpu.exporter modes run 4.8.3 with DCGM 4.6.0 (diag's);
#: the chart's own default is 4.5.3-4.8.2-distroless, its verified keys stay (docs/decisions.md, issue 30).
DCGM_EXPORTER_IMAGE_TAG: dict[str, str] = {"4.8.2": "4.6.0-4.8.3-distroless"}
#: The Prometheus gpustack runs: the 3.13 LTS, supported to 2027-07-31 (prometheus/docs release-cycle.md; horizons.py),
#: not kube-prometheus-stack 88.5.3's default v3.14.0-distroless (its values.yaml, tag kube-prometheus-stack-88.5.3,
#: ea930bae), past since 2026-09-28. 3.13.5 = github.com/prometheus/prometheus v0.313.5 on the Go module proxy
#: (2026-10-21, its CHANGELOG.md), the module tests/realbin/prometheus builds. gpustack's values set
#: prometheus.prometheusSpec.image.tag for the pinned chart only (registry and repository stay the chart's); the
#: -distroless variant, as the chart's default (v0.313.5 Dockerfile.distroless, Makefile.common, pushed with every v3
#: tag by .github/workflows/ci.yml publish_release). prometheus-operator v0.93.1 (88.5.3's) lists v3.13 as LTS
#: (pkg/operator/defaults.go PrometheusCompatibilityMatrix). Why 3.14 -> 3.13 is safe on disk: docs/decisions.md.
PROMETHEUS_VERSION = "3.13.5"
PROMETHEUS_IMAGE_TAG: dict[str, str] = {"88.5.3": f"v{PROMETHEUS_VERSION}-distroless"}
#: (kube-prometheus-stack chart, the Prometheus gpustack deploys with it): tests/prometheus/test_releases.py.
KUBE_PROMETHEUS_STACK_PROMETHEUS = ("88.5.3", PROMETHEUS_VERSION)

#: GPU Operator chart -> the NVIDIA driver it deploys by default (v26.7.0 deployments/gpu-operator/values.yaml
#: driver.version; gpustack does not override it): its branch (R595) has an end of life (horizons.py).
GPU_OPERATOR_DRIVER: dict[str, str] = {"v26.7.0": "595.91.07"}
#: GPU Operator chart -> every driver release it supports (NVIDIA/cloud-native-docs gpu-operator/life-cycle-policy.rst
#: "GPU Operator Component Matrix" at 52dcb7b8, 2026-08-21: 610.57.04, 595.91.07 (recommended, default), 580.173.02,
#: 535.309.01). What a driver nearing its end can move to without a newer operator (gpustack/config/advice.py).
GPU_OPERATOR_DRIVERS: dict[str, tuple[str, ...]] = {"v26.7.0": ("610.57.04", "595.91.07", "580.173.02", "535.309.01")}

# Image digests (sha256 of the multi-arch index), where one could be checked: each agrees across
# several independent public manifests that pin it (the registries cannot be queried from the
# build sandbox). Images not listed here are pinned by tag only (docs/decisions.md).
IMAGE_DIGESTS: dict[str, str] = {
    "registry.k8s.io/pause:3.10.1": "sha256:278fb9dbcca9518083ad1e11276933a2e96f23de604a3a08cc3c80002767d24c",
    "registry.k8s.io/pause:3.10.2": "sha256:f548e0e8e3dc1896ca956272154dde3314e8cc4fde0a57577ee9fa1c63f5baf4",
    "registry.k8s.io/e2e-test-images/agnhost:2.53": "sha256:99c6b4bb4a1e1df3f0b3752168c89358794d02258ebebc26bf21c29399011a85",
}


def with_digest(ref: str) -> str:
    """``name:tag@sha256:...`` when the digest is pinned, else ``ref`` unchanged."""
    digest = IMAGE_DIGESTS.get(ref)
    return f"{ref}@{digest}" if digest else ref


# verify's workload images. CUDA base runs nvidia-smi (mounted by the NVIDIA runtime): tag only (no digest could be
# verified: public manifests disagree). `verify --load` runs diag's DCGM image (VERIFY_DCGM_IMAGE, below).
VERIFY_CUDA_IMAGE = "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu24.04"
# verify's pod-network probe: Kubernetes' own e2e test image; `agnhost connect HOST:PORT` resolves the
# name (CoreDNS) and opens a TCP connection, exit 0 or 1 with DNS:/TIMEOUT/REFUSED/OTHER: on stderr.
# Pulled by digest.
VERIFY_NET_IMAGE = with_digest("registry.k8s.io/e2e-test-images/agnhost:2.53")

# Ansible: ansible-core comes from PyPI (pyproject.toml); the playbooks use two collections besides ansible.builtin
# (ansible.posix: sysctl, firewalld; community.general: modprobe), taken from the Ansible community package's wheel
# (pinned by version and sha256; only these two directories unpacked: ~11 MB, not 470) by `python -m gpustack.bootstrap`.
ANSIBLE_COLLECTIONS = {"ansible.posix": "2.1.0", "community.general": "11.4.2"}
ANSIBLE_COLLECTIONS_WHEEL = ("ansible", "12.3.0", "cd156f82fa87f7a899212b0efa9f7ca3a24d609212de9f78428a572eb01e5414")

KUBERNETES_APT_URL = "https://pkgs.k8s.io/core:/stable:/v{minor}/deb/"  # default sources; mirrors: sources:
KUBERNETES_APT_KEY_URL = "https://pkgs.k8s.io/core:/stable:/v{minor}/deb/Release.key"
# Fingerprint of the pkgs.k8s.io signing key ("isv:kubernetes OBS Project"); Release.key is checked against it.
KUBERNETES_APT_KEY_FINGERPRINT = "DE15B14486CD377B9E876E1A234654DA9A296436"
HELM_URL = "https://get.helm.sh/helm-v{version}-linux-{arch}.tar.gz"
#: The image registries a cluster gpustack builds pulls from (kubeadm's control plane, pause and CoreDNS; Flannel; the
#: GPU Operator and dcgm-exporter; Prometheus, Alertmanager, node-exporter and their operator; Grafana). Preflight
#: checks every node reaches each (preflight.registries).
IMAGE_REGISTRIES = ("registry.k8s.io", "ghcr.io", "nvcr.io", "quay.io", "docker.io")

# --- air-gapped bundles (gpustack bundle create / up --bundle) ----------------------------

# The OS archives `bundle create` resolves apt packages from, per OS id, as sources.list lines ("URL SUITE
# COMPONENT..."; {codename} is the release's). Override per release in gpustack.yaml (sources.os_apt, e.g. a local
# mirror) with the archive's keyring (sources.os_apt_keyring).
OS_APT_SOURCES: dict[str, tuple[str, ...]] = {
    "ubuntu": (
        "http://archive.ubuntu.com/ubuntu {codename} main universe",
        "http://archive.ubuntu.com/ubuntu {codename}-updates main universe",
        "http://security.ubuntu.com/ubuntu {codename}-security main universe",
    ),
    "debian": (
        "http://deb.debian.org/debian {codename} main",
        "http://deb.debian.org/debian {codename}-updates main",
        "http://deb.debian.org/debian-security {codename}-security main",
    ),
}
# The archive keyrings apt verifies those with, as distributions install them (Debian ships no Ubuntu keyring: set
# sources.os_apt_keyring.ubuntu on a Debian machine).
OS_APT_KEYRINGS: dict[str, str] = {
    "ubuntu": "/usr/share/keyrings/ubuntu-archive-keyring.gpg",
    "debian": "/usr/share/keyrings/debian-archive-keyring.gpg",
}


def os_release(os_id: str, version: str) -> OsRelease | None:
    return next((o for o in OS_RELEASES if (o.id, o.version) == (os_id, version)), None)


def gpu_operator_supports(
    chart_version: str, minor: str, os_id: str | None = None, os_version: str | None = None
) -> bool | None:
    """True/False when the chart's validated range is known, None for an unknown chart version."""
    rng = GPU_OPERATOR_VALIDATED.get(chart_version)
    if rng is None:
        return None
    low, high = rng.range_for(os_id, os_version)
    return version_tuple(low) <= version_tuple(minor) <= version_tuple(high)


def kubernetes_patch(version: str) -> str:
    """Resolve '1.36' or '1.36.4' to a pinned patch version; raise KeyError when unknown."""
    parts = version.lstrip("v").split(".")
    minor = ".".join(parts[:2])
    pinned = KUBERNETES[minor]
    if len(parts) == 3 and ".".join(parts) != pinned:
        raise KeyError(version)
    return pinned


# --- DCGM for `gpustack diag` --------------------------------------------------------------------
# The DCGM version the pinned GPU Operator ships (v26.7.0 deployments/gpu-operator/values.yaml: dcgm.version
# 4.6.0-1-ubuntu24.04). The image is the same release's UBI 10 build, pinned by the digest NVIDIA's own v26.7.0 release
# manifest records for it (bundle/manifests/gpu-operator-certified.clusterserviceversion.yaml, relatedImages
# "dcgm-image"); no digest of the ubuntu24.04 tag could be established. Either image runs on any host OS.
DCGM_VERSION = "4.6.0"
DCGM_IMAGE = "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubi10"
IMAGE_DIGESTS[DCGM_IMAGE] = "sha256:92080d86d04c265f7fc0b8e1cd95dff94d3ab57de6a6474c3c483e4c2ada5dea"
DIAG_DCGM_IMAGE = with_digest(DCGM_IMAGE)
# One DCGM pin: `verify --load` runs /usr/bin/dcgmproftester12 from the same image (it was 4.2.3-1-ubuntu22.04 by
# tag). NVIDIA/DCGM v4.6.0's docker/Dockerfile.ubi9 and .ubuntu22.04 (51b65cce) install datacenter-gpu-manager-4-cuda12
# and -cuda13; the cuda12 package holds it (scripts/verify_package_contents/datacenter-gpu-manager-cuda12_*.txt): CUDA
# 12 runs on every driver the GPU Operator supports (R535+), dcgmproftester13 only on CUDA 13 drivers.
VERIFY_DCGM_IMAGE = DIAG_DCGM_IMAGE
