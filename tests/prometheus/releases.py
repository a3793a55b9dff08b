"""Which real Prometheus the tests run: the release production runs and the oldest doctor/verify/report support.

- ``newest``: the Prometheus the pinned kube-prometheus-stack deploys
  (:data:`gpustack.config.pins.KUBE_PROMETHEUS_STACK_PROMETHEUS`: 3.13.5, the LTS, with chart 88.5.3), ``prometheus``
  and ``promtool`` built from its Go module ``github.com/prometheus/prometheus`` (module ``v0.313.5`` is 3.13.5) by
  tests/realbin/gobuild.py into the real-binary cache (scripts/test.sh builds it before the tests; a test that
  finds it missing builds it, under a file lock). tests/prometheus/test_releases.py fails when the chart pin moves
  and the tools module (tests/realbin/prometheus/go.mod) does not.
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

from tests.realbin import gobuild

NAMES = ("newest", "oldest")
ENV = "GPUSTACK_TEST_PROMETHEUS"
#: where Debian 12's package (the oldest supported release) installs its binaries
SYSTEM_ROOT = Path("/usr/bin")


class ReleaseUnavailable(RuntimeError):
    """A Prometheus release the tests need is not installed and could not be fetched."""


@dataclass(frozen=True)
class Release:
    """One Prometheus release: its binaries in ``bindir`` (``prometheus``, ``promtool``)."""

    name: str  # "newest" / "oldest"
    bindir: Path
    origin: str  # where the binaries come from, for messages

    @property
    def prometheus(self) -> str:
        return str(self.bindir / "prometheus")

    @property
    def promtool(self) -> str:
        return str(self.bindir / "promtool")

    def missing(self) -> list[str]:
        return [path for path in (self.prometheus, self.promtool) if shutil.which(path) is None]

    @functools.cached_property
    def version(self) -> str:
        """``prometheus --version``'s version ('3.14.0', '2.42.0+ds')."""
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


@functools.cache
def newest() -> Release:
    """The production release, built from its Go module on first use (:class:`ReleaseUnavailable` if that fails)."""
    module = gobuild.MODULES["prometheus"]
    try:
        bindir = gobuild.build(module)
    except Exception as exc:  # the go command, the module proxy: the test set-up says what failed
        raise ReleaseUnavailable(f"could not build Prometheus from {module.upstream} {module.version}: {exc}") from exc
    return Release("newest", bindir, f"{module.upstream} {module.version}, built in {bindir}")


OLDEST = Release("oldest", SYSTEM_ROOT, "Debian 12's prometheus package: apt-get install prometheus")


def release(name: str) -> Release:
    """The release called ``name`` (``newest`` is built on first use)."""
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
