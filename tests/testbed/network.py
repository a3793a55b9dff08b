"""The machine-wide network of the test bed: one Linux bridge that all test hosts hang off.

Layout (one flat subnet, so every host reaches every other host directly)::

    outer machine: gsbr0 = 10.213.0.1/24  (HTTP services and the proxy listen here)
      gs-<name>  (veth, outer end, enslaved to gsbr0)
        <-> host0 in netns gs-<name> = 10.213.0.11/24, .12, .13 ...  default via 10.213.0.1

The outer machine forwards nothing for the hosts: IP forwarding is left as it is (off on the
project's machines) and a ``GS-TESTBED-FWD`` chain in ``FORWARD`` rejects any packet that
would leave the bridge, in case some other process turns forwarding on. A ``GS-TESTBED-IN``
chain lets the hosts talk only to the bridge address of the outer machine.

Only one process on the machine can own these names at a time: :class:`TestbedNetwork`
holds an exclusive lock on ``/run/gpustack-testbed/machine.lock`` while it is up (reference
counted inside the process), and on taking the lock it removes leftovers of a crashed run.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

from . import kernel_tunables
from ._proc import TestbedError, run, wait_for

BRIDGE = "gsbr0"
PREFIX = "gs-"
SUBNET = ipaddress.IPv4Network("10.213.0.0/24")
BRIDGE_ADDRESS = "10.213.0.1"
FIRST_HOST = 11
STATE_DIR = Path("/run/gpustack-testbed")
FWD_CHAIN = "GS-TESTBED-FWD"
IN_CHAIN = "GS-TESTBED-IN"
MAX_NAME = 15 - len(PREFIX)  # Linux interface names are at most 15 characters


def netns_name(host: str) -> str:
    """Name of the network namespace (and of the outer veth end) of ``host``."""
    return f"{PREFIX}{host}"


def netns_path(host: str) -> Path:
    """Path of the bind-mounted network namespace of ``host`` (for nspawn)."""
    return Path("/run/netns") / netns_name(host)


class TestbedNetwork:
    """Reference-counted owner of the bridge, the firewall chains and the machine lock.

    ``acquire()``/``release()`` may nest; the first acquire in the process takes the lock,
    cleans up stale state and creates the bridge; the last release removes it all again.
    """

    __test__ = False

    _lock = threading.RLock()
    _count = 0
    _fd: int | None = None
    _used: set[int] = set()  # noqa: RUF012 - process-wide registry on purpose
    _names: dict[str, str] = {}  # noqa: RUF012 - host name -> address of live hosts

    @classmethod
    def acquire(cls, timeout: float | None = None) -> None:
        """Bring the network up (or just count another user of it)."""
        with cls._lock:
            if cls._count == 0:
                cls._take_machine_lock(timeout)
                try:
                    cleanup_stale()
                    _bridge_up()
                    _firewall_up()
                    # protectKernelDefaults: the kubelet's kernel parameters, the machine's (read-only in a host)
                    kernel_tunables.ensure()
                except BaseException:
                    cls._drop_machine_lock()
                    raise
            cls._count += 1

    @classmethod
    def release(cls) -> None:
        """Drop one user; the last one tears the bridge and the firewall chains down."""
        with cls._lock:
            if cls._count == 0:
                return
            cls._count -= 1
            if cls._count == 0:
                try:
                    _firewall_down()
                    _bridge_down()
                finally:
                    cls._drop_machine_lock()

    @classmethod
    def allocate_address(cls) -> str:
        """A free host address in the bridge subnet (10.213.0.11 upwards)."""
        with cls._lock:
            for last in range(FIRST_HOST, 250):
                if last not in cls._used:
                    cls._used.add(last)
                    return str(SUBNET.network_address + last)
        raise TestbedError("no free test host address left in 10.213.0.0/24")

    @classmethod
    def free_address(cls, address: str) -> None:
        """Give an address back to the pool."""
        with cls._lock:
            cls._used.discard(int(ipaddress.IPv4Address(address)) & 0xFF)

    @classmethod
    def register_name(cls, name: str, address: str | None) -> None:
        """Record (or with ``None`` forget) a live host's name, for the proxy's lookups."""
        with cls._lock:
            if address is None:
                cls._names.pop(name, None)
            else:
                cls._names[name] = address

    @classmethod
    def host_names(cls) -> dict[str, str]:
        """Names and addresses of the live test hosts of this process."""
        with cls._lock:
            return dict(cls._names)

    @classmethod
    def _take_machine_lock(cls, timeout: float | None) -> None:
        limit = timeout if timeout is not None else _lock_timeout()
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        fd = os.open(STATE_DIR / "machine.lock", os.O_RDWR | os.O_CREAT, 0o644)

        def _try() -> bool | None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            return True

        try:
            wait_for(_try, timeout=limit, interval=1.0, what="the test bed machine lock")
        except BaseException:
            os.close(fd)
            raise
        cls._fd = fd

    @classmethod
    def _drop_machine_lock(cls) -> None:
        if cls._fd is not None:
            os.close(cls._fd)
            cls._fd = None


def _lock_timeout() -> float:
    """How long to wait for another process's test bed (``GPUSTACK_TESTBED_LOCK_TIMEOUT``)."""
    return float(os.environ.get("GPUSTACK_TESTBED_LOCK_TIMEOUT", "1800"))


