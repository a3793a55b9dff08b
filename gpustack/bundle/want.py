"""What a bundle must hold for a config, its OS releases and architectures. Pure: no I/O beyond
reading the shipped role variables (the os stage's package list).

Known from the pin table: the downloaded files (with their pinned sha256), the charts, the apt
packages to resolve and the images gpustack names itself (kubeadm's control plane, the sandbox
image, verify's, kube-vip's, Flannel's: gpustack renders its manifest). Known only from fetched
artifacts (:func:`images_in_documents`, :func:`kubeadm_images`): the charts' images (``helm template``
with gpustack's values) and kubeadm's etcd and CoreDNS (``kubeadm config images list``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gpustack.bundle import catalog
from gpustack.config import compat, pins
from gpustack.config.model import Config
from gpustack.render import flannel

#: where each downloaded file lives in a bundle; the same placeholders as the ``sources:`` URL
#: templates, so ``up --bundle`` points a template at ``<server>/<layout>``
FILE_LAYOUT: dict[str, str] = {
    "containerd": "files/containerd/{version}/{arch}/containerd-{version}-linux-{arch}.tar.gz",
    "runc": "files/runc/{version}/{arch}/runc.{arch}",
    "helm": "files/helm/{version}/{arch}/helm-v{version}-linux-{arch}.tar.gz",
    "cni-plugins": "files/cni-plugins/{version}/{arch}/cni-plugins-linux-{arch}-v{version}.tgz",
    "crictl": "files/crictl/{version}/{arch}/crictl-v{version}-linux-{arch}.tar.gz",
    "etcd": "files/etcd/{version}/{arch}/etcd-v{version}-linux-{arch}.tar.gz",
}
#: the ``sources:`` field each file's URL template lives in
SOURCE_FIELD = {
    "containerd": "containerd_url",
    "runc": "runc_url",
    "helm": "helm_url",
    "cni-plugins": "cni_plugins_url",
    "crictl": "crictl_url",
    "etcd": "etcd_url",
}
#: images only control-plane nodes run (static pods); every other image goes to every node
CONTROL_PLANE_ONLY = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "kube-vip")
#: the apt repository of the Kubernetes packages in a bundle, per minor (flat, like pkgs.k8s.io)
KUBERNETES_REPO = "kubernetes-v{minor}"

Nodes = Literal["all", "control-plane"]


@dataclass(frozen=True)
class FileWant:
    name: str  # a FILE_LAYOUT key
    version: str
    arch: str  # "all" for arch-independent files
    url: str
    sha256: str | None  # None: not pinned (a version the pin table has no checksum for)

    @property
    def path(self) -> str:
        return FILE_LAYOUT[self.name].format(version=self.version, arch=self.arch)


@dataclass(frozen=True)
class ImageWant:
    ref: str  # normalized name:tag (docker.io/library/x:1)
    digest: str | None  # pinned digest (the multi-arch index's), or None: pinned by tag only
    nodes: Nodes
    why: str


@dataclass(frozen=True)
class ChartWant:
    name: str
    version: str
    repo: str

    @property
    def path(self) -> str:
        return f"charts/{self.name}-{self.version}.tgz"


@dataclass(frozen=True)
class AptWant:
    """One apt repository of the bundle: ``repo`` names it (``debian-12``, ``kubernetes-v1.36``);
    ``packages`` are what apt resolves (``name`` or ``name=version``), with every dependency."""

    repo: str
    packages: tuple[str, ...]


# --- image references ----------------------------------------------------------------------------

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DOMAIN = re.compile(r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9-]+)*(?::[0-9]+)?$")


@dataclass(frozen=True)
class ImageRef:
    """A parsed image reference: ``registry/repository[:tag][@digest]``."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"

    @property
    def tagged(self) -> str:
        """``registry/repository:tag`` (the name containerd stores an imported image under)."""
        return f"{self.name}:{self.tag or 'latest'}"

    def __str__(self) -> str:
        return self.tagged + (f"@{self.digest}" if self.digest else "")


