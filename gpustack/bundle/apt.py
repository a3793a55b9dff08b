"""apt packages for a bundle: resolved and downloaded by apt itself, then published as signed flat
repositories the nodes trust through a keyring with ``signed-by``.

Resolution: ``apt-get`` with a private configuration (its own sources.list, lists, cache and an
EMPTY dpkg status, so every dependency down to libc is resolved as on a bare system), for the
target architecture, from the release's archive (``deb [signed-by=<archive keyring>] ...``) and
the Kubernetes repository (whose key's fingerprint is checked against the pin first). apt checks
every index's signature and every package's sha256, as it does on a node. The Kubernetes
packages and what they pull from the OS are resolved together, so the OS repository holds the
kubelet's dependencies too. apt runs on the connected machine, which needs apt, dpkg-deb and gpg
(any Debian or Ubuntu machine); it never installs anything there.

Publication: per repository a flat layout (``deb [signed-by=...] URL /``): the .deb files,
``Packages`` (each package's control fields, as dpkg-deb reads them, with Filename, Size and
SHA256), ``Packages.gz``, ``Release`` (their sha256) and its signatures ``InRelease`` and
``Release.gpg``, made with an ed25519 key generated for this index and then thrown away; its
public half is ``Release.key``. Nobody holds a key that could sign another index: a repository
whose packages change is signed again with a new key (docs/decisions.md).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from gpustack.bundle.fetch import atomic_writer
from gpustack.errors import GpustackError

APT_TIMEOUT = 1800


class AptError(GpustackError):
    """apt could not resolve or download a repository's packages (names the repository)."""

    exit_code = 1


@dataclass(frozen=True)
class Source:
    """One apt source: ``URL SUITE COMPONENT...`` or a flat ``URL /``, verified with ``keyring``."""

    line: str
    keyring: str

    def deb_line(self, arch: str) -> str:
        url, *rest = self.line.split()
        return f"deb [arch={arch} signed-by={self.keyring}] {url} {' '.join(rest) or '/'}"


@dataclass(frozen=True)
class Deb:
    name: str
    version: str
    arch: str
    url: str  # where apt got it
    path: Path  # the downloaded file (in apt's cache)


