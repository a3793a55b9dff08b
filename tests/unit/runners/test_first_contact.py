"""Issue 31: no silent waits. A kubeconfig whose server address takes the connection attempt and never answers
(a host that drops it: here a listening socket whose accept queue is full, so the kernel drops the SYN) is said to
be unreachable after GPUSTACK_CONNECT_TIMEOUT seconds (default 5), not after the 30 s request timeout, and a
terminal is told after 1.5 s what is waited for; a pipe is told nothing but the verdict."""

from __future__ import annotations

import io
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpustack import console as console_mod
from gpustack.errors import ConfigError
from gpustack.runners import neterr
from gpustack.runners.kube import ApiUnreachable
from gpustack.runners.kubeconfig import kube_from_file


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True

    def said(self) -> str:
        """What was written, without colour codes."""
        return re.sub(r"\x1b\[[0-9;]*m", "", self.getvalue())


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose connection attempts are never answered: a backlog of 0, already full."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    queued = []
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        queued.append(c)
    time.sleep(0.2)
    probe = socket.socket()
    probe.settimeout(0.5)
    with pytest.raises(TimeoutError):  # the precondition: this address does not answer
        probe.connect(("127.0.0.1", port))
    probe.close()
    yield port
    for c in [*queued, server]:
        c.close()


def kubeconfig(path: Path, port: int) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}', insecure-skip-tls-verify: true}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    return path


@pytest.mark.parametrize("terminal", [True, False])
def test_an_address_that_does_not_answer_is_bounded_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, silent_port: int, terminal: bool
) -> None:
    monkeypatch.setenv("GPUSTACK_CONNECT_TIMEOUT", "1.5")
    monkeypatch.setattr(console_mod, "WAIT_NOTICE_AFTER", 0.3)
    err = Tty() if terminal else io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    kube = kube_from_file(kubeconfig(tmp_path / "kc", silent_port))  # the request timeout: 30 s
    assert kube.request_timeout == 30 and kube.connect_timeout == 1.5
    t0 = time.monotonic()
    with pytest.raises(ApiUnreachable) as ei:
        kube.list_objects("v1", "Node")
    elapsed = time.monotonic() - t0
    assert 1.4 < elapsed < 10, elapsed  # one attempt of 1.5 s, not 30 s (nor four of 1.5 s)
    assert f"https://127.0.0.1:{silent_port} is unreachable: timed out" in ei.value.message
    said = err.said() if isinstance(err, Tty) else err.getvalue()
    if terminal:
        assert said == (f"waiting for the Kubernetes API at https://127.0.0.1:{silent_port} (a connection: up to "
                        "1.5 s, GPUSTACK_CONNECT_TIMEOUT) ...\n"), said  # fmt: skip
    else:
        assert said == "", said


def test_a_wait_that_ends_in_time_says_nothing() -> None:
    err = Tty()
    with console_mod.waiting("x", stream=err, after=0.5):
        time.sleep(0.05)
    time.sleep(0.6)
    assert err.said() == ""
    with console_mod.waiting("the thing (up to 3 s)", stream=err, after=0.05):
        time.sleep(0.4)
    assert err.said() == "waiting for the thing (up to 3 s) ...\n"


@pytest.mark.parametrize(("raw", "seconds"), [("", 5.0), ("2", 2.0), (" 0.5 ", 0.5), ("600", 600.0)])
def test_the_setting(raw: str, seconds: float) -> None:
    assert neterr.connect_timeout({"GPUSTACK_CONNECT_TIMEOUT": raw}) == seconds
    assert neterr.connect_timeout({}) == neterr.CONNECT_TIMEOUT == 5.0


@pytest.mark.parametrize("raw", ["0", "-1", "601", "soon", "nan", "inf"])
def test_a_bad_setting_names_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError) as ei:
        neterr.connect_timeout({"GPUSTACK_CONNECT_TIMEOUT": raw})
    assert ei.value.message.startswith(f"environment variable GPUSTACK_CONNECT_TIMEOUT={raw!r}: must be seconds")
