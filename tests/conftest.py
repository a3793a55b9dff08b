"""Suite-wide rule: under the project's test command (scripts/test.sh sets PYTEST_NO_SKIPS=1) a
skipped test fails the run. The environment guards in tests/testbed, tests/prometheus and
tests/unit/playbooks (root, unshare, overlay, Debian's prometheus) exist for developer machines; in
CI everything they need is installed, so a skip there means a test silently did not run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests import realbin
from tests.realbin import RealBins

#: Support horizons (gpustack/config/support.py) are judged against this day in every test, so a verdict does not
#: change as the calendar moves (a test that wants another day sets GPUSTACK_TODAY itself). scripts/pins_report.py
#: judges the pins against the real day: that is where the calendar is watched.
TODAY = "2026-11-26"
os.environ.setdefault("GPUSTACK_TODAY", TODAY)

# Every `python -m gpustack` a test starts runs this checkout, whatever else is installed: an editable
# install made from another clone (or its force-included gpustack/_data) must not shadow it.
REPO_ROOT = str(Path(__file__).resolve().parent.parent)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [REPO_ROOT, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != REPO_ROOT]]
)

# Under a virtual environment (scripts/test.sh's, scripts/test-venv.sh), the programs a test starts by name
# (python3, ansible-playbook, ansible-lint, gpustack) are the venv's, as if it were activated: its bin first on PATH.
if sys.prefix != sys.base_prefix:
    VENV_BIN = str(Path(sys.executable).parent)
    os.environ["PATH"] = os.pathsep.join(
        [VENV_BIN, *[p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != VENV_BIN]]
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("PYTEST_NO_SKIPS") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped and exitstatus == 0:
        for rep in skipped:
            reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
            print(f"\nnot allowed under PYTEST_NO_SKIPS=1: {rep.nodeid} skipped: {reason}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def real_bins() -> RealBins:
    """The real helm (v4.3) and kubectl (v1.36) binaries (tests/realbin)."""
    return realbin.real_bins()