def parse_ref(text: str) -> ImageRef:
    """Parse and normalize an image reference the way containerd and the kubelet do (Docker Hub
    names get ``docker.io/`` and, for one-component names, ``library/``). ValueError when it is
    not one."""
    rest, _, digest = text.strip().partition("@")
    if digest and not _DIGEST.match(digest):
        raise ValueError(f"{text!r}: {digest!r} is not a sha256 digest")
    first, slash, remainder = rest.partition("/")
    if slash and (("." in first or ":" in first or first == "localhost") and _DOMAIN.match(first)):
        registry, path = first, remainder
    else:
        registry, path = "docker.io", rest
    tag = None
    if ":" in path.rsplit("/", 1)[-1]:
        path, tag = path.rsplit(":", 1)
        if not _TAG.match(tag):
            raise ValueError(f"{text!r}: {tag!r} is not a tag")
    if registry == "docker.io" and "/" not in path:
        path = f"library/{path}"
    if not path or not all(_COMPONENT.match(c) for c in path.split("/")):
        raise ValueError(f"{text!r} is not an image reference")
    return ImageRef(registry, path, tag, digest or None)


def is_ref(text: str, *, strict: bool = False) -> bool:
    """Does ``text`` look like an image reference with a tag or digest? ``strict``: and with an
    explicit registry (what an image in a command-line argument or environment value looks like)."""
    if not isinstance(text, str) or not text or any(c.isspace() for c in text) or "{" in text:
        return False
    try:
        ref = parse_ref(text)
    except ValueError:
        return False
    if not (ref.tag or ref.digest):
        return False
    return not strict or text.split("/", 1)[0] == ref.registry


def archive_name(ref: str, arch: str) -> str:
    """The bundle path of an image's OCI archive: ``images/<arch>/<ref with / and : as _>.tar``."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", parse_ref(ref).tagged)
    return f"images/{arch}/{safe}.tar"


def _nodes_for(ref: str) -> Nodes:
    last = parse_ref(ref).repository.rsplit("/", 1)[-1]
    return "control-plane" if last in CONTROL_PLANE_ONLY else "all"


# --- what the pin table names ----------------------------------------------------------------------


def image_digests(cfg: Config) -> dict[str, str]:
    """Pinned image digests: the pin table's, with versions.image_digests on top."""
    return {**pins.IMAGE_DIGESTS, **(cfg.versions.image_digests or {})}


def files(cfg: Config, arches: Sequence[str]) -> list[FileWant]:
    """The downloaded files (containerd, runc, Helm, the CNI plugins, crictl, etcd's archive) with their pinned sha256 (Flannel's manifest is
    rendered by gpustack, not downloaded)."""
    v, s = cfg.versions, cfg.sources
    out: list[FileWant] = []
    if v.containerd_source == "release":
        cd, rc = compat.containerd_sha256(cfg), compat.runc_sha256(cfg)
        for arch in arches:
            out.append(
                FileWant(
                    "containerd",
                    v.containerd,
                    arch,
                    s.containerd_url.format(version=v.containerd, arch=arch),
                    cd.get(arch),
                )
            )
            out.append(FileWant("runc", v.runc, arch, s.runc_url.format(version=v.runc, arch=arch), rc.get(arch)))
    hs = compat.helm_sha256(cfg)
    for arch in arches:
        out.append(FileWant("helm", v.helm, arch, s.helm_url.format(version=v.helm, arch=arch), hs.get(arch)))
    for name, version, url, sums in (
        ("cni-plugins", v.cni_plugins, s.cni_plugins_url, compat.cni_plugins_sha256(cfg)),
        ("crictl", v.crictl, s.crictl_url, compat.crictl_sha256(cfg)),
        ("etcd", pins.ETCD_VERSION, s.etcd_url, compat.etcd_sha256(cfg)),  # etcdutl for `etcd restore`
    ):
        out += [
            FileWant(name, version, arch, url.format(version=version, arch=arch), sums.get(arch)) for arch in arches
        ]
    return out


def charts(cfg: Config) -> list[ChartWant]:
    v = cfg.versions
    versions = {
        "gpu-operator": v.gpu_operator,
        "kube-prometheus-stack": v.kube_prometheus_stack,
        "dcgm-exporter": v.dcgm_exporter,
    }
    return [
        ChartWant(c.name, versions[c.name], cfg.sources.chart_repos.get(c.name, c.repo)) for c in pins.CHARTS.values()
    ]


