"""doctor as a user runs it, against the fake API server (real ``kubernetes`` client), with the admin
kubeconfig where ``gpustack up`` leaves it (``$GPUSTACK_STATE_DIR/clusters/<name>/admin.conf``):

- ``gpustack doctor --bundle FILE`` from the CLI, in its own process: a 0600 .tar.gz holding the cluster
  objects, the failing pods' log tails and the report, and no Secret value planted in the cluster;
- ``doctor --fix`` at a terminal: the safe fix is shown, the answer is read the way ``Console.confirm``
  reads it (``input()`` on a terminal stdin); "n" applies nothing, "y" removes the single node's
  control-plane taint and checks again. Once in-process, once through the CLI on a pseudo-terminal.
"""

from __future__ import annotations

import base64
import io
import json
import os
import pty
import select
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.diagnose.engine import DiagnoseOptions, diagnose
from gpustack.paths import kubeconfig_path
from tests.fakes import scenarios as sc
from tests.fakes.kube_api import FakeKubeAPI

SECRET = "pl4nted-Gr4fana-s3cret"  # the value of a Secret in the cluster; also where a careless pod leaks it
CP_TAINT_KEY = "node-role.kubernetes.io/control-plane"


def admin_conf(api: FakeKubeAPI, state: Path) -> Path:
    """Where `gpustack up` writes the admin kubeconfig of the default cluster ("gpustack")."""
    path = kubeconfig_path("gpustack", state)
    path.parent.mkdir(parents=True, mode=0o700)
    return api.write_kubeconfig(path)


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean environment (no $KUBECONFIG, HOME in tmp_path); PYTHONPATH kept so the CLI runs this checkout."""
    keep = {k: os.environ[k] for k in ("PYTHONPATH", "GPUSTACK_TODAY") if k in os.environ}
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GPUSTACK_STATE_DIR": str(tmp_path / "state"),
            "NO_COLOR": "1", "COLUMNS": "250", **keep, **extra}  # fmt: skip


# --- doctor --bundle ---------------------------------------------------------------------------------


def crashloop_with_planted_secret() -> tuple[sc.Scenario, str, str]:
    """The crashloop failure, with a Secret in the cluster whose value the failing pod also leaks (its env,
    its crash log) and a Service annotation carries in a URL. Returns (scenario, failing check, log key)."""
    s, failing = sc.failure("crashloop")
    pod = s.pods("gpu-operator-6c9f7b8d5", "gpu-operator")[0]
    name = pod["metadata"]["name"]
    pod["spec"]["containers"][0]["env"] = [
        {"name": "GRAFANA_ADMIN_PASSWORD", "value": SECRET},
        {"name": "GRAFANA_ADMIN_PASSWORD_REF", "valueFrom": {"secretKeyRef": {"name": "grafana-admin", "key": "pw"}}},
        {"name": "LOG_LEVEL", "value": "debug"},
    ]
    s.objects.append({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "grafana-admin", "namespace": "monitoring", "annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
                {"apiVersion": "v1", "kind": "Secret", "stringData": {"pw": SECRET}})}},
        "data": {"pw": base64.b64encode(SECRET.encode()).decode()},
    })  # fmt: skip
    s.find("Service", "kube-prometheus-stack-grafana", "monitoring")["metadata"]["annotations"] = {
        "example.com/probe": f"https://admin:{SECRET}@grafana.example.com/api/health"
    }
    s.logs[("gpu-operator", name, "main")] = (
        f'level=info msg="logging in to grafana" user=admin password={SECRET}\n'
        "panic: runtime error: invalid memory address or nil pointer dereference\n"
    )
    return s, failing, f"logs/gpu-operator_{name}_main.log"


def read_members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        out = {}
        for member in tar.getmembers():
            f = tar.extractfile(member)
            assert f is not None, member.name
            out[member.name.removeprefix("gpustack-bundle/")] = f.read()
        return out


def plant_runs(state: Path) -> None:
    """Run directories as `gpustack up` and `gpustack reset` leave them: the bundle carries the last
    `up` of the cluster (not the newer reset, not the older up), redacted."""

    def run(stamp: str, command: str, stdout: str) -> None:
        d = state / "runs" / stamp
        (d / "facts").mkdir(parents=True)
        (d / "ansible/artifacts/site").mkdir(parents=True)
        (d / "run.json").write_text(json.dumps({"command": command, "cluster": "gpustack"}))
        (d / "summary.json").write_text(json.dumps([{"stage": "os", "status": "failed"}]))
        (d / "config.json").write_text(json.dumps({"proxy": {"http": f"http://ops:{SECRET}@proxy.example.com:3128"}}))
        (d / "facts/gpu-node-1.json").write_text(json.dumps({"hostname": "gpu-node-1", "os_id": "ubuntu"}))
        (d / "ansible/artifacts/site/stdout").write_text(stdout)

    run("20261101T000000.000000Z", "up", "an older up\n")
    run("20261102T000000.000000Z", "up", f"TASK [os_prep : Install] fatal: [gpu-node-1]: token={SECRET} apt failed\n")
    run("20261103T000000.000000Z", "reset", "a later reset\n")


def test_doctor_bundle_from_the_cli(tmp_path: Path) -> None:
    scenario, failing, log_member = crashloop_with_planted_secret()
    bundle = tmp_path / "support" / "bundle.tar.gz"
    bundle.parent.mkdir()  # like cp and tar, --bundle does not create directories (paths.check_output_path)
    (tmp_path / "gpustack.yaml").write_text(
        "nodes: [{name: gpu-node-1, address: 192.0.2.10, role: control-plane}]\n"
        "alerting: {receivers: [{type: webhook, name: hook, url: 'https://hooks.example.com/services/"
        + SECRET
        + "'}]}\n"
    )
    plant_runs(tmp_path / "state")
    with FakeKubeAPI.running() as api:
        scenario.load(api)
        admin_conf(api, tmp_path / "state")
        r = subprocess.run(
            [sys.executable, "-m", "gpustack", "doctor", "--layer", "kubernetes,gpu-operator", "--bundle", str(bundle)],
            cwd=tmp_path, env=cli_env(tmp_path), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert any(p.startswith("/api/v1/pods") for _, p, _ in api.requests), (
            r.stdout + r.stderr
        )  # doctor read the fake cluster
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert f"support bundle (redacted): {bundle}" in r.stdout
    assert bundle.is_file() and stat.S_IMODE(bundle.stat().st_mode) == 0o600
    assert [p.name for p in bundle.parent.iterdir()] == ["bundle.tar.gz"], "no temporary file left behind"

    members = read_members(bundle)
    last_up = {f"last-up/{m}" for m in ("run-directory.txt", "run.json", "summary.json", "config.json",
                                        "facts/gpu-node-1.json", "ansible/ansible-site.log")}  # fmt: skip
    assert set(members) == {"version.json", "snapshot.json", "findings.json", "config.json", log_member} | last_up
    assert members["last-up/run-directory.txt"].decode().strip().endswith("20261102T000000.000000Z")
    assert "apt failed" in members["last-up/ansible/ansible-site.log"].decode()
    assert json.loads(members["config.json"])["nodes"][0]["name"] == "gpu-node-1"
    assert json.loads(members["last-up/facts/gpu-node-1.json"])["os_id"] == "ubuntu"
    snap = json.loads(members["snapshot.json"])
    names = {(o["kind"], o["metadata"]["name"]) for kind in ("Node", "Pod", "DaemonSet") for o in snap["kube"][kind]}
    assert ("Node", "gpu-node-1") in names and ("DaemonSet", "nvidia-device-plugin-daemonset") in names
    assert len(snap["kube"]["Pod"]) == sum(1 for o in scenario.objects if o["kind"] == "Pod")
    env = {
        e["name"]: e.get("value")
        for p in snap["kube"]["Pod"]
        for c in p["spec"]["containers"]
        for e in c.get("env", [])
    }
    assert env["LOG_LEVEL"] == "debug", "ordinary data survives redaction"
    report = json.loads(members["findings.json"])
    assert report["command"] == "doctor"
    assert failing in {c["id"] for c in report["checks"] if c["status"] == "fail"}
    assert "panic: runtime error" in members[log_member].decode()
    assert json.loads(members["version.json"])["command"] == "doctor"
    encoded = base64.b64encode(SECRET.encode()).decode()
    for name, content in members.items():
        text = content.decode()
        assert SECRET not in text and encoded not in text, f"the planted secret leaked into {name}"


# --- doctor --fix at a terminal ----------------------------------------------------------------------


class Terminal(io.StringIO):
    """A stream that says it is a terminal (what rich and ``sys.stdin.isatty()`` look at)."""

    def isatty(self) -> bool:
        return True


def taint_cluster(api: FakeKubeAPI) -> None:
    scenario, failing = sc.failure("control-plane-taint")
    assert failing == "K02-control-plane-taint"
    scenario.load(api)


def node_taints(api: FakeKubeAPI) -> list[str]:
    node = api.get("v1", "Node", "gpu-node-1")
    assert node is not None
    return [t["key"] for t in (node.get("spec") or {}).get("taints") or []]


def doctor_fix_at_a_terminal(answer: str, api: FakeKubeAPI, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> tuple[int, dict[str, str], str, Terminal]:  # fmt: skip
    """doctor --fix --layer kubernetes with stdin/stdout terminals; returns (exit code, status by check
    id after everything, output, stdin)."""
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.delenv("CI", raising=False)  # Console.interactive is False under CI
    admin_conf(api, tmp_path / "state")
    stdin, out = Terminal(answer + "\n"), Terminal()
    monkeypatch.setattr(sys, "stdin", stdin)
    console = Console(stream=out, color=False)
    assert console.interactive
    code, findings, _ = diagnose(Config(), DiagnoseOptions(command="doctor", layers=("kubernetes",), fix=True), console)
    return code, {f.id: f.status for f in findings}, out.getvalue(), stdin


def test_fix_answered_no_applies_nothing(
    fake_api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taint_cluster(fake_api)
    code, status, out, stdin = doctor_fix_at_a_terminal("n", fake_api, tmp_path, monkeypatch)
    assert "doctor --fix will run" in out and f"kubectl taint nodes gpu-node-1 {CP_TAINT_KEY}-" in out
    assert "Apply 1 fix(es) to context fake?" in out
    assert f"on cluster {fake_api.url} (context fake, gpustack's cluster" in out, "the cluster it would change"
    assert stdin.tell() == len("n\n"), "the answer was read"
    assert "not applied" in out and "no terminal" not in out
    assert fake_api.mutating_requests() == []
    assert node_taints(fake_api) == [CP_TAINT_KEY]
    assert code == 1 and status["K02-control-plane-taint"] == "fail"


def test_fix_answered_yes_removes_the_taint_and_checks_again(
    fake_api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taint_cluster(fake_api)
    code, status, out, stdin = doctor_fix_at_a_terminal("y", fake_api, tmp_path, monkeypatch)
    assert "Apply 1 fix(es) to context fake?" in out and stdin.tell() == len("y\n")
    assert [(m, p.split("?")[0]) for m, p, _ in fake_api.mutating_requests()] == [("PATCH", "/api/v1/nodes/gpu-node-1")]
    assert node_taints(fake_api) == []
    assert "removed the control-plane taint from node gpu-node-1" in out
    assert "checking again after the fixes" in out
    assert "K02-control-plane-taint after the fix: pass" in out
    assert status["K02-control-plane-taint"] == "pass", "the report is the one after the fix"
    # the unscheduled pod stays Pending in the fake (no scheduler): still a failure, so exit 1
    assert code == 1 and status["K07-pod-failures"] == "fail"


def _read_until(fd: int, needle: bytes, timeout: float) -> bytes:
    buf = b""
    deadline = time.monotonic() + timeout
    while needle not in buf and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            buf += chunk
    return buf


@pytest.mark.parametrize("answer", ["n", "y"])
def test_cli_fix_asks_on_a_real_terminal(answer: str, fake_api: FakeKubeAPI, tmp_path: Path) -> None:
    """`gpustack doctor --fix` in its own process on a pseudo-terminal: it asks, and does what the answer says."""
    taint_cluster(fake_api)
    admin_conf(fake_api, tmp_path / "state")
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpustack", "doctor", "--fix", "--layer", "kubernetes"],
        cwd=tmp_path, env=cli_env(tmp_path, TERM="dumb"), stdin=terminal, stdout=terminal, stderr=terminal,
        close_fds=True,
    )  # fmt: skip
    os.close(terminal)
    try:
        before = _read_until(controller, b"Apply 1 fix(es) to context fake?", timeout=60)
        assert b"Apply 1 fix(es) to context fake?" in before, before.decode(errors="replace")
        assert fake_api.mutating_requests() == [], "nothing is applied before the answer"
        os.write(controller, answer.encode() + b"\n")
        after = _read_until(controller, b"\x00never", timeout=60).decode(errors="replace")
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(controller)
    if answer == "n":
        assert "not applied" in after and fake_api.mutating_requests() == []
        assert node_taints(fake_api) == [CP_TAINT_KEY]
    else:
        assert "removed the control-plane taint from node gpu-node-1" in after, after
        assert "K02-control-plane-taint after the fix: pass" in after
        assert node_taints(fake_api) == []
    assert code == 1, after  # K07: the fake has no scheduler, the pod stays Pending
