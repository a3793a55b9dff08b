"""`gpustack version` and `plan`: the matrix of the chosen versions and every artifact with its checksum."""

from __future__ import annotations

import json
from pathlib import Path

from gpustack.config import pins

from .test_cli import GOOD, run


def test_version_table_lists_matrix_and_checksums(tmp_path: Path) -> None:
    r = run("version", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "compatibility matrix" in r.stdout
    for minor, line in pins.KUBERNETES_LINES.items():
        assert minor in r.stdout and f"pause:{line.pause}" in r.stdout
    assert pins.CONTAINERD_SHA256[pins.CONTAINERD_VERSION]["amd64"] in r.stdout
    assert pins.KUBERNETES_APT_KEY_FINGERPRINT in r.stdout


def test_version_json_for_a_config(tmp_path: Path) -> None:
    cfg = tmp_path / "gpustack.yaml"
    cfg.write_text(GOOD + "versions:\n  kubernetes: '1.35'\n")
    r = run("version", "-c", str(cfg), "--output", "json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["gpustack"] == "0.1.0"
    assert [m["kubernetes"] for m in data["matrix"]] == ["1.35"]
    assert data["matrix"][0]["cgroup v2"] == "required"
    arts = {(a["name"], a["arch"]): a for a in data["artifacts"]}
    assert arts[("runc", "amd64")]["checksum"] == "sha256:" + pins.RUNC_SHA256[pins.RUNC_VERSION]["amd64"]
    assert arts[("kubernetes apt key", "all")]["url"].endswith("/v1.35/deb/Release.key")
    assert {p["component"] for p in data["pins"]} >= {"kubernetes", "containerd", "runc", "helm", "gpu-operator"}


def test_version_bad_output(tmp_path: Path) -> None:
    r = run("version", "--output", "yaml", cwd=tmp_path)
    assert r.returncode == 2 and "use table or json" in r.stderr and "Traceback" not in r.stderr


def test_plan_prints_the_chosen_line_and_artifacts(tmp_path: Path) -> None:
    (tmp_path / "gpustack.yaml").write_text(GOOD)
    r = run("plan", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "compatibility matrix (the chosen Kubernetes minor)" in r.stdout
    assert "registry.k8s.io/pause:3.10.2" in r.stdout and ">= 2.0.0" in r.stdout
    assert pins.CONTAINERD_SHA256[pins.CONTAINERD_VERSION]["amd64"] in r.stdout
