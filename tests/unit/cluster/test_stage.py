"""`gpustack up --only cluster` through the real CLI, with the fake helm executable (a test double
recording every call) and the fake Kubernetes API server: summary rows, convergence (no mutating
Helm call), a failing release and an unreachable API server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from tests.fakes.kube_api import FakeKubeAPI

FAKE_HELM = Path(__file__).resolve().parents[2] / "fakes" / "helm"
CONFIG = {"nodes": [{"name": "cp", "address": "192.0.2.10", "role": "control-plane", "connection": "local"}]}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[FakeKubeAPI, Path, dict[str, str]]]:
    state = tmp_path / "state"
    (state / "bin").mkdir(parents=True)
    (state / "bin" / "helm").symlink_to(FAKE_HELM)
    cfg = tmp_path / "gpustack.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    with FakeKubeAPI.running() as api:
        (state / "clusters" / "gpustack").mkdir(parents=True)
        api.write_kubeconfig(state / "clusters" / "gpustack" / "admin.conf")
        env = {
            **os.environ,
            "GPUSTACK_STATE_DIR": str(state),
            "FAKE_HELM_STATE": str(tmp_path / "helm-state"),
            "FAKE_HELM_LOG": str(tmp_path / "helm.jsonl"),
            "FAKE_HELM_API": api.url,
            "NO_COLOR": "1",
            "COLUMNS": "200",
        }
        env.pop("FAKE_HELM_FAIL", None)
        yield api, cfg, env


def up(cfg: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    """`up --only cluster`; verify is off unless the test passes ``verify=True`` semantics via extra=()."""
    extra = extra or ("--no-verify",)
    return subprocess.run(
        [sys.executable, "-m", "gpustack", "up", "--yes", "--only", "cluster", "--skip", "preflight", *extra,
         "-c", str(cfg)],
        capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def summary(env: dict[str, str]) -> dict[str, dict[str, object]]:
    runs = sorted((Path(env["GPUSTACK_STATE_DIR"]) / "runs").iterdir())
    return {row["stage"]: row for row in json.loads((runs[-1] / "summary.json").read_text())}


def mutating_helm_calls(env: dict[str, str]) -> list[list[str]]:
    log = Path(env["FAKE_HELM_LOG"])
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    argvs = [c["argv"] if isinstance(c, dict) else c for c in calls]
    return [a for a in argvs if a and a[0] in {"install", "upgrade", "uninstall", "rollback"}]


def test_fresh_then_converged(world: tuple[FakeKubeAPI, Path, dict[str, str]]) -> None:
    api, cfg, env = world
    r = up(cfg, env)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = summary(env)
    assert rows["cluster"]["status"] == "changed"
    assert [k for k in rows if k.startswith("cluster:")] == [
        "cluster:namespaces", "cluster:secrets", "cluster:releases", "cluster:crds", "cluster:manifests",
        "cluster:gpu-sharing",
    ]  # fmt: skip
    assert len(mutating_helm_calls(env)) == 3
    assert api.get("monitoring.coreos.com/v1", "ServiceMonitor", "dcgm-exporter", "monitoring")
    assert api.get("v1", "PersistentVolume", "gpustack-prometheus") is not None
    pw = Path(env["GPUSTACK_STATE_DIR"]) / "clusters" / "gpustack" / "grafana-admin-password"
    assert pw.stat().st_mode & 0o777 == 0o600
    assert pw.read_text().strip() not in r.stdout + r.stderr  # never printed
    # not exposed by default: the port-forward through the API server
    assert "Prometheus:   kubectl -n monitoring port-forward svc/kube-prometheus-stack-prometheus 9090" in r.stdout
    assert "Grafana:      kubectl -n monitoring port-forward svc/kube-prometheus-stack-grafana 3000:80" in r.stdout
    shown = subprocess.run(
        [sys.executable, "-m", "gpustack", "grafana-password", "-c", str(cfg)],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0 and shown.stdout.strip() == pw.read_text().strip()

    r = up(cfg, env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert summary(env)["cluster"]["status"] == "ok"
    assert len(mutating_helm_calls(env)) == 3  # converged: no new install/upgrade


def test_failing_release_names_it(world: tuple[FakeKubeAPI, Path, dict[str, str]]) -> None:
    _, cfg, env = world
    env["FAKE_HELM_FAIL"] = "gpu-operator"
    r = up(cfg, env)
    assert r.returncode == 1
    assert "gpu-operator" in r.stderr and "Traceback" not in r.stderr
    assert summary(env)["cluster"]["status"] == "failed"


def test_unreachable_api_is_exit_3(world: tuple[FakeKubeAPI, Path, dict[str, str]]) -> None:
    _, cfg, env = world
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    kc = Path(env["GPUSTACK_STATE_DIR"]) / "clusters" / "gpustack" / "admin.conf"
    data = yaml.safe_load(kc.read_text())
    data["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{port}"
    kc.write_text(yaml.safe_dump(data))
    r = up(cfg, env)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "unreachable" in r.stderr and "Traceback" not in r.stderr


def test_foreign_nfd_turns_off_the_operators_nfd(world: tuple[FakeKubeAPI, Path, dict[str, str]]) -> None:
    from gpustack.runners.kubeconfig import kube_from_file

    _, cfg, env = world
    kube = kube_from_file(Path(env["GPUSTACK_STATE_DIR"]) / "clusters" / "gpustack" / "admin.conf")
    kube.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nfd"}}])
    kube.apply([{
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "nfd-worker", "namespace": "nfd", "labels": {"app.kubernetes.io/name": "node-feature-discovery"}},
        "spec": {"selector": {"matchLabels": {"app": "nfd"}}, "template": {"metadata": {"labels": {"app": "nfd"}},
                 "spec": {"containers": [{"name": "w", "image": "nfd"}]}}},
    }])  # fmt: skip
    r = up(cfg, env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert operator_values(env)["nfd"]["enabled"] is False


def test_without_foreign_nfd_the_operator_brings_its_own(world: tuple[FakeKubeAPI, Path, dict[str, str]]) -> None:
    _, cfg, env = world
    assert up(cfg, env).returncode == 0
    assert operator_values(env)["nfd"]["enabled"] is True


def operator_values(env: dict[str, str]) -> dict[str, Any]:
    """The values of the fake helm's last gpu-operator revision (its release state on disk)."""
    revs = json.loads((Path(env["FAKE_HELM_STATE"]) / "gpu-operator" / "gpu-operator.json").read_text())
    return cast(dict[str, Any], revs[-1]["values"])


def test_up_ends_with_verify(world: tuple[FakeKubeAPI, Path, dict[str, str]]) -> None:
    """The fake cluster has no nodes or GPUs: `up` installs everything, then verify says so (exit 1)."""
    _, cfg, env = world
    r = up(cfg, env, "--verbose")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "▶ verify" in r.stdout and "the stack is up, but verify found problems" in r.stderr
    assert "Traceback" not in r.stderr
