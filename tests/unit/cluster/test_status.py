"""`gpustack status` against the fake API server: nodes and kubelet skew, Helm releases (records
encoded as Helm stores them) against the pins, the last run, an upgrade in progress; and what it
says, with exit code 3, when the cluster does not answer."""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack.cluster import status
from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.constants import NAMESPACES
from tests.fakes.kube_api import FakeKubeAPI

from ..nodes_cluster import node

ROOT = Path(__file__).resolve().parents[3]
CFG = Config.model_validate(
    {
        "nodes": [
            {"name": n, "address": f"192.0.2.{10 + i}", "role": "control-plane" if i == 0 else "worker", "user": "ops"}
            for i, n in enumerate(["cp1", "w1", "w2"])
        ]
    }
)


def helm_record(release: str, chart_version: str, revision: int, state: str = "deployed") -> dict[str, Any]:
    """A Secret as Helm 3/4 stores a release: labels owner/name/status/version, and data.release =
    base64 (the Secret's) of base64 (Helm's) of the gzipped release JSON."""
    body = {
        "name": release,
        "namespace": NAMESPACES[release],
        "version": revision,
        "info": {"status": state},
        "chart": {"metadata": {"name": release, "version": chart_version}},
        "config": {"secret-looking": "values are never shown"},
    }
    helm = base64.b64encode(gzip.compress(json.dumps(body).encode()))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "helm.sh/release.v1",
        "metadata": {
            "name": f"sh.helm.release.v1.{release}.v{revision}",
            "namespace": NAMESPACES[release],
            "labels": {"owner": "helm", "name": release, "status": state, "version": str(revision)},
        },
        "data": {"release": base64.b64encode(helm).decode()},
    }


def test_skew_notes() -> None:
    assert status.skew_note("v1.36.4", "v1.36.4") == ""
    assert "1 minor(s) behind" in status.skew_note("v1.35.8", "v1.36.4")
    assert "beyond the 3" in status.skew_note("v1.32.1", "v1.36.4")
    assert "newer than the API server" in status.skew_note("v1.37.0", "v1.36.4")
    assert "patch differs" in status.skew_note("v1.36.3", "v1.36.4")


def test_release_records_are_read_as_helm_writes_them() -> None:
    pinned = CFG.versions.gpu_operator
    old = status.release_status(
        "gpu-operator",
        "gpu-operator",
        pinned,
        [helm_record("gpu-operator", "v0.1.0", 1, "superseded"), helm_record("gpu-operator", pinned, 2)],
    )
    assert (old.chart_version, old.revision, old.status, old.note) == (pinned, 2, "deployed", "")
    behind = status.release_status("gpu-operator", "gpu-operator", pinned, [helm_record("gpu-operator", "v0.1.0", 1)])
    assert "upgrade --components" in behind.note
    failed = status.release_status(
        "gpu-operator", "gpu-operator", pinned, [helm_record("gpu-operator", pinned, 3, "failed")]
    )
    assert failed.status == "failed" and "Helm status failed" in failed.note
    assert status.release_status("x", "y", "1", []).status == "not installed"
    assert status.decode_release({"data": {"release": "not base64!"}}) is None


