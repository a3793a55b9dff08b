"""A bare test host's boot: what failed before any product code ran is started once more.

On a loaded machine systemd's own boot oneshots have been seen to fail (systemd-user-sessions: sshd refuses every
login but root's; systemd-sysusers, CI 2026-11-27; systemd-remount-fs, CI 2026-11-29, with no journal entry). No
product code has run yet, so each unit failed at boot is started once more; one that fails again leaves the host
"degraded" for the smoke test (tests/testbed/test_testbed_smoke.py) to report.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .hosts import Host


def restart_failed_units(host: Host, log: Callable[[str], None]) -> str:
    """Start each unit that failed during boot once more; the system state after (``systemctl is-system-running``)."""
    failed = host.console_run("systemctl --failed --no-legend --plain", timeout=30).stdout
    for unit in [line.split()[0] for line in failed.splitlines() if line.strip()]:
        log(f"{host.name}: {unit} failed at boot; starting it again")
        host.console_run(f"systemctl reset-failed {shlex.quote(unit)}", timeout=30)
        host.console_run(f"systemctl restart {shlex.quote(unit)}", timeout=60)
    return host.console_run("systemctl is-system-running", timeout=30).stdout.strip() or "unknown"
