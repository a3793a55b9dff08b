"""Build (once) and cache Debian root file systems for the test hosts: Debian 12 (bookworm, the
default) and Debian 13 (trixie), one cached root per suite.

The root is made with ``debootstrap --variant=minbase`` and completed with ``chroot apt-get``
while it is not booted. It holds nothing host-specific: SSH host keys, ``/etc/machine-id``,
``/etc/hostname`` and authorized keys are written into each host's own copy (see
:mod:`.hosts`).

The cached root lives in ``<cache>/rootfs-v1`` where ``<cache>`` is the directory named by the
environment variable ``GPUSTACK_TESTBED_CACHE`` (default ``/var/cache/gpustack-testbed``); the
build lock, build log and the compiled /proc/modules fake live next to it. A stamp file
inside records a hash of everything that shapes the root; when it differs the root is rebuilt.
Builds go to a temporary sibling directory that is renamed into place, under an exclusive
lock, so a crashed or concurrent build never leaves a half-made root behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ._proc import TestbedError, file_lock, run

DEFAULT_CACHE = Path("/var/cache/gpustack-testbed")
ROOTFS_NAME = "rootfs-v1"
SUITE = "bookworm"
#: suite -> cached root name (bookworm keeps its historical name, so its cache stays valid)
ROOTFS_NAMES = {"bookworm": ROOTFS_NAME, "trixie": "rootfs-trixie-v1"}
DEFAULT_MIRROR = "http://deb.debian.org/debian"
STAMP_NAME = ".gpustack-testbed-stamp"
SCHEMA = 3

#: Packages installed into the root. python3-apt is what Ansible's apt module needs; the rest
#: are what kubeadm-style playbooks touch (sysctl, iptables, mount, systemd, containerd ...).
#: libpam-systemd is not listed, but another package depends on it and brings it: every SSH login as a
#: new user starts a ``user@UID.service`` manager whose stop can hang power-off in the container for
#: 30 s and more; each host bounds that stop (hosts.py, ``_personalise``).
PACKAGES: tuple[str, ...] = (
    "systemd",
    "systemd-sysv",
    "systemd-timesyncd",
    "dbus",
    "openssh-server",
    "sudo",
    "python3",
    "python3-apt",
    "iproute2",
    "iptables",
    "iputils-ping",
    "kmod",
    "procps",
    "psmisc",
    "containerd",
    "ca-certificates",
    "curl",
    "gnupg",
    "apt-transport-https",
    "conntrack",
    "socat",
    "ethtool",
    "ebtables",
    "util-linux",
    "mount",
    "e2fsprogs",
    "lsb-release",
    "pciutils",
    "tar",
    "gzip",
    # host firewalls the firewall role must coexist with; installed but masked (see
    # FIREWALL_UNITS), a test enables one with prepare.enable_ufw() / enable_firewalld()
    "ufw",
    "firewalld",
)

#: Firewall services present in the root but masked, so ordinary hosts run without them.
FIREWALL_UNITS: tuple[str, ...] = ("ufw.service", "firewalld.service")

#: Units that have no business running in a throwaway container (the apt timers would grab the
#: dpkg lock in the middle of a test run; systemd-update-utmp, which only records boot in
#: /var/log/wtmp, and systemd-tmpfiles-setup-dev, whose static device nodes systemd-nspawn
#: already provides, each failed once under load and left a host "degraded" for no product
#: reason).
MASKED_UNITS: tuple[str, ...] = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "apt-daily.service",
    "apt-daily-upgrade.service",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "console-getty.service",
    "getty@.service",
    "systemd-networkd-wait-online.service",
    "systemd-update-utmp.service",
    "systemd-update-utmp-runlevel.service",
    "systemd-tmpfiles-setup-dev.service",
    "systemd-tmpfiles-setup-dev-early.service",
)

SSHD_DROP_IN = textwrap.dedent(
    """\
    # gpustack test bed: key authentication only, quick logins, many parallel sessions.
    PasswordAuthentication no
    KbdInteractiveAuthentication no
    PermitRootLogin prohibit-password
    UseDNS no
    MaxStartups 100:30:200
    MaxSessions 100
    """
)

SYSTEMD_DROP_IN = textwrap.dedent(
    """\
    # gpustack test bed: never let a hanging unit stall power-off or boot for long.
    [Manager]
    DefaultTimeoutStopSec=15s
    DefaultTimeoutStartSec=180s
    """
)

APT_SOURCES_NOTE = textwrap.dedent(
    """\
    # gpustack test bed: test hosts have no route to the Debian archive, so no Debian source is
    # configured here. Everything the hosts need from Debian is pre-installed in the root.
    """
)


def cache_dir() -> Path:
    """The test bed's cache directory (``GPUSTACK_TESTBED_CACHE`` or the default)."""
    override = os.environ.get("GPUSTACK_TESTBED_CACHE")
    return Path(override).resolve() if override else DEFAULT_CACHE


