"""containerd 2 and runc for the test hosts, laid out like the upstream release downloads.

Debian's testing suite (forky) ships containerd 2.1.x and runc 1.3.x. :func:`fetch_debs`
downloads the two packages from Debian's archive on the outer machine (``apt-get download``
with a private apt state directory, so the machine's own sources are untouched) into the test
bed cache; :func:`publish_runtime` repackages them the way the projects release them and puts
them on the bed's file server:

* ``/containerd/containerd/releases/download/v<v>/containerd-<v>-linux-<arch>.tar.gz`` holding
  ``bin/containerd``, ``bin/containerd-shim-runc-v2`` and ``bin/ctr``;
* ``/opencontainers/runc/releases/download/v<v>/runc.<arch>`` (the binary itself).

Their sha256 is computed here and handed to gpustack.yaml in place of the pin (the pin table
keeps the real release checksums). Debian builds link against glibc: containerd needs 2.34
(Debian 12 has 2.36), forky's runc 2.38, so on a Debian 12 host runc is installed and verified
but cannot execute (the upstream runc release is a static binary; Debian 13 hosts run it).
"""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpustack.config import pins

from ._proc import TestbedError, file_lock, run
from .rootfs import cache_dir, mirror
from .services import HttpServer, sha256_of

SUITE = "forky"
PACKAGES = ("containerd", "runc")
CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
CONTAINERD_PATH = "/containerd/containerd/releases/download/v{version}/containerd-{version}-linux-{arch}.tar.gz"
RUNC_PATH = "/opencontainers/runc/releases/download/v{version}/runc.{arch}"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
CNI_PLUGINS_PATH = "/containernetworking/plugins/releases/download/v{version}/cni-plugins-linux-{arch}-v{version}.tgz"
CRICTL_PATH = "/kubernetes-sigs/cri-tools/releases/download/v{version}/crictl-v{version}-linux-{arch}.tar.gz"
#: the plugins Flannel's conflist and containerd name; stand-ins (the bed runs no pod sandbox): the archive proves the
#: download, the checksum and the unpacking into /opt/cni/bin, not the plugins
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
CRICTL_DOUBLE = Path(__file__).parent / "doubles" / "crictl"


@dataclass(frozen=True)
class RuntimeArchives:
    """What the file server publishes: versions and the test's own checksums."""

    containerd_version: str
    containerd_sha256: str
    runc_version: str
    runc_sha256: str
    arch: str
    cni_plugins_sha256: str = ""
    crictl_sha256: str = ""

    def config_versions(self) -> dict[str, object]:
        """The ``versions:`` entries of gpustack.yaml for these archives (the CNI plugins and crictl at the pinned
        versions, with the bed's own archives' checksums)."""
        return {
            "containerd": self.containerd_version,
            "containerd_sha256": {self.arch: self.containerd_sha256},
            "runc": self.runc_version,
            "runc_sha256": {self.arch: self.runc_sha256},
            "cni_plugins_sha256": {self.arch: self.cni_plugins_sha256},
            "crictl_sha256": {self.arch: self.crictl_sha256},
        }

    @staticmethod
    def config_sources(base: str) -> dict[str, str]:
        """The ``sources:`` URL templates of the CNI plugins and crictl archives on the bed's file server."""
        return {"cni_plugins_url": base.rstrip("/") + CNI_PLUGINS_PATH, "crictl_url": base.rstrip("/") + CRICTL_PATH}


def upstream_version(deb_version: str) -> str:
    """'2.1.9+ds1-5' -> '2.1.9'."""
    m = re.match(r"^(?:\d+:)?(\d+\.\d+\.\d+)", deb_version)
    if not m:
        raise TestbedError(f"cannot read an upstream version from {deb_version!r}")
    return m.group(1)


