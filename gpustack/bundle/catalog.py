"""Everything a run needs from the outside, for air-gapped sites (``gpustack bundle list``). Pure.

Four kinds: ``file`` (downloads with their checksum, from :func:`gpustack.config.compat.artifacts`),
``apt`` (packages the playbooks install: the base set of the os stage, the OS's own extras, the
Kubernetes packages at their pinned version), ``image`` (container images with a tag gpustack can
name from its pins: kubeadm's control-plane images, the sandbox image, Flannel's (gpustack renders
its manifest), verify's images) and
``chart`` (Helm chart archives). Images whose tags only the fetched artifacts know (the charts'
images, kubeadm's etcd and CoreDNS) are listed with the command that resolves them on
a connected machine; ``gpustack bundle create`` (gpustack/bundle/) runs those and fetches everything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from gpustack.config import compat, pins
from gpustack.config.model import Config
from gpustack.render import flannel

CONTROL_PLANE_IMAGES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
KUBERNETES_PACKAGES = ("kubelet", "kubeadm", "kubectl")


@dataclass(frozen=True)
class Item:
    kind: str  # file, apt, image, chart
    name: str
    version: str
    source: str  # URL, repository or registry reference
    checksum: str = ""  # sha256:/gpg: for files; "" where the source itself is signed or unpinned
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def os_packages(playbooks: Path, os_id: str, version: str) -> tuple[list[str], list[str]]:
    """(base packages, OS extras) the os stage installs, read from the role's defaults and vars."""
    role = playbooks / "roles" / "os_prep"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    major = version.split(".")[0]
    name = f"{'Ubuntu' if os_id == 'ubuntu' else 'Debian'}-{major}"
    vars_file = role / "vars" / f"{name}.yml"
    extra = (
        (yaml.safe_load(vars_file.read_text()) or {}).get("os_prep_distro_packages", []) if vars_file.is_file() else []
    )
    return list(defaults.get("os_prep_base_packages", [])), list(extra or [])


def items(cfg: Config, playbooks: Path, os_release: pins.OsRelease) -> list[Item]:
    """Every artifact a run of ``cfg`` needs on ``os_release``."""
    v = cfg.versions
    minor = v.kubernetes_minor
    out: list[Item] = [
        Item("file", a.name + (f" ({a.arch})" if a.arch != "all" else ""), a.version, a.url, a.checksum)
        for a in compat.artifacts(cfg)
    ]
    base, extra = os_packages(playbooks, os_release.id, os_release.version)
    archive = f"{os_release.name} archive"
    out += [Item("apt", p, "", archive, note="os stage") for p in [*base, *extra]]
    if v.containerd_source == "distribution":
        out.append(Item("apt", "containerd", os_release.distribution_containerd, archive, note="containerd stage"))
    repo = cfg.sources.kubernetes_apt_url.format(minor=minor)
    signed = f"gpg:{cfg.sources.kubernetes_apt_key_fingerprint}"
    out += [
        Item("apt", p, f"{v.kubernetes}-{pins.KUBERNETES_PACKAGE_REVISION}", repo, signed, "kubernetes stage")
        for p in KUBERNETES_PACKAGES
    ]
    # crictl and the CNI plugins are files (above); kubernetes-cni only because the kubelet's package depends on it
    # (its files are replaced by the verified plugins); kubeadm stopped depending on cri-tools at 1.32
    out.append(Item("apt", "kubernetes-cni", "", repo, signed, "dependency of kubelet (held; files replaced)"))
    out += [
        Item("image", f"registry.k8s.io/{name}", f"v{v.kubernetes}", "registry.k8s.io", note="kubeadm control plane")
        for name in CONTROL_PLANE_IMAGES
    ]
    out.append(
        Item(
            "image",
            "registry.k8s.io/pause",
            pins.KUBERNETES_LINES[minor].pause,
            "registry.k8s.io",
            pins.IMAGE_DIGESTS.get(pins.PAUSE_IMAGE.format(tag=pins.KUBERNETES_LINES[minor].pause), ""),
            "sandbox",
        )
    )
    out += [
        Item(
            "image",
            "registry.k8s.io/etcd, registry.k8s.io/coredns/coredns",
            "",
            "registry.k8s.io",
            note=f"resolve: kubeadm config images list --kubernetes-version v{v.kubernetes}",
        ),
    ]
    for ref in flannel.images(cfg):
        ref, _, digest = ref.partition("@")
        name, _, tag = ref.rpartition(":")
        out.append(
            Item(
                "image", name, tag, name.split("/")[0], digest, "Flannel" + ("" if digest else " (pinned by tag only)")
            )
        )
    for ref in (pins.VERIFY_CUDA_IMAGE, pins.VERIFY_NET_IMAGE):
        ref, _, digest = ref.partition("@")
        name, _, tag = ref.rpartition(":")
        note = "verify" if digest else "verify (pinned by tag: no verified digest)"
        out.append(Item("image", name, tag, name.split("/")[0], digest, note))
    dcgm, _, dcgm_tag = pins.DCGM_IMAGE.rpartition(":")
    out.append(Item("image", dcgm, dcgm_tag, "nvcr.io", pins.IMAGE_DIGESTS[pins.DCGM_IMAGE],
                    "gpustack diag, verify --load"))  # fmt: skip
    if cfg.remediation.enabled and cfg.remediation.image:
        out.append(Item("image", cfg.remediation.image, "", "", note="gpustack health's CronJob (remediation.image)"))
    if cfg.cluster.virtual_ip is not None:
        out.append(
            Item(
                "image",
                pins.KUBE_VIP_IMAGE.rsplit(":", 1)[0],
                pins.KUBE_VIP_VERSION,
                "ghcr.io",
                note="kube-vip, control planes (HA virtual IP; pinned by tag only: no verified digest)",
            )
        )
    chart_versions = {
        "gpu-operator": v.gpu_operator,
        "kube-prometheus-stack": v.kube_prometheus_stack,
        "dcgm-exporter": v.dcgm_exporter,
    }
    for chart in pins.CHARTS.values():
        version = chart_versions[chart.name]
        out.append(Item("chart", chart.name, version, chart.repo, note=f"archive {chart.name}-{version}.tgz"))
        out.append(
            Item(
                "image",
                f"images of {chart.name}",
                version,
                chart.repo,
                note=f"resolve: helm template {chart.name} --repo {chart.repo} --version {version} (with gpustack's values)",
            )
        )
    return out
