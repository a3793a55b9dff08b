"""verify/doctor on a cluster not built from this machine, as a user runs them (the CLI in its own process,
a clean environment, no gpustack state): the kubeconfig from ``$KUBECONFIG`` only, ``--context`` choosing
among contexts, the cluster and context printed first, and ``doctor --fix --yes`` refusing to change a
cluster nobody named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes import scenarios as sc
from tests.fakes.kube_api import FakeKubeAPI
from tests.said import said

from .test_doctor_cli import CP_TAINT_KEY, cli_env, node_taints, taint_cluster


def two_context_kubeconfig(path: Path, servers: dict[str, str], current: str) -> Path:
    cfg: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": f"{n}-cluster", "cluster": {"server": s}} for n, s in servers.items()],
        "users": [{"name": f"{n}-admin", "user": {"token": f"{n}-token"}} for n in servers],
        "contexts": [{"name": n, "context": {"cluster": f"{n}-cluster", "user": f"{n}-admin"}} for n in servers],
    }  # fmt: skip
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def gpustack(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpustack", *args], cwd=tmp_path, env=cli_env(tmp_path, **env), capture_output=True,
        text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_kubeconfig_env_only_no_gpustack_state(tmp_path: Path) -> None:
    with FakeKubeAPI.running() as api:
        sc.healthy(1).load(api)
        url, kc = api.url, api.write_kubeconfig(tmp_path / "elsewhere.conf")
        r = gpustack(tmp_path, "verify", "--layer", "kubernetes,gpu-operator", "--no-workload", "-o", "json",
                     KUBECONFIG=f"{tmp_path / 'missing.conf'}:{kc}")  # fmt: skip
        table = gpustack(tmp_path, "verify", "--layer", "kubernetes", "--no-workload", KUBECONFIG=str(kc))
    assert not (tmp_path / "state").exists(), "nothing written: a cluster not built from this machine"
    report = json.loads(r.stdout)
    assert report["cluster"] == {"server": url, "context": "fake", "cluster": "fake", "source": "$KUBECONFIG",
                                 "kubeconfig": [str(kc)], "gpustack_cluster": False,
                                 "client_certificate_expires": ""}  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert {c["id"] for c in report["checks"] if c["status"] != "pass"} == {
        "K09-pod-network-probe",
        "G10-cuda-test-pod",
        "G18-shared-gpu-test-pod",  # --no-workload: no test pods (skipped)
    }
    assert report["summary"]["fail"] == 0 and report["summary"]["pass"] >= 8
    assert said(table.stdout).startswith(f"cluster: {url} (context fake; kubeconfig from $KUBECONFIG: {kc})"), (
        table.stdout
    )


def test_context_chooses_the_cluster(tmp_path: Path) -> None:
    with FakeKubeAPI.running() as prod, FakeKubeAPI.running() as lab:
        sc.healthy(1).load(lab)
        lab_url = lab.url
        kc = two_context_kubeconfig(tmp_path / "kc", {"prod": prod.url, "lab": lab.url}, current="prod")
        r = gpustack(tmp_path, "doctor", "--kubeconfig", str(kc), "--context", "lab", "--layer", "kubernetes",
                     "-o", "json")  # fmt: skip
        assert prod.request_count == 0, "the current-context's cluster is never asked"
        assert lab.request_count > 0
        bad = gpustack(tmp_path, "doctor", "--kubeconfig", str(kc), "--context", "staging", "--layer", "kubernetes")
    report = json.loads(r.stdout)
    assert (report["cluster"]["context"], report["cluster"]["server"], r.returncode) == ("lab", lab_url, 0), r.stderr
    assert bad.returncode == 2 and "--context staging: no such context" in bad.stderr and "prod, lab" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_fix_yes_needs_a_named_cluster(tmp_path: Path) -> None:
    with FakeKubeAPI.running() as api:
        taint_cluster(api)
        url, kc = api.url, api.write_kubeconfig(tmp_path / "someones.conf")
        refused = gpustack(tmp_path, "doctor", "--fix", "--yes", "--layer", "kubernetes", KUBECONFIG=str(kc))
        assert api.request_count == 0 and node_taints(api) == [CP_TAINT_KEY]
        named = gpustack(tmp_path, "doctor", "--fix", "--yes", "--context", "fake", "--layer", "kubernetes",
                         KUBECONFIG=str(kc))  # fmt: skip
        assert node_taints(api) == [], named.stdout + named.stderr
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"would change {url} (context fake, from $KUBECONFIG {kc}) without asking" in said(refused.stderr)
    assert "--context fake" in refused.stderr
    assert f"on cluster {url} (context fake; kubeconfig from $KUBECONFIG" in named.stdout


def test_no_kubeconfig_anywhere_is_exit_3_naming_where_it_looked(tmp_path: Path) -> None:
    r = gpustack(tmp_path, "doctor", "--layer", "kubernetes", "-o", "json")
    report = json.loads(r.stdout)
    k00 = next(c for c in report["checks"] if c["id"] == "K00-api-unreachable")
    assert r.returncode == 3 and report["cluster"] is None
    assert "admin.conf" in k00["evidence"] + k00["summary"] and ".kube/config" in k00["evidence"] + k00["summary"]


def test_every_report_format_names_the_cluster() -> None:
    from xml.etree import ElementTree as ET

    from gpustack.checks.model import Finding
    from gpustack.diagnose import report

    target = {"server": "https://10.0.0.1:6443", "context": "prod", "cluster": "prod", "source": "$KUBECONFIG",
              "kubeconfig": ["/a", "/b"], "gpustack_cluster": False}  # fmt: skip
    findings = [Finding("K01-nodes-ready", "kubernetes", "pass", "ok")]
    assert json.loads(report.render("doctor", findings, "json", target=target))["cluster"] == target
    assert json.loads(report.render("doctor", findings, "json"))["cluster"] is None
    props = ET.fromstring(report.render("verify", findings, "junit", target=target).split("?>", 1)[1]).find(
        "properties"
    )
    assert props is not None
    assert {p.get("name"): p.get("value") for p in props} == {
        "cluster.server": "https://10.0.0.1:6443", "cluster.context": "prod", "cluster.source": "$KUBECONFIG"}  # fmt: skip
    assert report.cluster_line(target) == "https://10.0.0.1:6443 (context prod; kubeconfig from $KUBECONFIG: /a:/b)"


def test_every_cluster_command_takes_the_same_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """status, diag, health and report resolve their cluster as verify and doctor do: an unknown --context is
    exit 2."""
    from gpustack.cli.app import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    kc = two_context_kubeconfig(tmp_path / "kc", {"prod": "http://127.0.0.1:9", "lab": "http://127.0.0.1:9"}, "prod")
    for argv in (["status"], ["diag"], ["health"], ["health", "release", "gpu-node-1"], ["report"]):
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--kubeconfig", str(kc), "--context", "staging"])
        assert exc.value.code == 2, argv
        assert "--context staging: no such context" in capsys.readouterr().err, argv