def fetch_debs(directory: Path | None = None, *, suite: str = SUITE, packages: Sequence[str] = PACKAGES) -> Path:
    """Download ``packages`` (default: containerd and runc) from Debian ``suite`` (default: forky) once, with
    a private apt state directory (the machine's own sources are untouched); return the directory of the
    .debs. Also used for sid's prometheus and promtool (tests/prometheus/releases.py)."""
    target = directory or cache_dir() / f"runtime-{suite}"
    with file_lock(target.with_name(target.name + ".lock"), timeout=900):
        if all(list(target.glob(f"{p}_*.deb")) for p in packages):
            return target
        state = target / "apt"
        for sub in ("etc/sources.list.d", "etc/preferences.d", "lists/partial", "cache/archives/partial"):
            (state / sub).mkdir(parents=True, exist_ok=True)
        (state / "etc/sources.list").write_text(f"deb [signed-by={KEYRING}] {mirror()} {suite} main\n")
        opts = [
            f"-oDir::Etc={state / 'etc'}",
            f"-oDir::State::Lists={state / 'lists'}",
            f"-oDir::Cache={state / 'cache'}",
            f"-oDir::State::status={state / 'status'}",
            "-oAPT::Sandbox::User=root",
        ]
        (state / "status").touch()
        run(["apt-get", *opts, "update"], timeout=600)
        run(["apt-get", *opts, "download", *packages], timeout=600, cwd=target)
    return target


def _deb_field(deb: Path, field: str) -> str:
    return run(["dpkg-deb", "-f", str(deb), field], timeout=30).stdout.strip()


def _members(deb: Path, *inside: str) -> list[bytes]:
    """Files of a .deb, read without unpacking the package onto disk."""
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True, timeout=120).stdout
    out = []
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for name in inside:
            fh = tar.extractfile(f"./{name}")
            if fh is None:
                raise TestbedError(f"{deb.name} has no {name}")
            out.append(fh.read())
    return out


def publish_runtime(server: HttpServer, debs: Path | None = None) -> RuntimeArchives:
    """Repackage forky's containerd and runc as release downloads on ``server``."""
    debs = debs or fetch_debs()
    containerd_deb = sorted(debs.glob("containerd_*.deb"))[-1]
    runc_deb = sorted(debs.glob("runc_*.deb"))[-1]
    arch = _deb_field(containerd_deb, "Architecture")
    cver = upstream_version(_deb_field(containerd_deb, "Version"))
    rver = upstream_version(_deb_field(runc_deb, "Version"))

    archive = server.root / CONTAINERD_PATH.format(version=cver, arch=arch).lstrip("/")
    archive.parent.mkdir(parents=True, exist_ok=True)
    staging = archive.with_suffix(".staging")
    staging.mkdir(exist_ok=True)
    contents = _members(containerd_deb, *(f"usr/bin/{name}" for name in CONTAINERD_BINARIES))
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        for name, content in zip(CONTAINERD_BINARIES, contents, strict=True):
            path = staging / name
            path.write_bytes(content)
            info = tar.gettarinfo(str(path), arcname=f"bin/{name}")
            info.mode, info.uid, info.gid, info.uname, info.gname, info.mtime = 0o755, 0, 0, "root", "root", 0
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    for path in staging.iterdir():
        path.unlink()
    staging.rmdir()
    runc = server.add_file(RUNC_PATH.format(version=rver, arch=arch), _members(runc_deb, "usr/sbin/runc")[0])
    runc_path = server.root / runc.split("/", 3)[3]
    stub = b"#!/bin/sh\necho 'gpustack test bed: CNI plugin stand-in' >&2\nexit 1\n"
    cni = _tarball(server.root / CNI_PLUGINS_PATH.format(version=pins.CNI_PLUGINS_VERSION, arch=arch).lstrip("/"),
                   {f"./{name}": stub for name in CNI_PLUGINS})  # fmt: skip
    crictl = _tarball(server.root / CRICTL_PATH.format(version=pins.CRICTL_VERSION, arch=arch).lstrip("/"),
                      {"crictl": CRICTL_DOUBLE.read_bytes()})  # fmt: skip
    return RuntimeArchives(cver, sha256_of(archive), rver, sha256_of(runc_path), arch, sha256_of(cni),
                           sha256_of(crictl))  # fmt: skip


def _tarball(target: Path, members: dict[str, bytes]) -> Path:
    """A gzipped tar of ``members`` (name -> content, mode 0755, root's, a fixed mtime), like the release archives."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w:gz", compresslevel=1) as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid, info.uname, info.gname = len(content), 0o755, 0, 0, "root", "root"
            info.mtime = 1_700_000_000
            tar.addfile(info, io.BytesIO(content))
    return target