def _bridge_up() -> None:
    """Create the bridge with the outer machine's address on it."""
    run(["ip", "link", "add", BRIDGE, "type", "bridge"], timeout=30)
    run(["ip", "addr", "add", f"{BRIDGE_ADDRESS}/{SUBNET.prefixlen}", "dev", BRIDGE], timeout=30)
    run(["ip", "link", "set", BRIDGE, "up"], timeout=30)


def _bridge_down() -> None:
    run(["ip", "link", "del", BRIDGE], timeout=30, check=False)


_FWD_RULES: tuple[tuple[str, ...], ...] = (
    ("-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT"),
    ("-i", BRIDGE, "-j", "REJECT"),
    ("-o", BRIDGE, "-j", "REJECT"),
)
_IN_RULES: tuple[tuple[str, ...], ...] = (
    ("-i", BRIDGE, "-d", BRIDGE_ADDRESS, "-j", "ACCEPT"),
    ("-i", BRIDGE, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"),
    ("-i", BRIDGE, "-j", "DROP"),
)


def _firewall_up() -> None:
    """Install the chains that keep test-host traffic on the bridge."""
    for chain, parent, rules in ((FWD_CHAIN, "FORWARD", _FWD_RULES), (IN_CHAIN, "INPUT", _IN_RULES)):
        run(["iptables", "-w", "-N", chain], timeout=30)
        for rule in rules:
            run(["iptables", "-w", "-A", chain, *rule], timeout=30)
        run(["iptables", "-w", "-I", parent, "1", "-j", chain], timeout=30)


def _firewall_down() -> None:
    """Remove the chains (idempotent)."""
    for chain, parent in ((FWD_CHAIN, "FORWARD"), (IN_CHAIN, "INPUT")):
        for _ in range(10):
            if run(["iptables", "-w", "-D", parent, "-j", chain], timeout=30, check=False).returncode:
                break
        run(["iptables", "-w", "-F", chain], timeout=30, check=False)
        run(["iptables", "-w", "-X", chain], timeout=30, check=False)


# --- stale state of crashed runs ---------------------------------------------------------


def record_host(name: str, data: dict[str, Any]) -> None:
    """Remember a running host so a later run can clean it up after a crash."""
    hosts = STATE_DIR / "hosts"
    hosts.mkdir(parents=True, exist_ok=True)
    (hosts / f"{name}.json").write_text(json.dumps(data))


def forget_host(name: str) -> None:
    """Drop the crash record of a host that was shut down cleanly."""
    (STATE_DIR / "hosts" / f"{name}.json").unlink(missing_ok=True)


def cleanup_stale() -> None:
    """Remove leftovers of a previous run: processes, netns, links, chains, host roots.

    Only called while holding the machine lock, so nothing here belongs to a live test bed.
    """
    records = sorted((STATE_DIR / "hosts").glob("*.json")) if (STATE_DIR / "hosts").is_dir() else []
    for ns in _list_netns():
        if ns.startswith(PREFIX):
            kill_netns_processes(ns)
            run(["ip", "netns", "del", ns], timeout=30, check=False)
    for record in records:
        _cleanup_record(json.loads(record.read_text() or "{}"))
        record.unlink(missing_ok=True)
    for link in _list_links():
        if link.startswith(PREFIX) or link == BRIDGE:
            run(["ip", "link", "del", link], timeout=30, check=False)
    _firewall_down()


def _cleanup_record(data: dict[str, Any]) -> None:
    """Kill, unmount and delete what one crash record lists."""
    pid, mount = data.get("nspawn_pid"), data.get("mount")
    if isinstance(pid, int) and isinstance(mount, str) and _is_nspawn_of(pid, mount):
        for kill in (os.killpg, os.kill):  # the restart wrapper leads the group nspawn runs in: both end
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, signal.SIGKILL)
    if isinstance(mount, str) and os.path.ismount(mount):
        run(["umount", "-l", mount], timeout=60, check=False)
    remove = [p for p in data.get("remove", []) if isinstance(p, str) and Path(p).exists()]
    if remove:
        run(["rm", "-rf", "--one-file-system", *remove], timeout=300, check=False)


def _is_nspawn_of(pid: int, root: str) -> bool:
    """True if ``pid`` still is the systemd-nspawn that booted ``root``, or its restart wrapper
    (tests/testbed/reboot.py: ``python3 reboot.py systemd-nspawn ...``) (PIDs get reused)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(a.endswith(b"systemd-nspawn") for a in argv[:3]) and root.encode() in argv


def _list_netns() -> list[str]:
    out = run(["ip", "netns", "list"], timeout=30).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _list_links() -> list[str]:
    out = run(["ip", "-o", "link", "show"], timeout=30).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            names.append(parts[1].strip().split("@")[0])
    return names


def netns_pids(ns: str) -> list[int]:
    """PIDs of all processes whose network namespace is ``/run/netns/<ns>``."""
    try:
        target = os.stat(Path("/run/netns") / ns).st_ino
    except FileNotFoundError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino == target:
                pids.append(int(entry))
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
    return pids


def kill_netns_processes(ns: str, timeout: float = 15.0) -> None:
    """SIGKILL every process in the namespace and wait until they are gone."""

    def _gone() -> bool | None:
        pids = netns_pids(ns)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return True if not pids else None

    wait_for(_gone, timeout=timeout, interval=0.2, what=f"processes in netns {ns} to die")
