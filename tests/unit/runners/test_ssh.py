"""Host-key policy against a real SSH server (paramiko, in-process, on loopback)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import paramiko
import pytest

from gpustack.errors import HostKeyError
from gpustack.runners import ssh


@contextmanager
def ssh_server(key: paramiko.PKey, delay: float = 0.0) -> Iterator[int]:
    """Accepts connections and completes the key exchange, so clients see `key`; each connection in a thread of
    its own, its key exchange ``delay`` seconds late (as a far host's round trips make it)."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(8)
    lsock.settimeout(0.2)
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        time.sleep(delay)
        t = paramiko.Transport(conn)
        t.add_server_key(key)
        try:
            t.start_server(server=paramiko.ServerInterface())
            # like sshd, keep the connection until the client hangs up (closing right after the
            # key exchange races the client's reading of it)
            deadline = time.monotonic() + 5
            while t.is_active() and time.monotonic() < deadline:
                time.sleep(0.01)
        except (paramiko.SSHException, EOFError, OSError):
            pass
        finally:
            t.close()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = lsock.accept()
            except OSError:
                continue
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        yield lsock.getsockname()[1]
    finally:
        stop.set()
        th.join(timeout=5)
        lsock.close()


@pytest.fixture(scope="module")
def host_key() -> paramiko.PKey:
    return paramiko.Ed25519Key.from_private_key_file(str(_gen_key()))


def _gen_key() -> Path:
    import subprocess
    import tempfile

    d = Path(tempfile.mkdtemp())
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "k")], check=True)
    return d / "k"


def test_unknown_then_recorded_then_known(tmp_path: Path, host_key: paramiko.PKey) -> None:
    kh = tmp_path / "known_hosts"
    with ssh_server(host_key) as port:
        target = [("127.0.0.1", port)]
        res = ssh.check_host_keys(target, kh, accept_new=False, timeout=5)
        assert [r.status for r in res] == ["unknown"]
        assert res[0].fingerprint.startswith("SHA256:")
        with pytest.raises(HostKeyError) as ei:
            ssh.raise_for_host_keys(res, kh)
        assert "--accept-new-host-keys" in (ei.value.hint or "") and res[0].fingerprint in ei.value.message
        assert not kh.exists()  # nothing recorded without the opt-in

        res = ssh.check_host_keys(target, kh, accept_new=True, timeout=5)
        assert [r.status for r in res] == ["recorded"]
        assert kh.stat().st_mode & 0o777 == 0o600
        assert f"[127.0.0.1]:{port} ssh-ed25519" in kh.read_text()

        res = ssh.check_host_keys(target, kh, accept_new=False, timeout=5)
        assert [r.status for r in res] == ["known"]
        ssh.raise_for_host_keys(res, kh)


def test_changed_key_always_stops(tmp_path: Path, host_key: paramiko.PKey) -> None:
    kh = tmp_path / "known_hosts"
    other = paramiko.Ed25519Key.from_private_key_file(str(_gen_key()))
    with ssh_server(host_key) as port:
        kh.write_text(f"[127.0.0.1]:{port} ssh-ed25519 {other.get_base64()}\n")
        for accept in (False, True):
            res = ssh.check_host_keys([("127.0.0.1", port)], kh, accept_new=accept, timeout=5)
            assert [r.status for r in res] == ["changed"]
            with pytest.raises(HostKeyError) as ei:
                ssh.raise_for_host_keys(res, kh)
            assert "CHANGED" in ei.value.message and "ssh-keygen" in (ei.value.hint or "")


def test_unreachable_host(tmp_path: Path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    res = ssh.check_host_keys([("127.0.0.1", port)], tmp_path / "kh", accept_new=True, timeout=2)
    assert [r.status for r in res] == ["unreachable"]
    with pytest.raises(HostKeyError) as ei:
        ssh.raise_for_host_keys(res, tmp_path / "kh")
    assert "cannot reach SSH" in ei.value.message


def test_known_hosts_name() -> None:
    assert ssh.known_hosts_name("h", 22) == "h"
    assert ssh.known_hosts_name("h", 2222) == "[h]:2222"


def test_hosts_are_asked_at_once_and_answered_in_the_configs_order(tmp_path: Path, host_key: paramiko.PKey) -> None:
    """Three hosts 1.5 s away each: one after the other that is 4.5 s or more; together about 1.5 s. The results
    keep the order of the config, an unreachable host among them included."""
    kh = tmp_path / "known_hosts"
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()
    with ssh_server(host_key, 1.5) as a, ssh_server(host_key, 1.5) as b, ssh_server(host_key, 1.5) as c:
        targets = [("127.0.0.1", a), ("127.0.0.1", dead_port), ("127.0.0.1", b), ("127.0.0.1", c)]
        start = time.monotonic()
        res = ssh.check_host_keys(targets, kh, accept_new=True, timeout=10)
        took = time.monotonic() - start
    assert [(r.port, r.status) for r in res] == [(a, "recorded"), (dead_port, "unreachable"), (b, "recorded"),
                                                 (c, "recorded")]  # fmt: skip
    assert took < 3.5, f"{took:.1f} s: the key exchanges ran one after the other"
    assert sorted(line.split()[0] for line in kh.read_text().splitlines()) == sorted(
        f"[127.0.0.1]:{p}" for p in (a, b, c)
    )
