"""``bundle.json``: every artifact of a bundle with its sha256 (and an image's digest), and the
checks ``up --bundle`` runs before anything else.

Format 1::

    {"format": 1, "created": "...", "kubernetes": "1.36.4", "arches": ["amd64"], "os": ["debian-12"],
     "resolved_images": {"chart gpu-operator": [...], "kubeadm": [...]},
     "artifacts": [
       {"kind": "file", "name": "containerd", "version": "2.2.7", "arch": "amd64", "path": "files/...", "sha256": "...", "size": 1, "source": "https://..."},
       {"kind": "chart", "name": "gpu-operator", "version": "v26.7.0", "path": "charts/...", ...},
       {"kind": "image", "name": "registry.k8s.io/pause:3.10.2", "digest": "sha256:...", "arch": "amd64", "nodes": "all", ...},
       {"kind": "deb", "name": "kubeadm", "version": "1.36.4-1.1", "arch": "amd64", "repo": "kubernetes-v1.36", ...},
       {"kind": "apt-index", "name": "InRelease", "repo": "debian-12", ...},
       {"kind": "apt-key", "name": "Release.key", "repo": "debian-12", "fingerprint": "...", ...}]}

``path`` is relative to the bundle directory; every file ``up --bundle`` serves is one of these.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path, PurePosixPath
from typing import Any

from gpustack.bundle import want
from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.constants import BUNDLE_MANIFEST

FORMAT = 1
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Artifact:
    kind: str  # file, chart, image, deb, apt-index, apt-key
    name: str
    path: str
    sha256: str
    size: int
    version: str = ""
    arch: str = ""
    source: str = ""
    digest: str = ""  # image: the digest of what its name points at (index or manifest)
    nodes: str = ""  # image: all | control-plane
    repo: str = ""  # deb, apt-index, apt-key: the bundle repository
    fingerprint: str = ""  # apt-key

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v != "" or k in ("kind", "name", "path", "sha256")}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Artifact:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def key(self) -> tuple[str, ...]:
        """What identifies an artifact across runs (re-running ``bundle create`` replaces it)."""
        return (self.kind, self.name, self.version, self.arch, self.repo)


@dataclass
class Manifest:
    kubernetes: str
    arches: list[str]
    os: list[str]
    created: str = ""
    artifacts: list[Artifact] = field(default_factory=list)
    resolved_images: dict[str, list[str]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "created": self.created,
            "kubernetes": self.kubernetes,
            "arches": self.arches,
            "os": self.os,
            "resolved_images": self.resolved_images,
            "artifacts": [a.as_dict() for a in sorted(self.artifacts, key=lambda a: (a.kind, a.path))],
        }

    def put(self, artifact: Artifact) -> None:
        """Add an artifact, replacing one with the same key or path."""
        self.artifacts = [a for a in self.artifacts if a.key != artifact.key and a.path != artifact.path]
        self.artifacts.append(artifact)

    def find(self, kind: str, name: str, **attrs: str) -> Artifact | None:
        for a in self.artifacts:
            if a.kind == kind and a.name == name and all(getattr(a, k) == v for k, v in attrs.items()):
                return a
        return None

    def by_path(self) -> dict[str, Artifact]:
        return {a.path: a for a in self.artifacts}


class ManifestError(ValueError):
    """bundle.json is missing, unreadable or not a gpustack bundle manifest."""


def load(bundle: Path) -> Manifest:
    path = bundle / BUNDLE_MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{path} does not exist: not a bundle (gpustack bundle create --out {bundle})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{path} cannot be read: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ManifestError(f"{path}: not a format-{FORMAT} gpustack bundle manifest")
    try:
        artifacts = [Artifact.from_dict(a) for a in data.get("artifacts", [])]
        for a in artifacts:
            safe_path(a.path)
        return Manifest(
            kubernetes=str(data["kubernetes"]),
            arches=list(data.get("arches", [])),
            os=list(data.get("os", [])),
            created=str(data.get("created", "")),
            artifacts=artifacts,
            resolved_images={k: list(v) for k, v in (data.get("resolved_images") or {}).items()},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ManifestError(f"{path}: malformed ({exc})") from None


def save(bundle: Path, manifest: Manifest) -> None:
    """Write bundle.json atomically (a temporary file renamed over it)."""
    write_atomic(bundle / BUNDLE_MANIFEST, (json.dumps(manifest.as_dict(), indent=2) + "\n").encode())


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def safe_path(path: str) -> str:
    """A manifest path must stay inside the bundle: relative, no ``..``."""
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts or path.startswith("."):
        raise ValueError(f"{path!r} is not a path inside the bundle")
    return path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def intact(bundle: Path, artifact: Artifact | None) -> bool:
    """The artifact's file is there with its recorded size and sha256."""
    if artifact is None:
        return False
    path = bundle / artifact.path
    try:
        if path.stat().st_size != artifact.size:
            return False
    except OSError:
        return False
    return sha256_file(path) == artifact.sha256


