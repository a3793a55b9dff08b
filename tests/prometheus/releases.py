"""Which real Prometheus the tests run: the newest and the oldest release doctor/verify/report support.

- ``newest``: Debian sid's ``prometheus`` and ``promtool`` packages (3.x: the major kube-prometheus-stack
  deploys, :data:`gpustack.config.pins.KUBE_PROMETHEUS_STACK_PROMETHEUS`), downloaded once from Debian's
  archive with a private apt state directory and unpacked into the test-bed cache
  (:func:`tests.testbed.runtime.fetch_debs`, then ``dpkg-deb -x``; a file lock serialises concurrent
  pytest processes). Debian builds them against an older glibc than sid's own, so they run on Debian 12.
- ``oldest``: Debian 12's ``prometheus`` package (2.42, ``/usr/bin/prometheus``; scripts/test.sh installs it):
  the oldest release docs/operations.md ("Prometheus versions") supports.

Every test in tests/prometheus that starts Prometheus gets one through the ``prometheus_release`` fixture
(tests/prometheus/conftest.py): ``newest`` by default, ``oldest`` as well for the tests marked
``both_prometheus`` (what differs between the releases: rule groups, healthy verify/doctor, the report).
``GPUSTACK_TEST_PROMETHEUS=oldest`` (or ``newest,oldest``) runs every such test on the releases named.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.testbed._proc import file_lock, run
from tests.testbed.rootfs import cache_dir
from tests.testbed.runtime import fetch_debs

SUITE = "sid"
PACKAGES = ("prometheus", "promtool")
NAMES = ("newest", "oldest")
ENV = "GPUSTACK_TEST_PROMETHEUS"
#: where Debian 12's package (the oldest supported release) installs its binaries
SYSTEM_ROOT = Path("/")


class ReleaseUnavailable(RuntimeError):
    """A Prometheus release the tests need is not installed and could not be fetched."""


@dataclass(frozen=True)
class Release:
    """One Prometheus release: its binaries under ``root`` (``usr/bin/prometheus``, ``usr/bin/promtool``)."""

    name: str  # "newest" / "oldest"
    root: Path
    origin: str  # where the binaries come from, for messages

    @property
    def prometheus(self) -> str:
        return str(self.root / "usr/bin/prometheus")

    @property
    def promtool(self) -> str:
        return str(self.root / "usr/bin/promtool")

    def missing(self) -> list[str]:
        return [path for path in (self.prometheus, self.promtool) if shutil.which(path) is None]

    @functools.cached_property
    def version(self) -> str:
        """``prometheus --version``'s version ('3.5.3+ds1')."""
        out = subprocess.run([self.prometheus, "--version"], capture_output=True, text=True, timeout=30, check=True)
        m = re.search(r"version (\S+)", out.stdout + out.stderr)
        if not m:
            raise ReleaseUnavailable(f"{self.prometheus} --version printed no version: {out.stdout!r}")
        return m.group(1)

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", self.version)[:3])

    def __str__(self) -> str:
        return f"Prometheus {self.version} ({self.name}: {self.origin})"


def sid_cache() -> Path:
    """Where sid's packages and their unpacked tree are cached (beside the test bed's other downloads)."""
    return cache_dir() / "prometheus-sid"


def unpacked(debs: Path) -> Path:
    """``dpkg-deb -x`` every package of ``debs`` into ``debs/root`` once (atomically: a half-unpacked tree is
    never used); return that root."""
    root = debs / "root"
    with file_lock(debs.with_name(debs.name + ".unpack.lock"), timeout=300):
        if all((root / "usr/bin" / name).exists() for name in PACKAGES):
            return root
        staging = debs / "root.staging"
        shutil.rmtree(staging, ignore_errors=True)
        for package in PACKAGES:
            deb = sorted(debs.glob(f"{package}_*.deb"))[-1]
            run(["dpkg-deb", "-x", str(deb), str(staging)], timeout=120)
        shutil.rmtree(root, ignore_errors=True)
        staging.rename(root)
    return root


@functools.cache
def newest() -> Release:
    """sid's prometheus/promtool, fetched and unpacked on first use (:class:`ReleaseUnavailable` if that fails)."""
    try:
        root = unpacked(fetch_debs(sid_cache(), suite=SUITE, packages=PACKAGES))
    except Exception as exc:  # network, apt, dpkg-deb: the test set-up says what failed
        raise ReleaseUnavailable(f"could not fetch Debian {SUITE}'s {' and '.join(PACKAGES)}: {exc}") from exc
    return Release("newest", root, f"Debian {SUITE} packages, unpacked in {root}")


OLDEST = Release("oldest", SYSTEM_ROOT, "Debian 12's prometheus package: apt-get install prometheus")


def release(name: str) -> Release:
    """The release called ``name`` (``newest`` is fetched on first use)."""
    if name == "newest":
        return newest()
    if name == "oldest":
        return OLDEST
    raise ValueError(f"unknown Prometheus release {name!r} (use one of {', '.join(NAMES)})")


def selected() -> list[str]:
    """The releases every Prometheus test runs on: ``$GPUSTACK_TEST_PROMETHEUS`` (comma-separated), default
    ``newest``."""
    names = [n.strip() for n in os.environ.get(ENV, "newest").split(",") if n.strip()]
    unknown = [n for n in names if n not in NAMES]
    if unknown or not names:
        raise ValueError(f"{ENV}={os.environ.get(ENV)!r}: use one or more of {', '.join(NAMES)}")
    return names


def unavailable(name: str) -> str:
    """Why release ``name`` cannot run ("" when it can)."""
    try:
        rel = release(name)
    except ReleaseUnavailable as exc:
        return str(exc)
    missing = rel.missing()
    return f"not installed: {', '.join(missing)} ({rel.origin})" if missing else ""
