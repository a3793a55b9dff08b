"""A Debian-style apt archive the bundle tests build and serve on loopback: ``dists/<suite>/main/
binary-<arch>/Packages`` and a signed ``InRelease`` (dpkg-deb, apt-ftparchive and gpg, as a real
archive is made), holding small packages with the names and dependencies the tests give. The
packages are empty (a doc file each) and versioned ``0.0.1+gpustack.test``: older than anything
a real host has installed, so installing them on a test host changes nothing there.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

TEST_VERSION = "0.0.1+gpustack.test"


@dataclass(frozen=True)
class Pkg:
    name: str
    depends: str = ""
    essential: bool = False
    version: str = TEST_VERSION
    #: the package's DEBIAN/postinst (a shell script), none when empty
    postinst: str = ""


@dataclass(frozen=True)
class Archive:
    root: Path
    suite: str
    keyring: Path  # binary keyring for signed-by
    fingerprint: str

    def line(self, base_url: str) -> str:
        """The sources line ``URL SUITE main`` for gpustack.yaml's sources.os_apt."""
        return f"{base_url.rstrip('/')}/{self.root.name}/ {self.suite} main"


def run(argv: Sequence[str], cwd: Path | None = None) -> str:
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, cwd=cwd, timeout=120).stdout


def gpg_home(home: Path) -> Path:
    """The GnuPG home to use for ``home``: ``home`` itself, or a short stand-in under /tmp when its path is too
    long for gpg-agent's socket (108 bytes): a test must not depend on where the clone or pytest's temp dir is."""
    if len(str(home)) <= 60:
        return home
    short = Path("/tmp") / f"gs-gpg-{hashlib.sha256(str(home).encode()).hexdigest()[:16]}"
    short.mkdir(mode=0o700, exist_ok=True)
    return short


def gpg_key(home: Path, uid: str) -> str:
    """An ed25519 signing key in ``home`` (made on first use); its fingerprint."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    base = ["gpg", "--homedir", str(gpg_home(home)), "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    listing = run([*base, "--with-colons", "--list-secret-keys"])
    if "fpr:" not in listing:
        run([*base, "--quick-gen-key", uid, "ed25519", "sign", "never"])
        listing = run([*base, "--with-colons", "--list-secret-keys"])
    return next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))


def build_deb(pkg: Pkg, arch: str, out_dir: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="gs-deb-") as tmp:
        tree = Path(tmp) / pkg.name
        (tree / "DEBIAN").mkdir(parents=True)
        doc = tree / "usr/share/doc" / pkg.name / "gpustack-test"
        doc.parent.mkdir(parents=True)
        doc.write_text(f"{pkg.name} {pkg.version}: a gpustack test package\n")
        fields = {
            "Package": pkg.name,
            "Version": pkg.version,
            "Architecture": arch,
            "Maintainer": "gpustack tests <tests@invalid>",
            "Priority": "optional",
            "Section": "misc",
        }
        if pkg.depends:
            fields["Depends"] = pkg.depends
        if pkg.essential:
            fields["Essential"] = "yes"
        fields["Description"] = f"{pkg.name} (gpustack test package)"
        (tree / "DEBIAN/control").write_text("".join(f"{k}: {v}\n" for k, v in fields.items()))
        if pkg.postinst:
            (tree / "DEBIAN/postinst").write_text(pkg.postinst)
            (tree / "DEBIAN/postinst").chmod(0o755)
        deb = out_dir / f"{pkg.name}_{pkg.version}_{arch}.deb"
        run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(deb)])
    return deb


def build_archive(
    root: Path, suite: str, packages: Iterable[Pkg], *, arches: Sequence[str] = ("amd64",), gnupg: Path
) -> Archive:
    """Write the archive under ``root`` (served as ``<base>/<root.name>/``), signed by the key in ``gnupg``."""
    if root.exists():
        shutil.rmtree(root)
    pool = root / "pool" / "main"
    pool.mkdir(parents=True)
    for pkg in packages:
        for arch in arches:
            build_deb(pkg, arch, pool)
    for arch in arches:
        binary = root / "dists" / suite / "main" / f"binary-{arch}"
        binary.mkdir(parents=True)
        listing = run(["apt-ftparchive", "--arch", arch, "packages", "pool"], cwd=root)
        (binary / "Packages").write_text(listing)
        run(["gzip", "-9kf", str(binary / "Packages")])
    release = run(
        [
            "apt-ftparchive",
            "-o", f"APT::FTPArchive::Release::Suite={suite}",
            "-o", f"APT::FTPArchive::Release::Codename={suite}",
            "-o", "APT::FTPArchive::Release::Components=main",
            "-o", f"APT::FTPArchive::Release::Architectures={' '.join(arches)}",
            "release", f"dists/{suite}",
        ],
        cwd=root,
    )  # fmt: skip
    (root / "dists" / suite / "Release").write_text(release)
    fingerprint = gpg_key(gnupg, "gpustack test archive <tests@invalid>")
    base = [
        "gpg",
        "--homedir",
        str(gpg_home(gnupg)),
        "--batch",
        "--yes",
        "--pinentry-mode",
        "loopback",
        "--passphrase",
        "",
    ]
    run(
        [*base, "--clearsign", "-o", str(root / "dists" / suite / "InRelease"), str(root / "dists" / suite / "Release")]
    )
    keyring = root.parent / f"{root.name}-keyring.gpg"
    run([*base, "--output", str(keyring), "--export", fingerprint])
    return Archive(root, suite, keyring, fingerprint)
