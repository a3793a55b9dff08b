"""Boot real Debian 12 test hosts as ``systemd-nspawn`` containers on one bridge.

Each host's root is an overlay mount (the cached root read-only below, a private upper layer
on top; instant) or, with ``root_mode="copy"``, a full copy (``cp -a --reflink=auto``, 1-10 s
depending on disk load). Either way it gets its own SSH host keys, machine id, hostname and
authorized keys, and is booted by systemd-nspawn in its own network namespace ``gs-<name>``
wired to the bridge of :mod:`.network`. Tests and Ansible reach the hosts over real SSH with
strict host key checking.

Usage::

    with Testbed(["cp1", "w1"], workdir) as bed:
        bed.hosts[0].run("systemctl is-system-running")

Files written under ``workdir``::

    testbed.log                 what the test bed did (boot times, failed units, teardown)
    id_ed25519[.pub]            client key authorised for ``gpustack`` and ``root`` on every host
    known_hosts                 every host's real host keys (names and addresses)
    known_hosts.empty-N         empty files for tests of unknown-host-key handling
    hosts/<name>/console.log    the host's console (systemd boot messages, nspawn errors)
    hosts/<name>/root/          the host's root file system (removed on close)
    hosts/<name>/upper, work/   overlay layers (overlay mode; removed on close)
    hosts/<name>/containerd/    bind-mounted as /var/lib/containerd (overlay mode)
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import re
import shlex
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import TracebackType

from . import network, reboot
from ._proc import TestbedError, file_lock, run, run_parallel, wait_for
from .boot import restart_failed_units
from .network import BRIDGE, BRIDGE_ADDRESS, SUBNET, TestbedNetwork, netns_name, netns_path
from .rootfs import ensure_rootfs

PrepareHook = Callable[[Path], None]
#: Paths that a booted host keeps on its own mounts (tmpfs, procfs ...), not in its root dir.
PRIVATE_MOUNTS = ("/tmp", "/run", "/dev", "/proc", "/sys", "/var/lib/containerd")
_NAME_RE = re.compile(rf"^[a-z][a-z0-9-]{{0,{network.MAX_NAME - 1}}}$")
SSH_OPTIONS: tuple[str, ...] = (
    "-o", "BatchMode=yes",
    "-o", "StrictHostKeyChecking=yes",
    "-o", "ConnectTimeout=5",
    "-o", "ServerAliveInterval=10",
    "-o", "LogLevel=ERROR",
    "-o", "IdentitiesOnly=yes",
)  # fmt: skip


@dataclass
class Host:
    """One booted test host.

    ``address`` is its IPv4 address on the bridge (also written to every host's /etc/hosts
    under ``name``); ``root`` is its root file system as seen from the outer machine.
    """

    name: str
    address: str
    root: Path
    ssh_key: Path
    user: str = "gpustack"
    known_hosts: Path = field(default=Path("/dev/null"))
    console_log: Path = field(default=Path("/dev/null"))
    nspawn: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    # --- SSH -------------------------------------------------------------------------------

    def ssh_args(self, *, user: str | None = None, known_hosts: Path | None = None) -> list[str]:
        """The ``ssh`` command line (without the remote command) to log in to this host."""
        return [
            "ssh",
            "-i", str(self.ssh_key),
            "-o", f"UserKnownHostsFile={known_hosts or self.known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            *SSH_OPTIONS,
            f"{user or self.user}@{self.address}",
        ]  # fmt: skip

    def run(
        self,
        cmd: str,
        *,
        user: str | None = None,
        timeout: float = 120.0,
        check: bool = False,
        known_hosts: Path | None = None,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a shell command on the host over SSH (as ``gpustack`` unless ``user``)."""
        return run(
            [*self.ssh_args(user=user, known_hosts=known_hosts), "--", cmd],
            timeout=timeout,
            check=check,
            input_text=input_text,
        )

    def sudo(self, cmd: str, *, timeout: float = 120.0, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run a shell command as root on the host (``sudo -n`` over SSH)."""
        return self.run(f"sudo -n sh -c {shlex.quote(cmd)}", timeout=timeout, check=check)

    # --- without SSH ------------------------------------------------------------------------

    def init_pid(self) -> int:
        """PID (on the outer machine) of the host's systemd, found via its network namespace."""
        for pid in network.netns_pids(netns_name(self.name)):
            with contextlib.suppress(OSError):
                status = Path(f"/proc/{pid}/status").read_text()
                nspid = next(ln for ln in status.splitlines() if ln.startswith("NSpid:"))
                if nspid.split()[-1] == "1":
                    return pid
        raise TestbedError(f"host {self.name} has no running init")

    def console_run(
        self, cmd: str, *, timeout: float = 60.0, check: bool = False, input_text: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a shell command as root inside the host with ``nsenter`` (works without sshd)."""
        pid = str(self.init_pid())
        enter = ["nsenter", "-t", pid, "-m", "-u", "-i", "-n", "-p", "-C", "-r", "-w"]
        return run(
            [*enter, "/bin/sh", "-c", cmd],
            timeout=timeout,
            check=check,
            input_text=input_text,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"},
        )

    def stop_sshd(self) -> None:
        """Stop sshd inside the host (open sessions survive; new logins are refused)."""
        self.console_run("systemctl stop ssh.service", check=True)

    def start_sshd(self) -> None:
        """Start sshd again after :meth:`stop_sshd`."""
        self.console_run("systemctl start ssh.service", check=True)

    # --- files ------------------------------------------------------------------------------

    def path(self, inside: str) -> Path:
        """Outer-machine path of ``inside`` (symlinks resolved within the host root).

        Only meaningful for files on the root file system: while the host runs, the paths in
        :data:`PRIVATE_MOUNTS` are mounts of its own that the outer root directory does not see.
        """
        return resolve_in_root(self.root, inside)

    def write_file(self, inside: str, content: str | bytes, mode: int = 0o644) -> None:
        """Write a file inside the host (creating parents), owned by root.

        Goes through the root directory, or through ``nsenter`` for paths on the host's own
        mounts (/tmp, /run, ...) while it runs.
        """
        data = content.encode() if isinstance(content, str) else content
        if self._on_private_mount(inside):
            quoted = shlex.quote(inside)
            self.console_run(
                f'mkdir -p "$(dirname {quoted})" && base64 -d > {quoted} && chmod {mode:o} {quoted}',
                check=True,
                input_text=base64.b64encode(data).decode(),
            )
            return
        target = self.path(inside)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(mode)

    def read_file(self, inside: str) -> str:
        """Read a text file of the host (root directory, or ``nsenter`` for /tmp, /run ...)."""
        if self._on_private_mount(inside):
            return self.console_run(f"cat {shlex.quote(inside)}", check=True).stdout
        return self.path(inside).read_text()

    def _on_private_mount(self, inside: str) -> bool:
        """True for paths the running host keeps on mounts the outer root dir does not show."""
        path = PurePosixPath("/", inside)
        return self.is_running() and any(
            path == PurePosixPath(m) or PurePosixPath(m) in path.parents for m in PRIVATE_MOUNTS
        )

    def is_running(self) -> bool:
        """True while the host's systemd-nspawn (its restart wrapper, tests/testbed/reboot.py) is alive."""
        return self.nspawn is not None and self.nspawn.poll() is None


def resolve_in_root(root: Path, inside: str, _depth: int = 0) -> Path:
    """Map an absolute path of a host to the outer machine, following symlinks chroot-style.

    Absolute symlinks inside the host (``/etc/resolv.conf -> /run/...``) must resolve within
    ``root``, never to the outer machine's files.
    """
    if _depth > 40:
        raise TestbedError(f"too many symlinks resolving {inside} in {root}")
    current = PurePosixPath("/")
    parts = [p for p in PurePosixPath("/", inside).parts[1:] if p not in ("", ".")]
    for index, part in enumerate(parts):
        if part == "..":
            current = current.parent
            continue
        candidate = current / part
        outer = root / str(candidate).lstrip("/")
        if outer.is_symlink():
            link = PurePosixPath(os.readlink(outer))
            base = link if link.is_absolute() else current / link
            rest = PurePosixPath(*parts[index + 1 :]) if index + 1 < len(parts) else None
            joined = str(base / rest) if rest else str(base)
            return resolve_in_root(root, joined, _depth + 1)
        current = candidate
    return root / str(current).lstrip("/")


class Testbed:
    """Boot ``names`` as test hosts; a context manager that always tears down.

    ``prepare`` customises host roots before boot: one hook for every host or a mapping from
    host name to hook (see :mod:`.prepare` for ready-made hooks). ``nspawn_args`` adds
    systemd-nspawn arguments per host name. ``rootfs`` defaults to the cached Debian root.
    """

    __test__ = False

    def __init__(
        self,
        names: Sequence[str],
        workdir: Path,
        *,
        prepare: PrepareHook | Mapping[str, PrepareHook] | None = None,
        nspawn_args: Mapping[str, Sequence[str]] | None = None,
        rootfs: Path | None = None,
        boot_timeout: float = 120.0,
        default_route: bool = True,
        root_mode: str = "overlay",
    ) -> None:
        bad = [n for n in names if not _NAME_RE.match(n)]
        if bad or len(set(names)) != len(names) or not names:
            raise ValueError(f"host names must be unique, [a-z][a-z0-9-]{{0,11}}: {list(names)}")
        self.names = list(names)
        self.workdir = Path(workdir).resolve()
        self._prepare = prepare
        self._nspawn_args = dict(nspawn_args or {})
        self._rootfs = rootfs
        self.boot_timeout = boot_timeout
        self.default_route = default_route
        if root_mode not in ("overlay", "copy"):
            raise ValueError(f"root_mode must be 'overlay' or 'copy', not {root_mode!r}")
        self.root_mode = root_mode
        self.hosts: list[Host] = []
        self.log_path = self.workdir / "testbed.log"
        self.ssh_key = self.workdir / "id_ed25519"
        self.known_hosts = self.workdir / "known_hosts"
        self._empty_counter = 0
        self._network_held = False
        self._locks = contextlib.ExitStack()
        self._closed = False

    # --- public ----------------------------------------------------------------------------

    def __enter__(self) -> Testbed:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def host(self, name: str) -> Host:
        """The host called ``name``."""
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    @property
    def bridge_address(self) -> str:
        """The outer machine's address on the bridge (services and the proxy listen here)."""
        return BRIDGE_ADDRESS

    @property
    def empty_known_hosts(self) -> Path:
        """A new, empty known_hosts file (for tests of unknown-host-key handling)."""
        self._empty_counter += 1
        path = self.workdir / f"known_hosts.empty-{self._empty_counter}"
        path.write_text("")
        return path

    def start(self) -> None:
        """Create, prepare and boot all hosts; wait until each answers over SSH."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.close)
        rootfs = self._rootfs or ensure_rootfs()
        started = time.monotonic()
        try:
            # Shared lock: a rebuild of the root (exclusive lock) waits until our hosts,
            # whose overlays sit on it, are gone.
            self._locks.enter_context(file_lock(rootfs.with_name(rootfs.name + ".lock"), shared=True, timeout=600))
            TestbedNetwork.acquire()
            self._network_held = True
            self._make_client_key()
            self._create_hosts(rootfs)
            self._write_hosts_files()
            self._write_known_hosts()
            for host in self.hosts:
                self._run_prepare(host)
                self._wire(host)
                self._launch(host)
            for host in self.hosts:
                self._wait_booted(host)
        except BaseException:
            self.close()
            raise
        self.log(
            f"all hosts up in {time.monotonic() - started:.1f}s: "
            + ", ".join(f"{h.name}={h.address}" for h in self.hosts)
        )

    def close(self) -> None:
        """Power the hosts off (kill them if that hangs) and remove every trace. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        for host in self.hosts:
            if host.is_running() and host.nspawn is not None:
                with contextlib.suppress(ProcessLookupError):
                    host.nspawn.send_signal(signal.SIGTERM)  # nspawn powers the container off
        try:
            for host in self.hosts:
                try:
                    self._teardown_host(host)
                except Exception as exc:  # keep tearing the others down
                    self.log(f"{host.name}: teardown error: {exc}")
        finally:
            if self._network_held:
                self._network_held = False
                TestbedNetwork.release()
            self._locks.close()

    def log(self, message: str) -> None:
        """Append a timestamped line to ``testbed.log``."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as fh:
            fh.write(f"{time.strftime('%H:%M:%S')} {message}\n")

    # --- creation ---------------------------------------------------------------------------

    def _make_client_key(self) -> None:
        if not self.ssh_key.exists():
            run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpustack-testbed", "-f", str(self.ssh_key)],
                timeout=30,
            )

    def _create_hosts(self, rootfs: Path) -> None:
        """Give every host its own root (overlay or copy) and personalise each one."""
        started = time.monotonic()
        for name in self.names:
            self.hosts.append(self._new_host(name))
        if self.root_mode == "copy":
            cmds = [["cp", "-a", "--reflink=auto", str(rootfs), str(h.root)] for h in self.hosts]
            run_parallel(cmds, timeout=300)
        else:
            for host in self.hosts:
                _mount_overlay(rootfs, host.root.parent)
        for host in self.hosts:
            self._personalise(host)
        keygens = [["ssh-keygen", "-A", "-f", str(h.root)] for h in self.hosts]
        run_parallel(keygens, timeout=120)  # fresh host keys: every host its own
        self.log(f"{self.root_mode} roots ready in {time.monotonic() - started:.1f}s under {self.workdir}/hosts")

    def _new_host(self, name: str) -> Host:
        """Allocate an address and a fresh directory for ``name``."""
        hostdir = self.workdir / "hosts" / name
        root = hostdir / "root"
        if hostdir.exists():
            run(["rm", "-rf", "--one-file-system", str(hostdir)], timeout=300)
        hostdir.mkdir(parents=True)
        address = TestbedNetwork.allocate_address()
        host = Host(
            name=name,
            address=address,
            root=root,
            ssh_key=self.ssh_key,
            known_hosts=self.known_hosts,
            console_log=hostdir / "console.log",
        )
        self._record(host, None)
        TestbedNetwork.register_name(name, address)
        return host

    def _record(self, host: Host, pid: int | None) -> None:
        """Crash record: what a later run must kill, unmount and delete."""
        hostdir = host.root.parent
        network.record_host(host.name, {
            "nspawn_pid": pid,
            "mount": str(host.root),
            "remove": [str(hostdir / d) for d in _HOST_SUBDIRS],
        })  # fmt: skip

    def _personalise(self, host: Host) -> None:
        """Machine id, hostname and authorized keys of one host, and a bounded stop for user managers."""
        (host.root / "etc/machine-id").write_text(uuid.uuid4().hex + "\n")
        (host.root / "etc/hostname").write_text(host.name + "\n")
        # The root has libpam-systemd (a dependency), so an SSH login starts user@UID.service, whose stop
        # inside the container can hang power-off until the 30 s kill in _teardown_host (seen in about
        # one teardown in ten). Nothing a test checks runs in a user manager; stop it within 3 s.
        drop_in = host.root / "etc/systemd/system/user@.service.d/gpustack-testbed.conf"
        drop_in.parent.mkdir(parents=True, exist_ok=True)
        drop_in.write_text("[Service]\nTimeoutStopSec=3s\n")
        self._authorize(host.root)

    def _authorize(self, root: Path) -> None:
        """Install the client key for root and gpustack."""
        pub = self.ssh_key.with_suffix(".pub").read_text()
        uid, gid = _passwd_ids(root, "gpustack")
        for home, owner in ((root / "root", (0, 0)), (root / "home/gpustack", (uid, gid))):
            keys = home / ".ssh/authorized_keys"
            keys.write_text(pub)
            keys.chmod(0o600)
            os.chown(keys, *owner)

    def _write_hosts_files(self) -> None:
        """Every host resolves every other host's name (no DNS server exists)."""
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{h.address}\t{h.name}" for h in self.hosts]
        for host in self.hosts:
            (host.root / "etc/hosts").write_text("\n".join(lines) + "\n")

    def _write_known_hosts(self) -> None:
        """known_hosts with every host's real host keys, under its address and its name."""
        lines = []
        for host in self.hosts:
            for pub in sorted((host.root / "etc/ssh").glob("ssh_host_*_key.pub")):
                keytype, key = pub.read_text().split()[:2]
                lines.append(f"{host.address},{host.name} {keytype} {key}")
        self.known_hosts.write_text("\n".join(lines) + "\n")

    def _run_prepare(self, host: Host) -> None:
        hook = self._prepare
        if isinstance(hook, Mapping):
            hook = hook.get(host.name)
        if hook is not None:
            hook(host.root)

    # --- network and boot -------------------------------------------------------------------

    def _wire(self, host: Host) -> None:
        """Network namespace + veth pair; the outer end joins the bridge."""
        ns, outer = netns_name(host.name), netns_name(host.name)
        run(["ip", "netns", "add", ns], timeout=30)
        run(["ip", "link", "add", outer, "type", "veth", "peer", "name", "host0", "netns", ns], timeout=30)
        run(["ip", "link", "set", outer, "master", BRIDGE, "up"], timeout=30)
        inside = ["ip", "-n", ns]
        run([*inside, "link", "set", "lo", "up"], timeout=30)
        run([*inside, "addr", "add", f"{host.address}/{SUBNET.prefixlen}", "dev", "host0"], timeout=30)
        run([*inside, "link", "set", "host0", "up"], timeout=30)
        if self.default_route:
            run([*inside, "route", "add", "default", "via", BRIDGE_ADDRESS], timeout=30)

    def _launch(self, host: Host) -> None:
        """Start systemd-nspawn in the background, console to ``console.log``."""
        cmd = reboot.restarting([  # started again when the guest reboots (tests/testbed/reboot.py)
            "systemd-nspawn",
            "-D", str(host.root),
            "--boot",
            "--register=no",
            "--keep-unit",
            f"--network-namespace-path={netns_path(host.name)}",
            f"--machine={host.name}",
            "--capability=CAP_NET_ADMIN",
            "--console=read-only",
            "--resolv-conf=off",
            "--timezone=off",
            "--link-journal=no",
            "--settings=no",
            *self._root_mode_args(host),
            *self._nspawn_args.get(host.name, ()),
        ])  # fmt: skip
        env = {**os.environ, "SYSTEMD_NSPAWN_API_VFS_WRITABLE": "network", "TERM": "dumb"}
        self.log(f"{host.name}: {shlex.join(cmd)}")
        with host.console_log.open("ab") as console:
            host.nspawn = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self._record(host, host.nspawn.pid)

    def _root_mode_args(self, host: Host) -> list[str]:
        """In overlay mode /var/lib/containerd lives on a plain directory: containerd's own
        overlayfs snapshotter cannot put its upper layers on an overlay."""
        if self.root_mode != "overlay":
            return []
        return [f"--bind={host.root.parent / 'containerd'}:/var/lib/containerd"]

    def _wait_booted(self, host: Host) -> None:
        """Wait until systemd reports running/degraded (asked through nsenter, so a slow sshd does not
        count as a slow boot), then until SSH logs in; fail with the console log.

        A unit failed at boot is started once more (:func:`tests.testbed.boot.restart_failed_units`)."""
        started = time.monotonic()

        def _state() -> str | None:
            if not host.is_running():
                raise TestbedError(f"{host.name}: systemd-nspawn exited early\n{self._tail(host)}")
            try:
                proc = host.console_run("timeout 30 systemctl is-system-running --wait", timeout=40)
            except TestbedError:  # no init yet in the network namespace
                return None
            state = proc.stdout.strip()
            if state in ("running", "degraded"):
                return state
            if state in ("maintenance", "stopping"):
                raise TestbedError(f"{host.name}: system state {state}\n{self._tail(host)}")
            return None  # "offline" too: systemctl says so when it entered before systemd's bus was up

        def _ssh() -> bool | None:
            return True if host.run("true", timeout=40).returncode == 0 else None

        try:
            state = wait_for(_state, timeout=self.boot_timeout, interval=0.5, what=f"{host.name} to boot")
            if state == "degraded":
                state = restart_failed_units(host, self.log)
            wait_for(_ssh, timeout=self.boot_timeout, interval=0.5, what=f"{host.name} to accept SSH")
        except TestbedError as exc:
            raise TestbedError(f"{exc}\n--- console of {host.name} ---\n{self._tail(host)}") from exc
        self.log(f"{host.name}: {state} after {time.monotonic() - started:.1f}s")
        if state == "degraded":
            self.log(f"{host.name}: failed units:\n{host.console_run('systemctl --failed --plain', timeout=30).stdout}")

    def _tail(self, host: Host, lines: int = 60) -> str:
        with contextlib.suppress(OSError):
            text = host.console_log.read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return "(no console log)"

    # --- teardown ---------------------------------------------------------------------------

    def _teardown_host(self, host: Host) -> None:
        """Wait for poweroff (or kill), then delete netns, link and root."""
        ns = netns_name(host.name)
        if host.nspawn is not None:
            try:
                host.nspawn.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.log(f"{host.name}: poweroff hung; killing")
                with contextlib.suppress(TestbedError):
                    network.kill_netns_processes(ns)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(host.nspawn.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    host.nspawn.wait(timeout=15)
        run(["ip", "netns", "del", ns], timeout=30, check=False)
        run(["ip", "link", "del", ns], timeout=30, check=False)
        hostdir = host.root.parent
        remove_host_dirs(hostdir)
        network.forget_host(host.name)
        TestbedNetwork.free_address(host.address)
        TestbedNetwork.register_name(host.name, None)
        self.log(f"{host.name}: removed (console log kept in {hostdir})")


_HOST_SUBDIRS = ("root", "upper", "work", "containerd")


def _mount_overlay(lower: Path, hostdir: Path) -> None:
    """Mount ``hostdir/root`` as an overlay: the cached root below, ``hostdir/upper`` on top."""
    for sub in _HOST_SUBDIRS:
        (hostdir / sub).mkdir(exist_ok=True)
    (hostdir / "containerd").chmod(0o711)
    options = f"lowerdir={lower},upperdir={hostdir / 'upper'},workdir={hostdir / 'work'}"
    run(["mount", "-t", "overlay", "overlay", "-o", options, str(hostdir / "root")], timeout=30)


def remove_host_dirs(hostdir: Path) -> None:
    """Unmount (if mounted) and delete a host's root, overlay layers and containerd dir."""
    root = hostdir / "root"
    if os.path.ismount(root) and run(["umount", str(root)], timeout=60, check=False).returncode:
        run(["umount", "-l", str(root)], timeout=60, check=False)
    existing = [str(hostdir / d) for d in _HOST_SUBDIRS if (hostdir / d).exists()]
    if existing:
        run(["rm", "-rf", "--one-file-system", *existing], timeout=300, check=False)


def _passwd_ids(root: Path, user: str) -> tuple[int, int]:
    """uid and gid of ``user`` in the host's /etc/passwd."""
    for line in (root / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return int(fields[2]), int(fields[3])
    raise TestbedError(f"user {user} missing from {root}/etc/passwd")


def addresses(hosts: Iterable[Host]) -> dict[str, str]:
    """Map host name to address (handy for building an Ansible inventory)."""
    return {h.name: h.address for h in hosts}
