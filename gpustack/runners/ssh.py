"""SSH host-key policy (paramiko): every host's key is checked against known_hosts before
Ansible connects. Unknown keys stop the run unless the user opted in to record them; a changed
key always stops the run."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import paramiko

from gpustack.errors import HostKeyError
from gpustack.paths import ensure_private_dir, replacing

#: key exchanges at once (check_host_keys)
FETCH_THREADS = 16
PREFERRED_KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")


@dataclass(frozen=True)
class HostKeyResult:
    host: str
    port: int
    status: str  # "known" | "recorded" | "unknown" | "changed" | "unreachable"
    fingerprint: str = ""
    detail: str = ""


def known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def fetch_host_key(host: str, port: int, timeout: float, prefer: tuple[str, ...] = ()) -> paramiko.PKey:
    """The server's host key, negotiating the types in `prefer` first (as OpenSSH prefers the
    key types it already knows for a host)."""
    sock = socket.create_connection((host, port), timeout=timeout)
    transport = paramiko.Transport(sock)
    try:
        opts = transport.get_security_options()
        order = tuple(dict.fromkeys((*prefer, *PREFERRED_KEY_TYPES)))
        available = [k for k in order if k in opts.key_types]
        opts.key_types = tuple(available) or opts.key_types
        transport.start_client(timeout=timeout)
        return transport.get_remote_server_key()
    finally:
        transport.close()


def fingerprint(key: paramiko.PKey) -> str:
    return key.fingerprint  # "SHA256:..." as OpenSSH prints it


def check_host_keys(
    hosts: Iterable[tuple[str, int]],
    known_hosts: Path,
    *,
    accept_new: bool,
    timeout: float = 10.0,
) -> list[HostKeyResult]:
    path = known_hosts.expanduser()
    db = paramiko.HostKeys()
    if path.exists():
        try:
            db.load(str(path))
        except (OSError, paramiko.SSHException) as exc:
            raise HostKeyError(f"cannot read known_hosts file {path}: {exc}") from None
    targets = list(hosts)

    def fetch(target: tuple[str, int]) -> paramiko.PKey | Exception:
        host, port = target
        entry = db.lookup(known_hosts_name(host, port))
        try:
            return fetch_host_key(host, port, timeout, prefer=tuple(entry.keys()) if entry is not None else ())
        except (OSError, EOFError, paramiko.SSHException) as exc:
            return exc  # EOFError: the server dropped the connection during the key exchange

    # every host's key exchange at once (a handshake is a few round trips: one after the other, a large cluster
    # waited seconds here); the verdicts and any recording after, in the config's order
    with ThreadPoolExecutor(max_workers=max(1, min(FETCH_THREADS, len(targets)))) as pool:
        fetched = list(pool.map(fetch, targets))
    results: list[HostKeyResult] = []
    recorded = False
    for (host, port), key in zip(targets, fetched, strict=True):
        name = known_hosts_name(host, port)
        if isinstance(key, Exception):
            results.append(HostKeyResult(host, port, "unreachable", detail=str(key) or type(key).__name__))
            continue
        fp = fingerprint(key)
        entry = db.lookup(name)
        if entry is not None and key.get_name() in entry:
            if entry[key.get_name()] == key:
                results.append(HostKeyResult(host, port, "known", fp))
            else:
                results.append(HostKeyResult(host, port, "changed", fp))
            continue
        if entry is not None and entry.keys():
            # A key of another type is known; OpenSSH would negotiate that type. Trust only an equal key.
            results.append(
                HostKeyResult(
                    host,
                    port,
                    "changed" if not accept_new else "unknown",
                    fp,
                    detail=f"known_hosts has {', '.join(entry.keys())} only",
                )
            )
            if not accept_new:
                continue
        if accept_new:
            db.add(name, key.get_name(), key)
            recorded = True
            results.append(HostKeyResult(host, port, "recorded", fp))
        else:
            results.append(HostKeyResult(host, port, "unknown", fp))
    if recorded:
        if not path.parent.exists():
            ensure_private_dir(path.parent)
        with replacing(path) as tmp:  # 0600 from the start, whatever the umask
            db.save(str(tmp))
    return results


def raise_for_host_keys(results: list[HostKeyResult], known_hosts: Path) -> None:
    unreachable = [r for r in results if r.status == "unreachable"]
    if unreachable:
        lines = [f"{r.host}:{r.port}: {r.detail}" for r in unreachable]
        raise HostKeyError(
            "cannot reach SSH on:\n  " + "\n  ".join(lines),
            hint="check the node address/port in gpustack.yaml, that sshd runs, and that no firewall blocks port 22",
        )
    changed = [r for r in results if r.status == "changed"]
    if changed:
        lines = [f"{r.host}:{r.port} now presents {r.fingerprint}" for r in changed]
        raise HostKeyError(
            "SSH host key CHANGED (possible man-in-the-middle):\n  " + "\n  ".join(lines),
            hint="if the host was reinstalled, remove the old key with "
            + "; ".join(f"ssh-keygen -f {known_hosts} -R '{known_hosts_name(r.host, r.port)}'" for r in changed),
        )
    unknown = [r for r in results if r.status == "unknown"]
    if unknown:
        lines = [f"{r.host}:{r.port} {r.fingerprint}" for r in unknown]
        raise HostKeyError(
            "unknown SSH host key(s) (not in " + str(known_hosts) + "):\n  " + "\n  ".join(lines),
            hint="verify the fingerprints out of band (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub on the host), "
            "then re-run with --accept-new-host-keys to record them",
        )


def unreachable_ports(hosts: list[tuple[str, int]], *, timeout: float) -> dict[tuple[str, int], str]:
    """The (host, port) pairs no TCP connection reaches within ``timeout``, each with the reason (nothing is sent)."""

    def probe(target: tuple[str, int]) -> str | None:
        try:
            socket.create_connection(target, timeout=timeout).close()
        except OSError as exc:
            return str(exc) or type(exc).__name__
        return None

    if not hosts:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(FETCH_THREADS, len(hosts)))) as pool:
        found = list(pool.map(probe, hosts))
    return {t: why for t, why in zip(hosts, found, strict=True) if why is not None}
