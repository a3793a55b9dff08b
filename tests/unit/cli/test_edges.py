"""Issue #18, "No traceback, clear words": the paths that printed a Python traceback or misled, each now
one short message naming the flag, variable or file, with the documented exit code (docs/commands.md,
"Rules every command keeps"). The exit-2 cases are in the bad-input corpus (test_bad_input.py); here are
the others: a deleted working directory, stdout on a full disk, an API server that does not answer, and
the words a connection failure is said in."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import urllib3

from gpustack.cli.app import main
from gpustack.runners.neterr import connection_problem
from tests.unit.cli.user_env import user_env

GOOD = "nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\n"


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with a config, an empty state directory, an 80-column terminal."""
    return user_env(tmp_path, monkeypatch, GOOD, home=True)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ei:
        main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return int(ei.value.code or 0), out, err


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens there


def test_a_deleted_working_directory_is_one_message(
    user: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Even with -c /abs/path: `os.getcwd()` raised FileNotFoundError from deep inside."""
    gone = user / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    for argv in (["plan", "-c", str(user / "gpustack.yaml")], ["version"]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "", err
        assert "the current directory no longer exists" in err and "hint: cd to a directory" in err


def test_stdout_on_a_full_disk_is_one_message(user: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """OSError 28 from rich's write was a traceback."""
    with open("/dev/full", "w") as full:
        saved = sys.stdout
        sys.stdout = full
        try:
            with pytest.raises(SystemExit) as ei:
                main(["plan"])
        finally:
            sys.stdout = saved
    _, err = capsys.readouterr()
    assert ei.value.code == 1
    assert err == "error: cannot write the output (standard output): No space left on device\n", err


def test_stdout_on_a_full_disk_in_a_real_process(user: Path) -> None:
    """`version -o json` is buffered until the interpreter exits: the flush there must not add
    "Exception ignored ... OSError" to the one message either."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "gpustack", "version", "-o", "json"], stdout=full, stderr=subprocess.PIPE,
                           text=True, env=env, timeout=60)  # fmt: skip
    assert r.returncode == 1 and r.stderr.splitlines() == [
        "error: cannot write the output (standard output): No space left on device"
    ], r.stderr


def write_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}', insecure-skip-tls-verify: true}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    return path


@pytest.mark.parametrize("command", ["diag", "health", "status"])
def test_an_api_server_that_does_not_answer_is_said_in_a_few_words(
    user: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """Not urllib3's "HTTPSConnectionPool(host=..., port=...): Max retries exceeded with url: ... (Caused by
    NewConnectionError(...))": where (host:port) and why (connection refused)."""
    port = closed_port()
    kc = write_kubeconfig(user / "kc.yaml", f"https://127.0.0.1:{port}")
    code, out, err = run(capsys, command, "--kubeconfig", str(kc))
    said = out + err
    assert code in (1, 3), said  # status reports an unreachable cluster and exits 1 (docs/lifecycle.md)
    assert f"the Kubernetes API at https://127.0.0.1:{port} is unreachable: connection refused" in " ".join(
        said.split()
    ), said
    for noise in ("HTTPSConnectionPool", "Max retries", "NewConnectionError", "Errno"):
        assert noise not in said, said


def test_prometheus_that_does_not_answer_is_said_in_a_few_words(user: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = closed_port()
    code, _, err = run(capsys, "report", "--prometheus-url", f"http://127.0.0.1:{port}")
    assert code == 3 and "connection refused" in err and "Errno" not in err, err


# --- the few words, from real failures -------------------------------------------------------------


def test_connection_problem_from_urllib3_and_urllib() -> None:
    port = closed_port()
    with pytest.raises(urllib3.exceptions.HTTPError) as u3:
        urllib3.PoolManager().request("GET", f"http://127.0.0.1:{port}/", retries=urllib3.Retry(0))
    assert "Max retries" in str(u3.value)  # what the user used to read
    assert connection_problem(u3.value) == "connection refused"
    with pytest.raises(urllib.error.URLError) as ul:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
    assert connection_problem(ul.value) == "connection refused"
    with pytest.raises(urllib.error.URLError) as dns:
        urllib.request.urlopen("http://name-that-does-not-exist.invalid/", timeout=5)
    assert connection_problem(dns.value) == "the host name does not resolve"


def test_connection_problem_for_timeouts_and_tls() -> None:
    assert connection_problem(TimeoutError("timed out")) == "timed out"
    cert = ssl.SSLCertVerificationError(1, "certificate verify failed")
    cert.verify_message = "self-signed certificate"
    wrapped = urllib3.exceptions.MaxRetryError(None, "/api", reason=urllib3.exceptions.SSLError(cert))  # type: ignore[arg-type]
    assert connection_problem(wrapped) == "TLS: self-signed certificate"


def test_an_os_error_nothing_else_caught_names_its_file(
    user: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The safety net: one line naming the file, exit 1, and stdout left working."""
    from gpustack.cli import version

    def unreadable(*_: object) -> None:
        raise PermissionError(13, "Permission denied", "/etc/gpustack/some-file")

    monkeypatch.setattr(version, "print_versions", unreadable)
    code, _, err = run(capsys, "version")
    assert code == 1 and err == "error: /etc/gpustack/some-file: Permission denied\n", err
    print("stdout still works")
    assert capsys.readouterr().out == "stdout still works\n"


def test_a_server_that_is_not_an_api_server_is_one_message(user: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A kubeconfig whose server answers, but not as an API server (a proxy, a web server): the
    client's ApiException was a traceback, then "the Kubernetes API answered HTTP 404" (exit 1)."""
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        kc = write_kubeconfig(user / "kc.yaml", f"http://127.0.0.1:{server.server_port}")
        code, _, err = run(capsys, "health", "--kubeconfig", str(kc))
    finally:
        server.shutdown()
    said = " ".join(err.split())  # issue 26: named for what it is, exit 3 (tests/unit/cli/test_not_kubernetes.py)
    assert code == 3 and f"not a Kubernetes API server at http://127.0.0.1:{server.server_port}" in said, err
    assert "GET /version answered 404 Not Found" in said and "kubeconfig's server" in said
