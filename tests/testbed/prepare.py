"""Ready-made ``prepare`` hooks that customise a host's root before it boots.

Each factory returns a :data:`~.hosts.PrepareHook` (a callable taking the host root); combine
several with :func:`compose`. Example::

    Testbed(["cp1"], workdir, prepare=compose(fstab_swap(), fake_node_exporter()))

About ``/proc/modules``: the machine's kernel is built without loadable modules, so its procfs
has no ``modules`` entry, and procfs allows neither creating a file (``nspawn --bind-ro=FILE:
/proc/modules`` fails with "Failed to create mount point /proc/modules") nor stacking an
overlay on it ("overlayfs: maximum fs stacking depth exceeded"). :func:`fake_loaded_modules`
therefore installs a tiny ``LD_PRELOAD`` library through ``/etc/ld.so.preload`` that makes
``open``/``fopen``/``stat``/``access`` of exactly ``/proc/modules`` use a fake file. Every
dynamically linked program in the host (cat, grep, python3 and so Ansible, lsmod via libkmod)
then sees the fake modules; statically linked programs (Go binaries) do not.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

from ._proc import file_lock, run
from .hosts import PrepareHook
from .rootfs import cache_dir

FAKE_MODULES_PATH = "/etc/gpustack-testbed/proc-modules"
PRELOAD_LIB_PATH = "/usr/local/lib/gpustack-testbed/fake-proc-modules.so"


def compose(*hooks: PrepareHook) -> PrepareHook:
    """One hook that runs ``hooks`` in order."""

    def _all(root: Path) -> None:
        for hook in hooks:
            hook(root)

    return _all


def write_files(files: Mapping[str, str], mode: int = 0o644) -> PrepareHook:
    """Write files (absolute in-host path -> text) into the host root."""

    def _write(root: Path) -> None:
        for inside, text in files.items():
            target = root / inside.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            target.chmod(mode)

    return _write


def fstab_swap(line: str = "/swap.img\tnone\tswap\tsw\t0\t0") -> PrepareHook:
    """Append a swap entry to /etc/fstab (swap itself cannot be enabled in a container)."""

    def _swap(root: Path) -> None:
        fstab = root / "etc/fstab"
        text = fstab.read_text() if fstab.exists() else ""
        fstab.write_text(text + ("" if text.endswith("\n") or not text else "\n") + line + "\n")

    return _swap


def boot_unit(name: str, exec_start: str, *, oneshot: bool = False, after: str = "network.target") -> PrepareHook:
    """Install and enable a systemd unit ``<name>.service`` that runs at boot."""
    service_type = "oneshot\nRemainAfterExit=yes" if oneshot else "simple\nRestart=on-failure"
    unit = textwrap.dedent(
        f"""\
        [Unit]
        Description=gpustack test bed: {name}
        After={after}

        [Service]
        Type={service_type}
        ExecStart={exec_start}

        [Install]
        WantedBy=multi-user.target
        """
    )

    def _install(root: Path) -> None:
        unit_dir = root / "etc/systemd/system"
        (unit_dir / f"{name}.service").write_text(unit)
        wants = unit_dir / "multi-user.target.wants"
        wants.mkdir(parents=True, exist_ok=True)
        link = wants / f"{name}.service"
        if not link.is_symlink():
            link.symlink_to(f"/etc/systemd/system/{name}.service")

    return _install


def enable_unit(unit: str, wanted_by: str = "multi-user.target") -> PrepareHook:
    """Unmask and enable a unit the root ships masked (e.g. ``ufw.service``, ``firewalld.service``)."""

    def _enable(root: Path) -> None:
        unit_dir = root / "etc/systemd/system"
        mask = unit_dir / unit
        if mask.is_symlink() and os.readlink(mask) == "/dev/null":
            mask.unlink()
        wants = unit_dir / f"{wanted_by}.wants"
        wants.mkdir(parents=True, exist_ok=True)
        link = wants / unit
        if not link.is_symlink():
            link.symlink_to(f"/lib/systemd/system/{unit}")

    return _enable


def enable_ufw(*commands: str) -> PrepareHook:
    """ufw active from boot: ``ufw.service`` enabled, then (a oneshot unit ordered after it) the
    ``ufw`` commands given, e.g. ``"default deny incoming"``, ``"allow 22/tcp"``, followed by
    ``ufw --force enable`` (which also writes ENABLED=yes to /etc/ufw/ufw.conf)."""
    script = "set -e\n" + "".join(f"/usr/sbin/ufw {c}\n" for c in commands) + "/usr/sbin/ufw --force enable\n"
    return compose(
        enable_unit("ufw.service"),
        write_files({"/usr/local/sbin/gpustack-testbed-ufw-setup": "#!/bin/sh\n" + script}, mode=0o755),
        boot_unit(
            "gpustack-testbed-ufw-setup",
            "/usr/local/sbin/gpustack-testbed-ufw-setup",
            oneshot=True,
            after="ufw.service",
        ),
    )


def enable_firewalld() -> PrepareHook:
    """firewalld running from boot with its stock configuration (nftables backend, default zone
    ``public``)."""
    return compose(
        enable_unit("firewalld.service"),
        enable_unit_alias("firewalld.service", "dbus-org.fedoraproject.FirewallD1.service"),
    )


def enable_unit_alias(unit: str, alias: str) -> PrepareHook:
    """The ``Alias=`` symlink ``systemctl enable`` would create for ``unit``."""

    def _alias(root: Path) -> None:
        link = root / "etc/systemd/system" / alias
        if not link.is_symlink():
            link.symlink_to(f"/lib/systemd/system/{unit}")

    return _alias


def boot_iptables_rule(*rule: str, name: str = "gpustack-testbed-foreign-rule") -> PrepareHook:
    """Add an iptables rule at boot (a oneshot unit), e.g. a foreign rule the product must keep.

    ``rule`` is the iptables argument list, e.g. ``("-A", "INPUT", "-p", "tcp", "--dport",
    "7777", "-j", "ACCEPT")``.
    """
    return boot_unit(name, "/usr/sbin/iptables -w " + shlex.join(rule), oneshot=True)


def fake_node_exporter(port: int = 9100, name: str = "fake-node-exporter") -> PrepareHook:
    """Something listening on 0.0.0.0:<port> that answers /metrics like node_exporter."""
    docroot = f"/var/lib/{name}"
    metrics = "# HELP node_fake 1 if this is the test bed's fake node_exporter\nnode_fake 1\n"
    exec_start = f"/usr/bin/python3 -m http.server --bind 0.0.0.0 --directory {docroot} {port}"
    return compose(write_files({f"{docroot}/metrics": metrics}), boot_unit(name, exec_start))


def fake_loaded_modules(modules: Iterable[str] = ("nouveau",)) -> PrepareHook:
    """Make ``/proc/modules`` inside the host list ``modules`` (see the module docstring).

    The fake content lives in ``/etc/gpustack-testbed/proc-modules``; a test may rewrite it
    (``host.write_file``) to simulate unloading a module.
    """
    lines = "".join(f"{m} 2764800 0 - Live 0x0000000000000000\n" for m in modules)
    library = build_preload_library()

    def _fake(root: Path) -> None:
        target = root / PRELOAD_LIB_PATH.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(library, target)
        target.chmod(0o755)
        fake = root / FAKE_MODULES_PATH.lstrip("/")
        fake.parent.mkdir(parents=True, exist_ok=True)
        fake.write_text(lines)
        preload = root / "etc/ld.so.preload"
        existing = preload.read_text() if preload.exists() else ""
        if PRELOAD_LIB_PATH not in existing:
            preload.write_text(existing + PRELOAD_LIB_PATH + "\n")

    return _fake


_PRELOAD_C = r"""
/* gpustack test bed: redirect every access to /proc/modules to a fake file. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define REAL "/proc/modules"
#define FAKE "@FAKE@"

static const char *swap(const char *p) {
    return (p != NULL && strcmp(p, REAL) == 0) ? FAKE : p;
}

#define NEXT(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

#define OPEN_LIKE(name)                                                      \
    int name(const char *p, int flags, ...) {                              \
        mode_t mode = 0;                                                    \
        if (flags & (O_CREAT | O_TMPFILE)) {                                \
            va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); \
        }                                                                   \
        return NEXT(name)(swap(p), flags, mode);                            \
    }
#define OPENAT_LIKE(name)                                                    \
    int name(int d, const char *p, int flags, ...) {                       \
        mode_t mode = 0;                                                    \
        if (flags & (O_CREAT | O_TMPFILE)) {                                \
            va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); \
        }                                                                   \
        return NEXT(name)(d, swap(p), flags, mode);                         \
    }

OPEN_LIKE(open)
OPEN_LIKE(open64)
OPENAT_LIKE(openat)
OPENAT_LIKE(openat64)

int __open_2(const char *p, int f) { return NEXT(__open_2)(swap(p), f); }
int __open64_2(const char *p, int f) { return NEXT(__open64_2)(swap(p), f); }
int __openat_2(int d, const char *p, int f) { return NEXT(__openat_2)(d, swap(p), f); }
int __openat64_2(int d, const char *p, int f) { return NEXT(__openat64_2)(d, swap(p), f); }
FILE *fopen(const char *p, const char *m) { return NEXT(fopen)(swap(p), m); }
FILE *fopen64(const char *p, const char *m) { return NEXT(fopen64)(swap(p), m); }
int stat(const char *p, struct stat *s) { return NEXT(stat)(swap(p), s); }
int stat64(const char *p, struct stat64 *s) { return NEXT(stat64)(swap(p), s); }
int lstat(const char *p, struct stat *s) { return NEXT(lstat)(swap(p), s); }
int lstat64(const char *p, struct stat64 *s) { return NEXT(lstat64)(swap(p), s); }
int fstatat(int d, const char *p, struct stat *s, int f) { return NEXT(fstatat)(d, swap(p), s, f); }
int fstatat64(int d, const char *p, struct stat64 *s, int f) {
    return NEXT(fstatat64)(d, swap(p), s, f);
}
int statx(int d, const char *p, int f, unsigned int m, struct statx *s) {
    return NEXT(statx)(d, swap(p), f, m, s);
}
int access(const char *p, int m) { return NEXT(access)(swap(p), m); }
int faccessat(int d, const char *p, int m, int f) { return NEXT(faccessat)(d, swap(p), m, f); }
"""


def build_preload_library() -> Path:
    """Compile the /proc/modules redirect library once (cached next to the root)."""
    source = _PRELOAD_C.replace("@FAKE@", FAKE_MODULES_PATH)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    library = cache / f"fake-proc-modules-{digest}.so"
    if library.exists():
        return library
    with file_lock(cache / "fake-proc-modules.lock", timeout=300):
        if library.exists():
            return library
        src = cache / f"fake-proc-modules-{digest}.c"
        src.write_text(source)
        tmp = cache / f"fake-proc-modules-{digest}.{os.getpid()}.so"
        run(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-o", str(tmp), str(src), "-ldl"], timeout=120)
        tmp.rename(library)
    return library