def pinned_images(cfg: Config) -> list[ImageWant]:
    """The images gpustack names from its pins (the others come from fetched artifacts)."""
    v = cfg.versions
    digests = image_digests(cfg)
    refs: list[tuple[str, str]] = [
        (f"registry.k8s.io/{name}:v{v.kubernetes}", "kubeadm control plane") for name in catalog.CONTROL_PLANE_IMAGES
    ]
    refs.append((compat.sandbox_image(cfg), "sandbox (pause)"))
    refs += [(ref, "Flannel (gpustack's manifest)") for ref in flannel.images(cfg)]
    for ref in (pins.VERIFY_CUDA_IMAGE, pins.VERIFY_NET_IMAGE):
        refs.append((ref.partition("@")[0], "verify"))
    if cfg.cluster.virtual_ip is not None:
        refs.append((pins.KUBE_VIP_IMAGE, "kube-vip (HA virtual IP)"))
    refs.append((pins.DCGM_IMAGE, "gpustack diag and verify --load (DCGM)"))
    if cfg.remediation.enabled and cfg.remediation.image:
        refs.append((cfg.remediation.image, "gpustack health's CronJob (remediation.image)"))
    out = []
    for ref, why in refs:
        parsed = parse_ref(ref)
        digest = parsed.digest or digests.get(ref) or digests.get(parsed.tagged)
        out.append(ImageWant(parsed.tagged, digest, _nodes_for(parsed.tagged), why))
    return out


def image_wants(cfg: Config, resolved: Mapping[str, Iterable[str]]) -> list[ImageWant]:
    """The pinned images plus those resolved from fetched artifacts (``{source: [ref, ...]}``),
    each once, pinned digests applied."""
    digests = image_digests(cfg)
    out = {w.ref: w for w in pinned_images(cfg)}
    for source, refs in resolved.items():
        for ref in refs:
            parsed = parse_ref(ref)
            tagged = parsed.tagged
            if tagged not in out:
                out[tagged] = ImageWant(tagged, parsed.digest or digests.get(tagged), _nodes_for(tagged), source)
    return list(out.values())


def os_apt_want(cfg: Config, playbooks: Path, release: pins.OsRelease) -> AptWant:
    """The OS repository: the os stage's packages, the kubelet's dependencies from the OS (they
    are resolved together with the Kubernetes packages, see :func:`gpustack.bundle.apt`), and the
    distribution's containerd where the config uses it."""
    base, extra = catalog.os_packages(playbooks, release.id, release.version)
    packages = [*base, *extra]
    if cfg.versions.containerd_source == "distribution":
        packages.append("containerd")
    return AptWant(release_id(release), tuple(dict.fromkeys(packages)))


def kubernetes_apt_want(cfg: Config) -> AptWant:
    v = cfg.versions
    version = f"{v.kubernetes}-{pins.KUBERNETES_PACKAGE_REVISION}"
    return AptWant(
        KUBERNETES_REPO.format(minor=v.kubernetes_minor), tuple(f"{p}={version}" for p in catalog.KUBERNETES_PACKAGES)
    )


def release_id(release: pins.OsRelease) -> str:
    return f"{release.id}-{release.version}"


def parse_release(text: str) -> pins.OsRelease:
    """``ubuntu-24.04`` -> the OsRelease; ValueError naming the supported ones."""
    os_id, _, version = text.partition("-")
    found = pins.os_release(os_id, version)
    if found is None:
        known = ", ".join(release_id(o) for o in pins.OS_RELEASES)
        raise ValueError(f"{text}: not a supported OS ({known})")
    return found


def apt_sources(cfg: Config, release: pins.OsRelease) -> tuple[list[str], str]:
    """(sources.list lines ``URL SUITE COMPONENT...``, keyring path) of a release's archive."""
    rid = release_id(release)
    lines = cfg.sources.os_apt.get(rid) or [
        line.format(codename=release.codename) for line in pins.OS_APT_SOURCES[release.id]
    ]
    keyring = cfg.sources.os_apt_keyring.get(rid) or cfg.sources.os_apt_keyring.get(release.id)
    return list(lines), str(keyring or pins.OS_APT_KEYRINGS[release.id])