# --- what `up --bundle` checks ------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    artifact: str  # names the artifact (what the user looks for)
    message: str

    def __str__(self) -> str:
        return f"{self.artifact}: {self.message}"


def check_files(bundle: Path, manifest: Manifest) -> list[Problem]:
    """Every artifact's file present with its recorded sha256 (every byte read)."""
    out = []
    for a in manifest.artifacts:
        path = bundle / a.path
        if not path.is_file():
            out.append(Problem(a.path, f"missing ({a.kind} {a.name})"))
            continue
        actual = sha256_file(path)
        if actual != a.sha256:
            out.append(Problem(a.path, f"sha256 {actual} does not match the manifest's {a.sha256} ({a.kind} {a.name})"))
    return out


def check_config(cfg: Config, manifest: Manifest) -> list[Problem]:
    """Everything the config needs is in the manifest, and what the pin table (or gpustack.yaml)
    pins agrees with it: files by sha256, charts by version, images by digest where pinned,
    the Kubernetes packages at their pinned version. Pure (the files themselves: :func:`check_files`)."""
    out: list[Problem] = []
    if manifest.kubernetes != cfg.versions.kubernetes:
        out.append(
            Problem("bundle", f"made for Kubernetes {manifest.kubernetes}, the config wants {cfg.versions.kubernetes}")
        )
    arches = manifest.arches or ["amd64"]
    for f in want.files(cfg, arches):
        found = manifest.find("file", f.name, version=f.version, arch=f.arch)
        label = f"{f.name} {f.version}" + ("" if f.arch == "all" else f" ({f.arch})")
        if found is None:
            out.append(Problem(label, "not in the bundle"))
        elif f.sha256 is not None and found.sha256 != f.sha256:
            out.append(Problem(label, f"sha256 {found.sha256} in the bundle, the pin is {f.sha256}"))
    for c in want.charts(cfg):
        if manifest.find("chart", c.name, version=c.version) is None:
            out.append(Problem(f"chart {c.name} {c.version}", "not in the bundle"))
    for image in want.image_wants(cfg, manifest.resolved_images):
        for arch in arches:
            found = manifest.find("image", image.ref, arch=arch)
            if found is None:
                out.append(Problem(f"image {image.ref} ({arch})", "not in the bundle"))
            elif image.digest and found.digest != image.digest:
                out.append(
                    Problem(
                        f"image {image.ref} ({arch})", f"digest {found.digest} in the bundle, pinned {image.digest}"
                    )
                )
    k8s = want.kubernetes_apt_want(cfg)
    for spec in k8s.packages:
        name, _, version = spec.partition("=")
        for arch in arches:
            if manifest.find("deb", name, version=version, arch=arch, repo=k8s.repo) is None:
                out.append(Problem(f"package {name} {version} ({arch})", f"not in the bundle's {k8s.repo} repository"))
    if manifest.find("apt-key", "Release.key", repo=k8s.repo) is None:
        out.append(Problem(f"repository {k8s.repo}", "no signing key (Release.key) in the bundle"))
    return out


def check_hosts(manifest: Manifest, facts: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """After the read-only preflight: every node's OS has an apt repository in the bundle and its
    architecture images and packages."""
    out = []
    arch_map = {"x86_64": "amd64", "aarch64": "arm64"}
    for node, f in sorted(facts.items()):
        release = f"{f.get('os_id')}-{f.get('os_version_id')}"
        if release not in manifest.os or manifest.find("apt-key", "Release.key", repo=release) is None:
            out.append(
                Problem(f"repository {release}", f"node {node} runs {release}; the bundle has {', '.join(manifest.os)}")
            )
        arch = arch_map.get(str(f.get("arch")), str(f.get("arch")))
        if arch not in (manifest.arches or ["amd64"]):
            out.append(
                Problem(f"architecture {arch}", f"node {node} is {arch}; the bundle has {', '.join(manifest.arches)}")
            )
    return out


def repo_packages(manifest: Manifest, repo: str) -> set[str]:
    return {a.name for a in manifest.artifacts if a.kind == "deb" and a.repo == repo}


def releases(manifest: Manifest) -> list[pins.OsRelease]:
    return [want.parse_release(r) for r in manifest.os]


def served_paths(manifest: Manifest) -> Iterable[str]:
    return (a.path for a in manifest.artifacts)
