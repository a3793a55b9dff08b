"""Updates for ``gpustack node patch`` on the test bed (tests/testbed/test_nodes.py): a signed apt archive on the
bed's file server offering newer versions of two packages a host has installed, as a Debian security update does.

- ``gpustack-patch-demo`` 1.0 -> 2.0: an ordinary package;
- ``linux-image-gpustack-test`` 1.0 -> 2.0: a kernel meta package whose 2.0 postinst asks for a reboot as Debian's
  kernel packages do -- ``linux-image-*``'s postinst runs the hooks in /etc/kernel/postinst.d/, where
  update-notifier-common's ``update-notifier`` hook calls ``/usr/share/update-notifier/notify-reboot-required``,
  which writes ``/var/run/reboot-required`` and adds the package to ``/var/run/reboot-required.pkgs``. The bed's
  hosts have neither update-notifier nor a bootable kernel (nspawn boots the outer machine's), so the package
  writes the two files itself and installs no kernel image.

The archive is built with the same tools as a real one (dpkg-deb, apt-ftparchive, gpg: tests/fakes/apt_archive.py)
and put in the host's sources with its own keyring (``signed-by``); the 1.0 packages are installed with dpkg first,
as a host that had them before the update came out.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.fakes.apt_archive import Archive, Pkg, build_archive, build_deb

from .hosts import Host
from .services import HttpServer

SUITE = "gpustack-patch"
DEMO = "gpustack-patch-demo"
KERNEL_META = "linux-image-gpustack-test"
PACKAGES = (DEMO, KERNEL_META)
OLD, NEW = "1.0", "2.0"
KEYRING = "/etc/apt/keyrings/gpustack-patch-test.gpg"
SOURCES = "/etc/apt/sources.list.d/gpustack-patch-test.list"
#: notify-reboot-required's two files (update-notifier-common), written as a kernel package's hook writes them
REBOOT_POSTINST = f"""#!/bin/sh
set -e
# as linux-image-*'s postinst through /etc/kernel/postinst.d/update-notifier (notify-reboot-required)
if [ "$1" = configure ]; then
    echo "*** System restart required ***" > /var/run/reboot-required
    echo "{KERNEL_META}" >> /var/run/reboot-required.pkgs
fi
"""


@dataclass(frozen=True)
class PatchArchive:
    archive: Archive
    #: the 1.0 packages, installed on a host before the archive offers 2.0
    old: tuple[Path, ...]
    base_url: str

    def sources_line(self) -> str:
        return f"deb [signed-by={KEYRING}] {self.archive.line(self.base_url)}\n"

    def install_old(self, host: Host) -> None:
        """The 1.0 packages installed on ``host`` with dpkg, the archive (2.0) added to its apt sources."""
        for deb in self.old:
            host.write_file(f"/root/{deb.name}", deb.read_bytes(), mode=0o600)
        host.write_file(KEYRING, self.archive.keyring.read_bytes())
        host.write_file(SOURCES, self.sources_line())
        debs = " ".join(f"/root/{deb.name}" for deb in self.old)
        host.sudo(f"dpkg -i {debs} && rm -f {debs}", check=True)


def versions(host: Host) -> dict[str, str]:
    """The installed version of each of :data:`PACKAGES` on ``host``."""
    out = host.sudo("dpkg-query -W -f '${Package} ${Version}\\n' " + " ".join(PACKAGES), check=True).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def publish(server: HttpServer, scratch: Path) -> PatchArchive:
    """Build the archive (2.0) under the file server's root and the 1.0 packages under ``scratch``."""
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
    new = [Pkg(DEMO, version=NEW), Pkg(KERNEL_META, version=NEW, postinst=REBOOT_POSTINST)]
    archive = build_archive(server.root / "patch-archive", SUITE, new, arches=(arch,), gnupg=scratch / "gnupg")
    old_dir = scratch / "old"
    old_dir.mkdir(parents=True, exist_ok=True)
    old = tuple(build_deb(Pkg(name, version=OLD), arch, old_dir) for name in PACKAGES)
    return PatchArchive(archive, old, server.url)