def test_gather_reads_nodes_releases_and_local_records(
    fake_api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
    fake_api.version = f"v{pins.KUBERNETES['1.36']}"
    fake_api.seed(
        [
            node("cp1", cp=True),
            node("w1", kubelet="v1.35.8", cordoned=True),
            node("old", ready=False),
            helm_record("kube-prometheus-stack", CFG.versions.kube_prometheus_stack, 1),
            helm_record("gpu-operator", "v0.0.1", 4),
        ]
    )
    # a failed upgrade's record and the run that failed
    clusters = tmp_path / "clusters" / "gpustack"
    clusters.mkdir(parents=True)
    (clusters / "upgrade.json").write_text(
        json.dumps(
            {
                "from": pins.KUBERNETES["1.35"],
                "to": pins.KUBERNETES["1.36"],  # what the fake API server and the nodes' kubelets run
                "status": "failed",
                "error": "stage workers",
                "nodes": {"cp1": {"status": "done"}, "w1": {"status": "pending"}},
            }
        )
    )
    run = tmp_path / "runs" / "20261124T100000.000000Z"
    run.mkdir(parents=True)
    (run / "run.json").write_text(
        json.dumps(
            {
                "command": "upgrade",
                "cluster": "gpustack",
                "result": "failed",
                "error": "drain of w1 timed out",
                "started": "x",
                "finished": "y",
            }
        )
    )
    other = tmp_path / "runs" / "20261124T110000.000000Z"  # newer, but another cluster's
    other.mkdir()
    (other / "run.json").write_text(json.dumps({"command": "up", "cluster": "lab", "result": "ok"}))
    kube = fake_api.write_kubeconfig(tmp_path / "kc")
    from gpustack.runners.kubeconfig import kube_from_file

    s = status.gather(CFG, kube_from_file(kube))
    assert s.reachable and s.api_server == fake_api.version
    by = {n.name: n for n in s.nodes}
    assert by["w1"].note == f"1 minor(s) behind the API server {fake_api.version} (an upgrade in progress?)"
    assert not by["w1"].schedulable and by["cp1"].roles == ["control-plane"] and not by["old"].ready
    assert by["old"].note == "not in gpustack.yaml" and s.not_joined == ["w2"]
    rel = {r.name: r for r in s.releases}
    assert rel["kube-prometheus-stack"].note == "" and rel["dcgm-exporter"].status == "not installed"
    assert rel["gpu-operator"].chart_version == "v0.0.1" and "upgrade --components" in rel["gpu-operator"].note
    assert s.last_run is not None and (s.last_run["command"], s.last_run["result"]) == ("upgrade", "failed")
    assert s.upgrade is not None and s.upgrade["status"] == "failed"
    assert s.upgrade["kubelet_at_target"] == ["cp1", "old"], "what the nodes run, beside the record"
    assert "values are never shown" not in json.dumps(s.to_json())
    assert status.exit_code(s) == 0


def test_an_upgrade_line_counts_the_record_and_the_kubelets() -> None:
    """A run interrupted between a node's upgrade and its record: the record says 1 of 3, the
    cluster 2 of 3 (the issue's "1/3 done while two nodes were upgraded")."""
    record: dict[str, Any] = {
        "from": "1.35.8",
        "to": "1.36.4",
        "status": "interrupted",
        "nodes": {"cp1": {"status": "done"}, "w1": {"status": "pending"}, "w2": {"status": "pending"}},
    }
    line = status.upgrade_line({**record, "kubelet_at_target": ["cp1", "w1"]})
    assert line == (
        "upgrade 1.35.8 -> 1.36.4: interrupted, 1/3 node(s) done (2/3 run kubelet 1.36.4); "
        "`gpustack upgrade --to 1.36.4` continues it"
    )
    assert "run kubelet" not in status.upgrade_line({**record, "kubelet_at_target": ["cp1"]}), "they agree"
    assert "run kubelet" not in status.upgrade_line(record), "the API did not answer: the record alone"
    nodes = [
        status.NodeStatus("cp1", [], True, True, "v1.36.4", True),
        status.NodeStatus("w1", [], True, True, "v1.35.8", True),
    ]
    assert status.kubelets_at(nodes, "1.36.4") == ["cp1"]


def test_a_run_that_was_killed_is_not_shown_as_running(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "20261124T100000.000000Z"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"command": "up", "cluster": "gpustack", "result": "running"}))
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "gpustack.lock").write_text(json.dumps({"pid": 2**22 + 12345, "command": "up"}))
    found = status.last_run("gpustack", tmp_path)
    assert found is not None and found["result"] == "ended without a result (killed?)"
    (tmp_path / "locks" / "gpustack.lock").write_text(json.dumps({"pid": os.getpid(), "command": "up"}))
    found = status.last_run("gpustack", tmp_path)
    assert found is not None and found["result"] == "running"


