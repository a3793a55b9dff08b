"""tests/testbed/reboot.py, the test bed's restart of systemd-nspawn after a guest reboot, against a TEST DOUBLE of
systemd-nspawn (a shell script: exit 133, the status nspawn exits with when its container rebooted, a given number of
times, then 0; or a long sleep to be stopped). The real nspawn and a real guest reboot: tests/testbed/test_nodes.py
(``node patch`` reboots nd2; its boot id changes, sshd answers again)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.testbed import reboot

NSPAWN_DOUBLE = """#!/bin/sh
# TEST DOUBLE of systemd-nspawn: one line per start; exit 133 (the guest rebooted) until $1 starts were made
echo start >> "$2"
[ "$(wc -l < "$2")" -lt "$1" ] && exit 133
exec sleep "$3"
"""


def _double(tmp_path: Path) -> Path:
    script = tmp_path / "systemd-nspawn"
    script.write_text(NSPAWN_DOUBLE)
    script.chmod(0o755)
    return script


def test_a_guest_reboot_starts_nspawn_again_with_the_same_arguments(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    proc = subprocess.run(
        reboot.restarting([str(_double(tmp_path)), "3", str(starts), "0"]),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert starts.read_text().split() == ["start"] * 3  # two reboots: started three times
    assert proc.stdout.count("the guest rebooted (systemd-nspawn exit 133)") == 2


def test_another_exit_status_ends_the_wrapper_with_it(tmp_path: Path) -> None:
    script = tmp_path / "fails"
    script.write_text('#!/bin/sh\necho start >> "$1"\nexit 7\n')
    script.chmod(0o755)
    starts = tmp_path / "starts"
    proc = subprocess.run(reboot.restarting([str(script), str(starts)]), capture_output=True, timeout=60, check=False)
    assert proc.returncode == 7 and starts.read_text().split() == ["start"]


def test_a_boot_loop_is_left_down(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    proc = subprocess.run(
        reboot.restarting([str(_double(tmp_path)), "1000", str(starts), "0"]),
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == reboot.REBOOT_EXIT and len(starts.read_text().split()) == reboot.MAX_BOOTS


def test_the_harness_stop_ends_nspawn_and_the_wrapper_without_a_restart(tmp_path: Path) -> None:
    """As Testbed.close: SIGTERM to the wrapper (which the harness started in a new session); it is passed on to
    nspawn, and nspawn's exit -- here the reboot status, the worst case -- does not start it again."""
    starts = tmp_path / "starts"
    trap = tmp_path / "nspawn-trap"
    # exits 133 on SIGTERM: a stop that races a guest reboot
    trap.write_text("#!/bin/sh\necho start >> \"$1\"\ntrap 'kill $!; exit 133' TERM\nsleep 60 & wait $!\n")
    trap.chmod(0o755)
    wrapper = subprocess.Popen(reboot.restarting([str(trap), str(starts)]), start_new_session=True)
    deadline = time.monotonic() + 20
    while not (starts.exists() and starts.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # the trap is set
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(timeout=20) == reboot.REBOOT_EXIT
    assert starts.read_text().split() == ["start"], "not started again after the stop"


def test_the_wrapper_runs_as_a_script_of_the_standard_library() -> None:
    argv = reboot.restarting(["systemd-nspawn", "-D", "/x"])
    assert argv[0] == sys.executable and argv[1].endswith("tests/testbed/reboot.py") and argv[2:] == [
        "systemd-nspawn", "-D", "/x"
    ]  # fmt: skip
