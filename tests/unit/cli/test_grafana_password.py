"""`gpustack grafana-password`: gpustack's state file for its own cluster, else the Secret Grafana's Deployment
reads GF_SECURITY_ADMIN_PASSWORD from (the rules doctor's Grafana source follows), against the fake API server."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from gpustack.cli.app import main
from gpustack.constants import GRAFANA_ADMIN_SECRET, MONITORING_NAMESPACE
from tests.fakes import scenarios as sc
from tests.fakes.kube_api import FakeKubeAPI
from tests.said import said

STATE_PASSWORD = "st[bold]ate-pw:x"  # rich markup in it must be printed as is


def _main(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return int(exc.value.code or 0)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home, no $KUBECONFIG, a config for cluster "gpustack"; returns the state directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("NO_COLOR", "1")
    (tmp_path / "gpustack.yaml").write_text(
        "nodes:\n  - {name: cp, address: 192.0.2.10, role: control-plane, connection: local}\n"
    )
    return tmp_path / "state"


def _write_state_password(state: Path) -> None:
    path = state / "clusters" / "gpustack" / "grafana-admin-password"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STATE_PASSWORD + "\n")


def test_own_cluster_state_file_without_any_cluster(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    _write_state_password(state)
    assert _main(["grafana-password"]) == 0
    out, err = capsys.readouterr()
    assert out == STATE_PASSWORD + "\n" and err == ""


def test_another_cluster_reads_the_secret_grafana_uses(
    state: Path, fake_api: FakeKubeAPI, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_state_password(state)  # this machine's cluster: says nothing about the one --kubeconfig names
    fake_api.seed(sc.healthy(1).objects)
    capsys.readouterr()
    fake_api.requests.clear()
    assert _main(["grafana-password", "--kubeconfig", str(kubeconfig)]) == 0
    out, err = capsys.readouterr()
    assert out == sc.GRAFANA_PASSWORD + "\n" and err == ""
    paths = [p for m, p, _ in fake_api.requests if m == "GET"]
    assert any(p.startswith("/apis/apps/v1/deployments?") for p in paths)
    assert f"/api/v1/namespaces/{MONITORING_NAMESPACE}/secrets/{GRAFANA_ADMIN_SECRET}" in paths
    assert not [p for p in paths if p.split("?")[0].endswith("/secrets")], "Secrets are read by name, never listed"
    assert fake_api.mutating_requests() == []


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        ("Deployment", "no Grafana Deployment"),
        ("Secret", f"Secret {MONITORING_NAMESPACE}/{GRAFANA_ADMIN_SECRET} does not exist"),
    ],
)
def test_cluster_without_the_password_is_exit_2(
    state: Path, fake_api: FakeKubeAPI, kubeconfig: Path, capsys: pytest.CaptureFixture[str], drop: str, message: str
) -> None:
    fake_api.seed([o for o in sc.healthy(1).objects if o["kind"] != drop])
    capsys.readouterr()
    assert _main(["grafana-password", "--kubeconfig", str(kubeconfig)]) == 2
    out, err = capsys.readouterr()
    assert (
        out == "" and "no Grafana password (cluster " in said(err) and message in said(err) and "Traceback" not in err
    )


def test_secret_without_the_key_names_the_keys(
    state: Path, fake_api: FakeKubeAPI, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objs = sc.healthy(1).objects
    secret = next(o for o in objs if o["kind"] == "Secret" and o["metadata"]["name"] == GRAFANA_ADMIN_SECRET)
    secret["data"] = {"admin-user": base64.b64encode(b"admin").decode()}
    fake_api.seed(objs)
    capsys.readouterr()
    assert _main(["grafana-password", "--kubeconfig", str(kubeconfig)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "has no key 'admin-password' (keys: admin-user)" in said(err)


def test_nothing_to_read_is_exit_2(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No state file and no kubeconfig: nothing was tried, so nothing was unreachable (3); there is
    no password to find (2, as docs/commands.md says)."""
    capsys.readouterr()
    assert _main(["grafana-password"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "no Grafana password: no state file" in err and "no kubeconfig for cluster" in err


def test_unreachable_cluster_is_exit_3(state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeKubeAPI.running() as gone:
        kc = gone.write_kubeconfig(tmp_path / "gone")
    capsys.readouterr()
    assert _main(["grafana-password", "--kubeconfig", str(kc)]) == 3
    out, err = capsys.readouterr()
    assert out == "" and "unreachable" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kubeconfig", "nope"], "--kubeconfig nope: no such file"),
        (["--context", "other"], "--context other: no such context"),
    ],
)
def test_bad_kubeconfig_flags_are_exit_2(
    state: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    if argv[0] == "--context":
        argv = [*argv, "--kubeconfig", str(kubeconfig)]
    capsys.readouterr()
    assert _main(["grafana-password", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err