def rootfs_dir(suite: str = SUITE) -> Path:
    """Where the cached root of ``suite`` lives: ``<cache>/rootfs-v1`` for bookworm."""
    return cache_dir() / ROOTFS_NAMES[suite]


def mirror() -> str:
    """The Debian mirror used by debootstrap (``GPUSTACK_TESTBED_MIRROR`` or deb.debian.org)."""
    return os.environ.get("GPUSTACK_TESTBED_MIRROR", DEFAULT_MIRROR)


def stamp_value(suite: str = SUITE) -> str:
    """Hash of every input that shapes the root; a change triggers a rebuild."""
    recipe = {
        "schema": SCHEMA,
        "suite": suite,
        "mirror": mirror(),
        "packages": sorted(PACKAGES),
        "masked": sorted(MASKED_UNITS),
        "firewalls": sorted(FIREWALL_UNITS),
        "sshd": SSHD_DROP_IN,
        "systemd": SYSTEMD_DROP_IN,
        "sources": APT_SOURCES_NOTE,
    }
    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()
    return f"schema={SCHEMA} sha256={digest}\n"


def is_current(root: Path, suite: str = SUITE) -> bool:
    """True when ``root`` is a finished build of the current recipe."""
    stamp = root / STAMP_NAME
    return stamp.is_file() and stamp.read_text() == stamp_value(suite)


def ensure_rootfs(target: Path | None = None, *, log: Path | None = None, suite: str = SUITE) -> Path:
    """Return a ready root file system, building it first when missing or outdated.

    ``log`` receives the output of debootstrap and apt (default: ``<target>.build.log``).
    A build takes a few minutes and needs deb.debian.org; later calls return at once.
    """
    root = target or rootfs_dir(suite)
    if is_current(root, suite):
        return root
    with file_lock(root.with_name(root.name + ".lock"), timeout=3600):
        if is_current(root, suite):  # another process finished it while we waited
            return root
        _build_and_swap(root, log or root.with_name(root.name + ".build.log"), suite)
    return root


def _build_and_swap(root: Path, log: Path, suite: str = SUITE) -> None:
    """Build a fresh root next to ``root`` and rename it into place atomically."""
    parent = root.parent
    parent.mkdir(parents=True, exist_ok=True)
    for stale in parent.glob(f"{root.name}.build-*"):
        _remove_tree(stale)
    for stale in parent.glob(f"{root.name}.old-*"):
        _remove_tree(stale)
    build = parent / f"{root.name}.build-{os.getpid()}"
    log.write_text("")
    try:
        _debootstrap(build, log, suite)
        with _chroot_mounts(build):
            _install_packages(build, log)
            _configure(build, log)
        _scrub_host_specific(build)
        (build / STAMP_NAME).write_text(stamp_value(suite))
    except BaseException:
        _remove_tree(build)
        raise
    old = parent / f"{root.name}.old-{os.getpid()}"
    if root.exists():
        root.rename(old)
    build.rename(root)
    _remove_tree(old)


def _logged(cmd: list[str], log: Path, *, timeout: float) -> None:
    """Run a build step, appending its output to the build log."""
    proc = run(cmd, timeout=timeout, check=False, env=_chroot_env())
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode != 0:
        raise TestbedError(
            f"rootfs build step failed (rc={proc.returncode}): {' '.join(cmd)}\n"
            f"{proc.stderr[-3000:]}\n(full log: {log})"
        )


def _chroot_env() -> dict[str, str]:
    """A neutral environment for debootstrap and chroot commands."""
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "DEBIAN_FRONTEND": "noninteractive",
        "LC_ALL": "C",
        "HOME": "/root",
    }