def _cli(args: list[str], state: Path, cfg: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUSTACK_STATE_DIR": str(state), "NO_COLOR": "1", "COLUMNS": "200", "PYTHONPATH": str(ROOT),
           "GPUSTACK_TODAY": "2026-11-26"}  # fmt: skip
    env.pop("GPUSTACK_CONFIG", None)
    env.pop("KUBECONFIG", None)  # status follows $KUBECONFIG like kubectl: not the developer's own cluster
    return subprocess.run(
        [sys.executable, "-m", "gpustack", *args, "-c", str(cfg)],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def test_cli_table_json_and_unreachable(fake_api: FakeKubeAPI, tmp_path: Path) -> None:
    cfg = tmp_path / "gpustack.yaml"
    cfg.write_text(yaml.safe_dump(CFG.model_dump(mode="json", include={"nodes"})))
    state = tmp_path / "state"
    (state / "clusters" / "gpustack").mkdir(parents=True)
    fake_api.write_kubeconfig(state / "clusters" / "gpustack" / "admin.conf")
    fake_api.seed([node("cp1", cp=True, containerd="2.3.6"), node("w1", containerd="2.3.6"),
                   node("w2", containerd="2.3.6")])  # fmt: skip

    table = _cli(["status"], state, cfg)
    assert table.returncode == 0, table.stderr
    assert f"API server v{pins.KUBERNETES['1.36']}" in table.stdout and "Helm releases" in table.stdout
    assert "support: every component read is within upstream support for 90+ days (as of 2026-11-26)" in table.stdout
    assert "last run: none from this machine" in table.stdout
    data = json.loads(_cli(["status", "-o", "json"], state, cfg).stdout)
    assert data["command"] == "status" and data["reachable"] is True
    assert [n["name"] for n in data["nodes"]] == ["cp1", "w1", "w2"] and data["not_joined"] == []
    assert fake_api.mutating_requests() == [], "status is read-only"

    fake_api.stop()
    down = _cli(["status", "-o", "json"], state, cfg)
    assert down.returncode == 3
    data = json.loads(down.stdout)
    assert data["reachable"] is False and "unreachable" in data["error"] and data["nodes"] == []
    text = _cli(["status"], state, cfg)
    assert text.returncode == 3 and "unreachable" in text.stdout and "last run:" in text.stdout

    never = tmp_path / "never"
    nokc = _cli(["status"], never, cfg)
    assert nokc.returncode == 3 and "no kubeconfig for cluster 'gpustack'" in nokc.stdout
    assert _cli(["status", "-o", "yaml"], state, cfg).returncode == 2


# --- support horizons ---------------------------------------------------------------------------------------


def test_status_warns_about_an_end_of_life_containerd_and_kubernetes_minor(
    fake_api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster whose nodes run containerd 2.2 (end of life 2026-11-06) and, on one node, the kubelet 1.34
    (end of life 2026-10-27): status names both, the nodes, and the way out; its GPU Operator release is judged."""
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("GPUSTACK_TODAY", "2026-11-26")
    fake_api.seed(
        [
            node("cp1", cp=True, containerd="2.2.7"),
            node("w1", containerd="2.2.7", kubelet="v1.34.11"),
            node("w2", os_image="Ubuntu 24.04.1 LTS"),
            helm_record("gpu-operator", "v26.7.0", 1),
        ]
    )
    from gpustack.runners.kubeconfig import kube_from_file

    s = status.gather(CFG, kube_from_file(fake_api.write_kubeconfig(tmp_path / "kc")))
    by = {(w["component"], w["version"]): w for w in s.support}
    # w2 runs the pinned 2.3.4: in support, but with open security releases (its own warning)
    assert set(by) == {("containerd", "2.2.7"), ("kubernetes", "1.34.11"), ("containerd", "2.3.4")}, s.support
    assert by["containerd", "2.3.4"]["status"] == "supported" and by["containerd", "2.3.4"]["where"] == ["w2"]
    cd = by["containerd", "2.2.7"]
    assert cd["status"] == "past" and cd["where"] == ["cp1", "w1"] and cd["ends"] == "2026-11-06" and cd["days"] == -20
    assert "containerd RELEASES.md" in cd["source"] and "`gpustack up --only containerd`" in cd["fix"]
    k8s = by["kubernetes", "1.34.11"]
    assert k8s["status"] == "past" and k8s["where"] == ["w1"] and "`gpustack upgrade --to 1.35`" in k8s["fix"]
    assert s.today == "2026-11-26"
    # the same cluster judged in May 2027: 1.36 is within 90 days of its end too, the 2.3 containerd is not
    monkeypatch.setenv("GPUSTACK_TODAY", "2027-05-01")
    later = status.gather(CFG, kube_from_file(fake_api.write_kubeconfig(tmp_path / "kc")))
    soon = {(w["component"], w["version"]): w["status"] for w in later.support}
    assert soon[("kubernetes", pins.KUBERNETES["1.36"])] == "ending"
    assert soon[("containerd", pins.CONTAINERD_VERSION)] == "supported"  # listed for its security releases only


def test_status_says_nothing_on_a_supported_cluster(
    fake_api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("GPUSTACK_TODAY", "2026-11-26")
    fake_api.seed([node("cp1", cp=True, containerd="2.3.6"), node("w1", os_image="Ubuntu 22.04.5 LTS",
                   containerd="2.3.6"), helm_record("gpu-operator", pins.CHARTS["gpu-operator"].version, 1)])  # fmt: skip
    from gpustack.runners.kubeconfig import kube_from_file

    s = status.gather(CFG, kube_from_file(fake_api.write_kubeconfig(tmp_path / "kc")))
    assert s.reachable and s.support == []


def test_status_warns_about_the_open_containerd_security_release_and_notes_the_driver(
    fake_api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nodes on the pinned containerd 2.3.4: a warning naming 2.3.5/2.3.6's CVEs and how to install 2.3.6; in
    December the operator's R595 driver nearing March 2027 is a note without a fix (no newer branch that
    GPU Operator v26.7.0 supports is in support), never a warning."""
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("GPUSTACK_TODAY", "2026-12-15")
    gpu = node("w1")
    gpu["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"] = "595.91.07"
    fake_api.seed([node("cp1", cp=True), gpu, helm_record("gpu-operator", pins.CHARTS["gpu-operator"].version, 1)])
    from gpustack.runners.kubeconfig import kube_from_file

    s = status.gather(CFG, kube_from_file(fake_api.write_kubeconfig(tmp_path / "kc")))
    by = {w["component"]: w for w in s.support}
    assert set(by) == {"containerd", "nvidia-driver"}, s.support
    cd = by["containerd"]
    assert cd["level"] == "warn" and cd["version"] == pins.CONTAINERD_VERSION and cd["where"] == ["cp1", "w1"]
    assert [r["version"] for r in cd["open_security_releases"]] == ["2.3.5", "2.3.6"]
    assert "CVE-2026-53493" in cd["advice"] and "versions.containerd: 2.3.6" in cd["fix"]
    drv = by["nvidia-driver"]
    assert drv["level"] == "info" and drv["fix"] == "" and drv["status"] == "ending"
    assert "reinstall 595.91.07" in drv["advice"]
