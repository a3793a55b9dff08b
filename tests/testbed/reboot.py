"""A test host that survives its own reboot: systemd-nspawn started again when its container rebooted.

A guest's ``reboot`` (``shutdown -r``, ``systemctl reboot``, what ``ansible.builtin.reboot`` runs) ends its
systemd-nspawn with exit status 133 when nspawn runs with ``--keep-unit``, as the bed's do (src/nspawn/nspawn.c
``EXIT_FORCE_RESTART 133`` for ``CONTAINER_REBOOTED``; without ``--keep-unit`` nspawn would loop by itself, but then it
asks the outer systemd for a scope unit); the console says "Container NAME is being rebooted."; systemd's own
``systemd-nspawn@.service`` starts it again for that exit status alone (``RestartForceExitStatus=133``,
``SuccessExitStatus=133``: units/systemd-nspawn@.service.in, as systemd 252 installs it in
/lib/systemd/system on the machines the bed runs on). The test bed starts nspawn itself
(:meth:`tests.testbed.hosts.Testbed._launch`), so this module plays that unit's part: :func:`restarting` wraps the
nspawn command line in this file run as a script, which starts nspawn, and again with the same arguments after an
exit 133 -- the same root (an overlay, still mounted on the outer machine), the same network namespace
(``--network-namespace-path``: the namespace is named, it outlives the container) and the same binds. nspawn gives
each start a fresh ``/proc/sys/kernel/random/boot_id`` (src/nspawn/nspawn.c ``setup_boot_id``, a random id
bind-mounted over the kernel's), as a machine's kernel does at each boot: the test bed's check of a reboot.

Stopping: the harness signals the wrapper (SIGTERM, the same signal nspawn powers its container off on); the
wrapper passes it on to nspawn and, once told to stop, never starts it again, whatever nspawn's exit status; it
exits with nspawn's. The wrapper leads the process group nspawn runs in (the harness starts it in a new session),
so the harness's SIGKILL of the group after a hung power-off ends both. A guest that reboots more than
:data:`MAX_BOOTS` times is left down (a boot loop is a failure to see, not to hide).

Standard library only: run as ``python3 reboot.py NSPAWN-ARGV...``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

#: systemd-nspawn's exit status when the container rebooted (nspawn.c EXIT_FORCE_RESTART; RestartForceExitStatus=133)
REBOOT_EXIT = 133
#: boots of one host at most (the first one included)
MAX_BOOTS = 20
#: the signals the harness may stop a host with; passed on to nspawn
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def restarting(nspawn: Sequence[str]) -> list[str]:
    """The command line that runs ``nspawn`` (a systemd-nspawn argv) and runs it again after each guest reboot."""
    return [sys.executable, str(Path(__file__).resolve()), *nspawn]


def main(argv: Sequence[str]) -> int:
    """Run ``argv`` until it exits with anything but :data:`REBOOT_EXIT` or a stop signal came; its exit status."""
    stop: list[int] = []
    child: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        stop.append(signum)
        if child and child[-1].poll() is None:
            child[-1].send_signal(signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, forward)
    rc = 0
    for boot in range(1, MAX_BOOTS + 1):
        if stop:
            break
        child.append(subprocess.Popen(list(argv)))
        if stop:  # a signal that came before the child existed
            child[-1].send_signal(stop[0])
        rc = child[-1].wait()
        if rc != REBOOT_EXIT or stop:
            return rc
        print(
            f"gpustack test bed: the guest rebooted (systemd-nspawn exit {rc}); starting it again "
            f"(boot {boot + 1}) at {time.strftime('%H:%M:%S')}",
            flush=True,
        )
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
