"""The CLI as a user meets it: exit codes, messages, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.said import said

GOOD = "nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\n  - {name: w1, address: 192.0.2.11}\n"

#: the CLI under test is this checkout (not whichever gpustack is installed), judging support horizons on the
#: suite's day (tests/conftest.py)
THIS_CHECKOUT = {k: os.environ[k] for k in ("PYTHONPATH", "GPUSTACK_TODAY") if k in os.environ}


def run(*args: str, cwd: Path, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        **THIS_CHECKOUT,
        "HOME": str(cwd),
        "GPUSTACK_STATE_DIR": str(cwd / "state"),
        "NO_COLOR": "1",
        "COLUMNS": "200",
    }
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "gpustack", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    p = tmp_path / "gpustack.yaml"
    p.write_text(GOOD)
    return p


def test_version(tmp_path: Path) -> None:
    r = run("version", cwd=tmp_path)
    assert r.returncode == 0 and "gpustack 0.1.0" in r.stdout and "kube-prometheus-stack" in r.stdout


def test_plan_lists_stages_and_hosts(tmp_path: Path, cfg: Path) -> None:
    r = run("plan", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for stage in (
        "preflight",
        "os",
        "firewall",
        "containerd",
        "kubernetes",
        "control-plane",
        "workers",
        "network",
        "helm",
    ):
        assert stage in r.stdout
    assert "cp1, w1" in r.stdout
    named = run("plan", "up", cwd=tmp_path)
    assert named.returncode == 0 and named.stdout == r.stdout, "`plan` is `plan up`"
    other = run("plan", "no-such-command", cwd=tmp_path)
    assert other.returncode == 2 and "no plan for 'no-such-command'" in other.stderr and "Traceback" not in other.stderr
    # node add/remove name their nodes: the plan shows them where the command's targets go
    here = {"PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    add = run("plan", "node-add", "w1", cwd=tmp_path, env_extra=here)
    assert add.returncode == 0 and "ready" in add.stdout and "│ w1 " in add.stdout, add.stdout
    assert run("plan", "node-remove", "w9", cwd=tmp_path, env_extra=here).returncode == 2


def test_render_writes_files(tmp_path: Path, cfg: Path) -> None:
    r = run("render", "--out", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    inv = yaml.safe_load((tmp_path / "out/ansible/inventory.yaml").read_text())
    assert "cp1" in inv["all"]["children"]["control_plane"]["hosts"]
    kubeadm = list(yaml.safe_load_all((tmp_path / "out/kubeadm/kubeadm-config.yaml").read_text()))
    assert kubeadm[0]["localAPIEndpoint"]["advertiseAddress"] == "192.0.2.10"
    ev = yaml.safe_load((tmp_path / "out/ansible/extravars.yaml").read_text())
    assert ev["gpustack_pod_cidr"] == "10.244.0.0/16"
    # the cluster layer, from the same functions `up` applies
    for release in ("gpu-operator", "kube-prometheus-stack", "dcgm-exporter"):
        assert (tmp_path / f"out/values/{release}.yaml").is_file()
    kps = yaml.safe_load((tmp_path / "out/values/kube-prometheus-stack.yaml").read_text())
    assert kps["prometheus"]["prometheusSpec"]["serviceMonitorSelectorNilUsesHelmValues"] is False
    sm = list(yaml.safe_load_all((tmp_path / "out/manifests/dcgm-exporter.servicemonitor.yaml").read_text()))
    assert sm[0]["kind"] == "ServiceMonitor"
    for name in ("gpu-alerts.prometheusrule.yaml", "grafana-dashboard.configmap.yaml", "storage.yaml"):
        assert (tmp_path / "out/manifests" / name).is_file()
    assert not list((tmp_path / "out").rglob("*secret*"))


def test_render_follows_recorded_facts(tmp_path: Path, cfg: Path) -> None:
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "cp1.json").write_text(
        '{"nvidia_pci_devices": [{"slot": "0000:3b:00.0"}], "nvidia_driver_version": "595.91.07"}'
    )
    r = run("render", "--out", "out", "--facts", str(facts), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    gpu = yaml.safe_load((tmp_path / "out/values/gpu-operator.yaml").read_text())
    assert gpu["driver"]["enabled"] is False  # a preinstalled driver was found
    r = run("render", "--out", "out", "--facts", str(tmp_path / "nope"), cwd=tmp_path)
    assert r.returncode == 2 and "not a directory" in r.stderr


def test_render_checks_a_mig_name_against_the_hosts_own_gpus(tmp_path: Path) -> None:
    """all-2g.20gb is an H100 configuration (it passes load time), but this host has A30s: with the host facts
    known, render refuses it before anything is written (issue 29)."""
    (tmp_path / "gpustack.yaml").write_text(
        "nodes:\n  - {name: cp1, address: 10.0.0.10, role: control-plane, user: ops,\n"
        "     gpu_sharing: {mode: mig, profile: all-2g.20gb}}\n"
    )
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "cp1.json").write_text('{"nvidia_pci_devices": [{"slot": "0000:3b:00.0", "device_id": "0x20b7"}]}')
    assert run("render", "--out", "plain", cwd=tmp_path).returncode == 0  # no facts: any family's name loads
    r = run("render", "--out", "out", "--facts", str(facts), cwd=tmp_path)
    assert r.returncode == 2 and "P26-gpu-sharing" in r.stderr, r.stderr
    assert "cp1: A30 24GB (10de:20b7) cannot take MIG configuration all-2g.20gb" in " ".join(r.stderr.split())
    assert "all-1g.6gb" in r.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("nodes: [", "invalid YAML"),
        (GOOD + "bogus: 1\n", "gpustack.yaml:4: bogus: unknown key"),
        (GOOD.replace("192.0.2.11", "192.0.2.10"), "duplicate node address"),
    ],
)
def test_bad_config_exit_2_without_traceback(tmp_path: Path, text: str, needle: str) -> None:
    (tmp_path / "gpustack.yaml").write_text(text)
    for cmd in (["plan"], ["render", "--out", "o"], ["up", "--yes"]):
        r = run(*cmd, cwd=tmp_path)
        assert r.returncode == 2, (cmd, r.stdout, r.stderr)
        assert needle in r.stderr
        assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp_path / "state" / "runs").exists()  # nothing started


def test_unknown_stage_is_usage_error(tmp_path: Path, cfg: Path) -> None:
    r = run("up", "--only", "nope", "--yes", cwd=tmp_path)
    assert r.returncode == 2 and "unknown stage nope" in r.stderr and "Traceback" not in r.stderr


def test_up_without_terminal_needs_yes(tmp_path: Path, cfg: Path) -> None:
    r = run("up", cwd=tmp_path)
    assert r.returncode == 2 and "--yes" in r.stderr


def test_unknown_option_is_exit_2(tmp_path: Path) -> None:
    r = run("up", "--frobnicate", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_init_writes_valid_example_and_refuses_overwrite(tmp_path: Path) -> None:
    assert run("init", cwd=tmp_path).returncode == 0
    text = (tmp_path / "gpustack.yaml").read_text()
    assert "control-plane" in text
    again = run("init", cwd=tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr


def test_verify_and_doctor_never_pass_on_nothing(tmp_path: Path, cfg: Path) -> None:
    for cmd in ("verify", "doctor"):
        r = run(cmd, "--check", "Z99", cwd=tmp_path)
        assert r.returncode == 2 and "unknown check id" in r.stderr, r.stderr
        r = run(cmd, "--output", "yaml", cwd=tmp_path)
        assert r.returncode == 2 and "--output yaml" in r.stderr


# --- verify / doctor against another cluster (--kubeconfig), through a fake API server -------------


def _served(objects: list[dict[str, object]], tmp_path: Path) -> tuple[Any, Path]:
    from tests.fakes.kube_api import FakeKubeAPI

    api = FakeKubeAPI().start()
    api.seed(objects)
    return api, api.write_kubeconfig(tmp_path / "other-cluster.conf")


def test_doctor_reads_the_cluster_named_by_kubeconfig(tmp_path: Path) -> None:
    from tests.fakes import scenarios

    scenario, failing_id = scenarios.failure("control-plane-taint")
    api, kc = _served(scenario.objects, tmp_path)
    try:
        r = run("doctor", "--kubeconfig", str(kc), "--layer", "kubernetes,gpu-operator", "-o", "json", cwd=tmp_path)
    finally:
        api.stop()
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    assert report["command"] == "doctor"
    failed = {c["id"] for c in report["checks"] if c["status"] == "fail"}
    assert failing_id in failed
    assert any(path.startswith("/api/v1/pods") for _, path, _ in api.requests)


def test_verify_passes_a_healthy_cluster_named_by_kubeconfig(tmp_path: Path) -> None:
    from tests.fakes import scenarios

    api, kc = _served(scenarios.healthy(3).objects, tmp_path)
    try:
        r = run("verify", "--no-workload", "--kubeconfig", str(kc), "--layer", "kubernetes,gpu-operator",
                "-o", "json", cwd=tmp_path)  # fmt: skip
    finally:
        api.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads(r.stdout)["summary"]
    assert summary["fail"] == 0 and summary["pass"] > 0


def test_a_missing_kubeconfig_is_a_usage_error(tmp_path: Path) -> None:
    for cmd in ("verify", "doctor"):
        r = run(cmd, "--kubeconfig", str(tmp_path / "nope.conf"), cwd=tmp_path)
        assert r.returncode == 2 and "nope.conf: no such file" in said(r.stderr), r.stderr
        assert "Traceback" not in r.stderr