# --- images named in fetched artifacts -----------------------------------------------------------------


def _walk(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, (*path, str(key)))
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value, path)


def _triplet(node: Mapping[str, Any]) -> str | None:
    """NVIDIA's ``{repository, image, version}`` (the GPU Operator's ClusterPolicy sections):
    ``repository/image:version`` or ``repository/image@version`` for a digest."""
    repo, image, version = node.get("repository"), node.get("image"), node.get("version")
    if not all(isinstance(x, str) and x for x in (repo, image, version)):
        return None
    sep = "@" if str(version).startswith("sha256:") else ":"
    return f"{repo}/{image}{sep}{version}"


@dataclass(frozen=True)
class FoundImage:
    ref: str
    #: the GPU Operator's driver: its tag gets "-<os><version>" appended per node OS
    driver: bool = False


#: ClusterPolicy sections the GPU Operator deploys only for sandbox (VM) workloads
#: (controllers/state_manager.go: the sandbox states run only with sandboxWorkloads.enabled)
SANDBOX_ONLY = frozenset(
    {
        "vgpuManager",
        "vgpuDeviceManager",
        "vfioManager",
        "sandboxDevicePlugin",
        "kataSandboxDevicePlugin",
        "kataManager",
        "ccManager",
    }
)


def _without_unused_sections(doc: Any) -> Any:
    """A ClusterPolicy without the sandbox-only sections when sandbox workloads are off."""
    if not isinstance(doc, dict) or doc.get("kind") != "ClusterPolicy" or not isinstance(doc.get("spec"), dict):
        return doc
    spec = doc["spec"]
    if (spec.get("sandboxWorkloads") or {}).get("enabled") is True:
        return doc
    return {**doc, "spec": {k: v for k, v in spec.items() if k not in SANDBOX_ONLY}}


def images_in_documents(docs: Iterable[Any]) -> list[FoundImage]:
    """Every image Kubernetes objects name: ``image:`` fields (containers, and the Prometheus
    operator's custom resources), NVIDIA's repository/image/version sections (skipped when
    ``enabled: false``, and in a ClusterPolicy the sandbox-only sections unless sandbox workloads are
    on), and fully qualified references in container arguments (``--x=REF``) and in environment
    variables whose name ends in ``IMAGE``."""
    found: dict[str, FoundImage] = {}

    def add(ref: str, *, driver: bool = False) -> None:
        if ref not in found:
            found[ref] = FoundImage(ref, driver)

    for doc in docs:
        for path, node in _walk(_without_unused_sections(doc)):
            if isinstance(node, dict):
                if "repository" in node and "image" in node:
                    ref = _triplet(node)
                    if ref and node.get("enabled") is not False and is_ref(ref):
                        add(ref, driver=path[-2:] == ("spec", "driver"))
                    continue
                image = node.get("image")
                if isinstance(image, str) and is_ref(image):
                    add(image)
                env_name, env_value = node.get("name"), node.get("value")
                if (
                    isinstance(env_name, str)
                    and env_name.upper().endswith("IMAGE")
                    and isinstance(env_value, str)
                    and is_ref(env_value, strict=True)
                ):
                    add(env_value)
            elif isinstance(node, str) and path and path[-1] in ("args", "command") and node.startswith("--"):
                _, eq, value = node.partition("=")
                if eq and is_ref(value, strict=True):
                    add(value)
    return list(found.values())


def driver_refs(found: FoundImage, releases: Iterable[pins.OsRelease]) -> list[str]:
    """The GPU Operator's driver image per node OS with a driver container: ``<ref>-ubuntu24.04``
    (a digest-pinned driver is used as it is)."""
    if "@" in found.ref:
        return [found.ref]
    return [f"{found.ref}-{r.id}{r.version}" for r in releases if r.driver_container]


def kubeadm_images(text: str) -> list[str]:
    """``kubeadm config images list`` output: one reference per line."""
    return [line.strip() for line in text.splitlines() if line.strip() and is_ref(line.strip())]