def _run(argv: Sequence[str], *, what: str, timeout: float = APT_TIMEOUT, env: Mapping[str, str] | None = None) -> str:
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
        )
    except FileNotFoundError:
        raise AptError(
            f"{what}: {argv[0]} is not installed", hint="bundle create needs apt, dpkg-deb and gpg"
        ) from None
    except subprocess.TimeoutExpired:
        raise AptError(f"{what}: {argv[0]} took longer than {timeout:.0f}s") from None
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stdout + "\n" + proc.stderr).splitlines() if ln.strip()]
        tail = "\n".join(lines[-15:])
        raise AptError(f"{what}: {' '.join(argv[:3])} ... failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


class AptRoot:
    """A private apt configuration under ``root`` for one architecture."""

    def __init__(self, root: Path, arch: str) -> None:
        self.root, self.arch = root, arch
        for sub in ("etc/apt/sources.list.d", "etc/apt/preferences.d", "lists/partial", "archives/partial", "log"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "status").write_text("")

    def options(self) -> list[str]:
        r = self.root
        opts = {
            "Dir::Etc": f"{r}/etc/apt/",
            "Dir::Etc::SourceList": f"{r}/etc/apt/sources.list",
            "Dir::Etc::SourceParts": f"{r}/etc/apt/sources.list.d/",
            "Dir::Etc::Preferences": f"{r}/etc/apt/preferences",
            "Dir::Etc::PreferencesParts": f"{r}/etc/apt/preferences.d/",
            "Dir::State": f"{r}/",
            "Dir::State::Lists": f"{r}/lists/",
            "Dir::State::status": f"{r}/status",
            "Dir::Cache": f"{r}/",
            "Dir::Cache::archives": f"{r}/archives/",
            "Dir::Log": f"{r}/log/",
            "APT::Architecture": self.arch,
            "APT::Architectures": self.arch,
            "APT::Install-Recommends": "false",
            "APT::Install-Suggests": "false",
            "Acquire::Languages": "none",
            "Debug::NoLocking": "true",
        }
        if os.geteuid() == 0:
            opts["APT::Sandbox::User"] = "root"  # the private root need not be readable by _apt
        out = []
        for key, value in opts.items():
            out += ["-o", f"{key}={value}"]
        return out

    def apt_get(self, *args: str, what: str, extra: Sequence[str] = ()) -> str:
        argv = ["apt-get", *self.options(), *extra, "-q", *args]
        return _run(argv, what=what, env={"DEBIAN_FRONTEND": "noninteractive"})

    def resolve(self, sources: Sequence[Source], packages: Sequence[str], *, what: str) -> list[Deb]:
        """Every package (with all dependencies) for an empty system, downloaded and verified by apt."""
        (self.root / "etc/apt/sources.list").write_text("".join(s.deb_line(self.arch) + "\n" for s in sources))
        self.apt_get("update", what=f"{what}: apt-get update")
        # against an empty cache directory: apt leaves out what its cache already holds
        probe = self.root / "uris-probe"
        (probe / "partial").mkdir(parents=True, exist_ok=True)
        listing = self.apt_get(
            "install", "--print-uris", "--yes", "--allow-downgrades", *packages,
            what=f"{what}: resolving packages", extra=["-o", f"Dir::Cache::archives={probe}/"],
        )  # fmt: skip
        uris = {}
        for line in listing.splitlines():
            if line.startswith("'"):
                url, filename = line.split("'")[1], line.split("'")[2].split()[0]
                uris[filename] = url
        self.apt_get(
            "install", "--download-only", "--yes", "--allow-downgrades", *packages, what=f"{what}: downloading"
        )
        debs = []
        for filename, url in sorted(uris.items()):
            path = self.root / "archives" / filename
            if not path.is_file():
                raise AptError(f"{what}: apt reported {filename} but did not download it")
            name, version, arch = _deb_fields(path)
            debs.append(Deb(name, version, arch, url, path))
        return debs


def _deb_fields(path: Path) -> tuple[str, str, str]:
    out = _run(
        ["dpkg-deb", "--show", "--showformat=${Package}\\t${Version}\\t${Architecture}", str(path)], what=path.name
    )
    name, version, arch = out.strip().split("\t")
    return name, version, arch


def key_fingerprints(key_file: Path) -> list[str]:
    """Primary-key fingerprints of an (armoured or binary) OpenPGP key file; nothing imported."""
    with tempfile.TemporaryDirectory(prefix="gs-gpg-") as home:
        out = _run(
            ["gpg", "--homedir", home, "--batch", "--no-tty", "--with-colons", "--show-keys", str(key_file)],
            what=f"reading {key_file.name}",
        )
    fprs, want_next = [], False
    for line in out.splitlines():
        kind = line.split(":", 1)[0]
        if kind == "pub":
            want_next = True
        elif kind == "fpr" and want_next:
            fprs.append(line.split(":")[9])
            want_next = False
    return fprs


# --- a flat repository -----------------------------------------------------------------------------


def control_stanza(deb: Path, filename: str) -> str:
    """The Packages stanza of a .deb: its control fields, then Filename, Size and SHA256."""
    fields = _run(["dpkg-deb", "--field", str(deb)], what=deb.name).rstrip("\n")
    digest = hashlib.sha256(deb.read_bytes()).hexdigest()
    return f"{fields}\nFilename: {filename}\nSize: {deb.stat().st_size}\nSHA256: {digest}\n"


def write_index(repo: Path, debs: Sequence[Path], *, label: str, arches: Sequence[str]) -> list[str]:
    """Packages, Packages.gz and Release of a flat repository holding ``debs`` (files in ``repo``);
    returns the index file names written."""
    stanzas = [control_stanza(d, d.name) for d in sorted(debs, key=lambda p: p.name)]
    packages = "\n".join(stanzas).encode()
    compressed = gzip.compress(packages, mtime=0)
    release_lines = [
        "Origin: gpustack bundle",
        f"Label: {label}",
        f"Architectures: {' '.join(sorted(set(arches)))}",
        f"Date: {datetime.now(timezone.utc).strftime('%a, %d %b %Y %H:%M:%S UTC')}",
        "SHA256:",
    ]
    for name, data in (("Packages", packages), ("Packages.gz", compressed)):
        release_lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    for name, data in (
        ("Packages", packages),
        ("Packages.gz", compressed),
        ("Release", ("\n".join(release_lines) + "\n").encode()),
    ):
        with atomic_writer(repo / name) as fh:
            fh.write(data)
    return ["Packages", "Packages.gz", "Release"]


def sign(repo: Path, *, label: str) -> str:
    """Sign ``repo/Release`` with a fresh ed25519 key (InRelease, Release.gpg), write its public
    key as ``Release.key`` and forget the secret key; returns the fingerprint."""
    home = tempfile.mkdtemp(prefix="gs-gpg-")
    try:
        base = ["gpg", "--homedir", home, "--batch", "--no-tty", "--pinentry-mode", "loopback", "--passphrase", ""]
        uid = f"gpustack bundle {label} ({datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC)"
        _run([*base, "--quick-gen-key", uid, "ed25519", "sign", "never"], what=f"{label}: signing key")
        listing = _run([*base, "--with-colons", "--list-secret-keys"], what=f"{label}: signing key")
        fpr = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        release = str(repo / "Release")
        for out, mode in (("InRelease", "--clearsign"), ("Release.gpg", "--detach-sign")):
            tmp = repo / f".{out}.partial"
            _run(
                [*base, "--local-user", fpr, "--digest-algo", "SHA512", "--armor", mode, "-o", str(tmp), release],
                what=f"{label}: {out}",
            )
            os.replace(tmp, repo / out)
        key = _run([*base, "--armor", "--export", fpr], what=f"{label}: Release.key")
        with atomic_writer(repo / "Release.key") as fh:
            fh.write(key.encode())
        return fpr
    finally:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)
