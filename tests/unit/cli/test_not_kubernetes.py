"""Issue 26: every command that reads the cluster, against a kubeconfig whose server answers HTTP but is not a
Kubernetes API server (tests/fakes/not_kube.py: a 404 server, a web server's HTML page, a proxy's 502 page, JSON
without gitVersion, a /version without /api), exits 3 with one line: "not a Kubernetes API server at URL: why".
Before, verify passed K00 and K06 and exited 1, and doctor counted 35 checks passed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpustack.cli.app import main
from gpustack.paths import kubeconfig_path
from tests.fakes import not_kube
from tests.prometheus.cli_cluster import run_cli
from tests.unit.cli.user_env import user_env

CONFIG = (
    "nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\n"
    "  - {name: w1, address: 192.0.2.11, role: worker}\n"
)
#: verify/doctor read the hosts over SSH too: these tests ask only what is read through the API server
API_LAYERS = ("--layer", "kubernetes,gpu-operator,monitoring,grafana")
#: every command that reads the cluster through a kubeconfig it is given, and where it says so
COMMANDS: dict[str, tuple[tuple[str, ...], str]] = {
    "verify": (("verify", *API_LAYERS), "verdict"),
    "doctor": (("doctor", *API_LAYERS), "verdict"),
    "status": (("status",), "status"),
    "health": (("health",), "error"),
    "health --apply": (("health", "--apply"), "error"),
    "health release": (("health", "release", "w1", "--yes"), "error"),
    "report": (("report",), "error"),
    "diag": (("diag",), "error"),
    "grafana-password": (("grafana-password",), "error"),
}


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with a two-node config, an empty state directory, a wide terminal (one line is one)."""
    found = user_env(tmp_path, monkeypatch, CONFIG, home=True)
    monkeypatch.setenv("COLUMNS", "250")
    return found


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ei:
        main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return int(ei.value.code or 0), out, err


def said_once(where: str, out: str, err: str, said: str) -> None:
    """The one line saying it, where the command says such things."""
    if where == "verdict":  # the report's last line (the table has K00's evidence too)
        assert out.splitlines()[-1].startswith(f"UNREACHABLE: {said}; "), out
    elif where == "status":  # what this machine knows is still shown below it
        assert out.splitlines()[0] == f"cluster gpustack: {said}", out
    else:
        assert err.splitlines()[0] == f"error: {said}", err
        assert out == "", out


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", not_kube.KINDS)
def test_every_command_names_a_server_that_is_not_kubernetes(
    user: Path, capsys: pytest.CaptureFixture[str], kind: str, command: str
) -> None:
    argv, where = COMMANDS[command]
    with not_kube.serving(kind) as server:
        kc = server.write_kubeconfig(user / "kc.yaml")
        code, out, err = run(capsys, *argv, "--kubeconfig", str(kc))
    said_once(where, out, err, f"not a Kubernetes API server at {server.url}: {not_kube.REASONS[kind]}")
    assert code == 3, out + err
    assert server.paths.count("/version") == 1, "proven once per command"
    assert not [p for p in server.paths if p not in ("/version", "/api")], "nothing read before the proof"


@pytest.mark.parametrize("kind", ["404", "html"])
def test_node_remove_on_gpustacks_own_admin_conf(user: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    """`node remove` reads only gpustack's admin.conf (no --kubeconfig)."""
    with not_kube.serving(kind) as server:
        own = kubeconfig_path("gpustack", user / "state")
        own.parent.mkdir(parents=True)
        server.write_kubeconfig(own)
        code, out, err = run(capsys, "node", "remove", "w1", "--yes")
    assert code == 3 and server.paths == ["/version"], out + err
    assert err.splitlines()[0] == f"error: not a Kubernetes API server at {server.url}: {not_kube.REASONS[kind]}"


def test_a_kube_apiserver_refusing_the_token_is_not_called_something_else(
    user: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real API server answering 401 with its Status: Kubernetes, so not "not a Kubernetes API server"; each
    command reports the refusal as it did before the proof existed."""
    with not_kube.serving("refusing") as server:
        kc = server.write_kubeconfig(user / "kc.yaml")
        said = {argv[0]: run(capsys, *argv, "--kubeconfig", str(kc)) for argv in (("status",), ("health",),
                                                                                  ("verify", *API_LAYERS))}  # fmt: skip
    for _, out, err in said.values():
        assert "not a Kubernetes API server" not in out + err and "Unauthorized" in out + err, out + err
    assert said["status"][0] == 3 and said["status"][1].startswith(
        "cluster gpustack: unreachable: GET /version: Unauthorized"
    )
    code, _, err = said["health"]
    assert (code, err.splitlines()[0]) == (1, "error: the Kubernetes API answered HTTP 401 Unauthorized")
    assert "refused the kubeconfig's credentials" in err
    assert said["verify"][0] == 1 and "LIST Node: HTTP 401 Unauthorized" in said["verify"][1]  # K00's warning


def test_the_issue_over_https_in_its_own_process(tmp_path: Path) -> None:
    """The report of issue 26, as a user runs it: an HTTPS server answering 404 to everything."""
    with not_kube.serving("404", tls=True) as server:
        kc = server.write_kubeconfig(tmp_path / "kc.yaml")
        verify = run_cli("verify", kc, tmp_path, args=("--output", "json", *API_LAYERS))
        doctor = run_cli("doctor", kc, tmp_path, via="$KUBECONFIG", args=API_LAYERS)
        status = run_cli("status", kc, tmp_path, args=())
    said = f"not a Kubernetes API server at {server.url}: GET /version answered 404 Not Found"
    assert (verify.returncode, doctor.returncode, status.returncode) == (3, 3, 3), verify.stderr + doctor.stderr
    checks = {c["id"]: c for c in json.loads(verify.stdout)["checks"]}
    assert checks["K00-api-unreachable"]["status"] == "fail" and checks["K00-api-unreachable"]["evidence"] == said
    assert checks["K06-pod-to-api"]["status"] == "skip"
    assert not [i for i, c in checks.items() if c["status"] == "pass"]
    assert doctor.stdout.splitlines()[-1].startswith(f"UNREACHABLE: {said}; ")
    assert status.stdout.splitlines()[0] == f"cluster gpustack: {said}"
    assert "Traceback" not in verify.stderr + doctor.stderr + status.stderr