def _debootstrap(build: Path, log: Path, suite: str = SUITE) -> None:
    """Create the minimal Debian tree."""
    cmd = ["debootstrap", "--variant=minbase", suite, str(build), mirror()]
    _logged(cmd, log, timeout=1800)


@contextmanager
def _chroot_mounts(build: Path) -> Iterator[None]:
    """Mount /proc, /sys and /dev into the tree while apt runs in it; never start services."""
    policy = build / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    mounted: list[Path] = []
    try:
        for fstype, src, dst in (("proc", "proc", "proc"), ("sysfs", "sysfs", "sys")):
            run(["mount", "-t", fstype, src, str(build / dst)], timeout=30)
            mounted.append(build / dst)
        run(["mount", "--bind", "/dev", str(build / "dev")], timeout=30)
        mounted.append(build / "dev")
        yield
    finally:
        for path in reversed(mounted):
            if run(["umount", str(path)], timeout=30, check=False).returncode != 0:
                run(["umount", "-l", str(path)], timeout=30, check=False)
        policy.unlink(missing_ok=True)


def _install_packages(build: Path, log: Path) -> None:
    """apt-get install the package list inside the tree (network of the outer machine)."""
    chroot = ["chroot", str(build)]
    _logged([*chroot, "apt-get", "update"], log, timeout=600)
    install = [*chroot, "apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]
    _logged(install, log, timeout=1800)
    _logged([*chroot, "apt-get", "clean"], log, timeout=120)


def _configure(build: Path, log: Path) -> None:
    """Users, sudo, sshd, enabled and masked units."""
    chroot = ["chroot", str(build)]
    _logged([*chroot, "useradd", "-m", "-s", "/bin/bash", "-G", "sudo", "gpustack"], log, timeout=60)
    _logged([*chroot, "passwd", "-l", "root"], log, timeout=60)
    sudoers = build / "etc/sudoers.d/gpustack"
    sudoers.write_text("gpustack ALL=(ALL) NOPASSWD:ALL\n")
    sudoers.chmod(0o440)
    (build / "etc/ssh/sshd_config.d/gpustack-testbed.conf").write_text(SSHD_DROP_IN)
    system_conf = build / "etc/systemd/system.conf.d"
    system_conf.mkdir(parents=True, exist_ok=True)
    (system_conf / "gpustack-testbed.conf").write_text(SYSTEMD_DROP_IN)
    for home, owner in ((build / "root", "root"), (build / "home/gpustack", "gpustack")):
        ssh_dir = home / ".ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        _logged([*chroot, "chown", f"{owner}:{owner}", f"/{ssh_dir.relative_to(build)}"], log, timeout=30)
    _logged([*chroot, "systemctl", "enable", "ssh.service", "containerd.service"], log, timeout=60)
    _logged([*chroot, "systemctl", "mask", *MASKED_UNITS], log, timeout=60)
    _logged([*chroot, "systemctl", "disable", *FIREWALL_UNITS], log, timeout=60)
    _logged([*chroot, "systemctl", "mask", *FIREWALL_UNITS], log, timeout=60)
    (build / "etc/apt/sources.list").write_text(APT_SOURCES_NOTE)
    _remove_tree(build / "var/lib/apt/lists")
    (build / "var/lib/apt/lists/partial").mkdir(parents=True)


def _scrub_host_specific(build: Path) -> None:
    """Remove everything that must differ between hosts; each host copy gets its own."""
    for key in (build / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (build / "etc/machine-id").write_text("")
    (build / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    (build / "var/lib/systemd/random-seed").unlink(missing_ok=True)
    (build / "var/lib/systemd/credential.secret").unlink(missing_ok=True)
    (build / "etc/hostname").write_text("localhost\n")
    resolv = build / "etc/resolv.conf"
    if resolv.is_symlink() or resolv.exists():
        resolv.unlink()
    resolv.write_text("# gpustack test bed: no DNS server; names come from /etc/hosts\n")


def _remove_tree(path: Path) -> None:
    """Remove a directory tree that may contain (stale) mount points."""
    if not path.exists() and not path.is_symlink():
        return
    for sub in ("proc", "sys", "dev"):
        mnt = path / sub
        if os.path.ismount(mnt):
            run(["umount", "-l", str(mnt)], timeout=30, check=False)
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        run(["rm", "-rf", "--one-file-system", str(path)], timeout=300)
