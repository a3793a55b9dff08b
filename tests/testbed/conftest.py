"""Test bed fixtures and the ``testbed`` marker for every test in this directory.

Tests here are skipped (with the reason) only when not running as root or when a needed tool
(debootstrap, systemd-nspawn, ...) is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .pytest_plugin import (  # noqa: F401 - re-exported fixtures
    helm_tarball,
    http_server,
    k8s_repo,
    proxy,
    rootfs,
    rootfs_trixie,
    runtime_archives,
    services_dir,
    sources,
    testbed_doubles,
    testbed_factory,
    testbed_network,
    unavailable_reason,
)

_HERE = Path(__file__).parent


#: the modules whose hosts run the real kubeadm (tests/testbed/realkubeadm.py): last, so that on a cold machine CI's
#: background Go build (scripts/test.sh) has built it while the other test-bed tests run
REAL_KUBEADM_MODULES = ("test_cluster_lifecycle.py", "test_up_bundle.py", "test_up_single.py")


def _needs_real_kubeadm(item: pytest.Item) -> bool:
    path = Path(str(item.path))
    return path.name in REAL_KUBEADM_MODULES and _HERE in path.parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test in this directory ``testbed``; skip them where the bed cannot run; the tests whose hosts run
    the real kubeadm after the others (each module's own order kept)."""
    items.sort(key=_needs_real_kubeadm)
    reason = unavailable_reason()
    for item in items:
        if _HERE not in Path(str(item.path)).parents:
            continue
        item.add_marker(pytest.mark.testbed)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
