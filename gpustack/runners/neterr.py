"""Why a connection failed, in a few words (pure): what the user reads after "unreachable:".

urllib3 (under the Kubernetes client) says ``HTTPSConnectionPool(host='10.0.0.1', port=6443): Max retries
exceeded with url: /api/v1/nodes?limit=500 (Caused by NewConnectionError(...: [Errno 111] Connection
refused))``; urllib says ``<urlopen error [Errno -2] Name or service not known>``. Both become
``connection refused`` or ``the host name does not resolve``: the address is said once, by the caller.
"""

from __future__ import annotations

import os
import re
import socket
import ssl

_ERRNO = re.compile(r"\[Errno (-?\d+)\] ([^'\")\]]+)")
#: getaddrinfo's errors (negative numbers, not errno values)
_RESOLVE = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME), socket.EAI_AGAIN}


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps: urllib3's ``reason``, urllib's ``reason``, causes and contexts."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if e in seen or len(seen) > 20:
            continue
        seen.append(e)
        for nxt in (getattr(e, "reason", None), e.__cause__, e.__context__, *getattr(e, "args", ())):
            if isinstance(nxt, BaseException):
                todo.append(nxt)
    return seen


def connection_problem(exc: BaseException) -> str:
    """A few words for why ``exc`` (a failed connection) happened: "connection refused", "timed out",
    "the host name does not resolve", "TLS: certificate verify failed: ...", "the connection was closed"."""
    chain = _chain(exc)
    names = {type(e).__name__ for e in chain}
    for e in chain:
        if isinstance(e, ssl.SSLCertVerificationError):
            return f"TLS: {e.verify_message or 'certificate verify failed'}"
    if "NameResolutionError" in names or any(isinstance(e, socket.gaierror) and e.errno in _RESOLVE for e in chain):
        return "the host name does not resolve"
    if names & {"ConnectTimeoutError", "ReadTimeoutError", "TimeoutError", "timeout"}:
        return "timed out"
    for e in chain:
        if isinstance(e, ssl.SSLError):
            return f"TLS: {e.reason or e}".lower()
        if isinstance(e, OSError) and isinstance(e.errno, int) and e.errno > 0:
            return os.strerror(e.errno).lower()
    text = " ".join(str(e) for e in chain)
    found = _ERRNO.search(text)
    if found:
        number = int(found.group(1))
        if number < 0:
            return "the host name does not resolve"
        return os.strerror(number).lower() if number else found.group(2).strip().lower()
    if "RemoteDisconnected" in text or names & {"ProtocolError", "RemoteDisconnected", "ConnectionResetError"}:
        return "the connection was closed before an answer came"
    first = str(exc).strip() or type(exc).__name__
    return first if len(first) <= 80 else first[:77] + "..."


#: seconds to wait for a TCP connection to an API server before saying it does not answer (GPUSTACK_CONNECT_TIMEOUT);
#: an address where no host answers drops the connection attempt silently, and every request would otherwise wait
#: its whole request timeout (30 s) to say so
CONNECT_TIMEOUT = 5.0
CONNECT_TIMEOUT_VAR = "GPUSTACK_CONNECT_TIMEOUT"


def connect_timeout(environ: dict[str, str] | None = None) -> float:
    """$GPUSTACK_CONNECT_TIMEOUT (seconds, more than 0, at most 600), default :data:`CONNECT_TIMEOUT`; another value
    is a ConfigError (exit 2) naming the variable."""
    from gpustack.errors import ConfigError

    raw = (os.environ if environ is None else environ).get(CONNECT_TIMEOUT_VAR, "").strip()
    if not raw:
        return CONNECT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 600:
        raise ConfigError(f"environment variable {CONNECT_TIMEOUT_VAR}={raw!r}: must be seconds, more than 0 and "
                          "at most 600", hint=f"unset it for the default ({CONNECT_TIMEOUT:g} s)")  # fmt: skip
    return value


def connecting(host: str, seconds: float) -> str:
    """What a terminal is told while a first connection to ``host`` takes long (:func:`gpustack.console.waiting`)."""
    return f"the Kubernetes API at {host} (a connection: up to {seconds:g} s, {CONNECT_TIMEOUT_VAR})"
