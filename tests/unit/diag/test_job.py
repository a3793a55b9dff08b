"""The diag Job object, the level timeouts and the GPU pod inventory (pure)."""

from __future__ import annotations

import subprocess

import kubernetes_validate
import pytest

from gpustack.config import pins
from gpustack.constants import DIAG_NAMESPACE, QUARANTINE_TAINT_KEY
from gpustack.diag.dcgmi import BEGIN_MARKER, END_MARKER
from gpustack.diag.job import (
    LEVEL_TIMEOUTS,
    SCRIPT,
    START_ALLOWANCE,
    DiagSpec,
    build_job,
    gpu_capacity,
    gpu_nodes,
    job_name,
    namespace_object,
    workload_gpu_pods,
)

K8S = "1.36.0" if "1.36.0" in kubernetes_validate.utils.all_versions() else kubernetes_validate.utils.latest_version()


def node(name: str, capacity: int, allocatable: int | None = None) -> dict:
    alloc = capacity if allocatable is None else allocatable
    return {"metadata": {"name": name}, "status": {"capacity": {"nvidia.com/gpu": str(capacity)},
                                                   "allocatable": {"nvidia.com/gpu": str(alloc)}}}  # fmt: skip


def pod(ns: str, name: str, node_name: str, gpus: int = 0, *, phase: str = "Running", labels: dict | None = None,
        env: list | None = None) -> dict:  # fmt: skip
    res = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {"metadata": {"namespace": ns, "name": name, "labels": labels or {}},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": res, "env": env or []}]},
            "status": {"phase": phase}}  # fmt: skip


def test_job_requests_every_allocatable_gpu_on_its_node_only() -> None:
    job = build_job("gpu-node-1", 8, DiagSpec(level=2), run_id="abcd1234")
    kubernetes_validate.validate(job, K8S, strict=True)
    spec = job["spec"]
    pod_spec = spec["template"]["spec"]
    [container] = pod_spec["containers"]
    assert (
        container["resources"]["requests"]["nvidia.com/gpu"]
        == "8"
        == container["resources"]["limits"]["nvidia.com/gpu"]
    )
    assert container["image"] == pins.DIAG_DCGM_IMAGE and "@sha256:" in container["image"]
    assert pins.DCGM_VERSION in pins.DIAG_DCGM_IMAGE
    terms = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-1"]}]}]
    assert pod_spec["automountServiceAccountToken"] is False and pod_spec["restartPolicy"] == "Never"
    assert {t["key"] for t in pod_spec["tolerations"]} >= {"nvidia.com/gpu", "node.kubernetes.io/unschedulable",
                                                         QUARANTINE_TAINT_KEY}  # fmt: skip
    assert all(t["effect"] == "NoSchedule" for t in pod_spec["tolerations"])
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {
        "DIAG_MODE": "diag",
        "DIAG_LEVEL": "2",
        "DIAG_TIMEOUT": "600",
        "DIAG_HEALTH_WAIT": "65",
    }
    assert spec["backoffLimit"] == 0 and spec["ttlSecondsAfterFinished"] > 0
    assert spec["activeDeadlineSeconds"] == START_ALLOWANCE + 600 + 120
    assert job["metadata"]["namespace"] == DIAG_NAMESPACE


def test_health_job_and_levels() -> None:
    job = build_job("n", 2, DiagSpec(mode="health"), run_id="x")
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DIAG_MODE"] == "health" and job["metadata"]["name"].startswith("gpustack-health-")
    assert [DiagSpec(level=lv).dcgmi_timeout for lv in (1, 2, 3, 4)] == [120, 600, 2700, 14400]
    assert LEVEL_TIMEOUTS[4] >= 3600 * 2  # level 4 runs for hours
    assert DiagSpec(level=3, timeout=50).dcgmi_timeout == 50
    with pytest.raises(ValueError, match="no allocatable"):
        build_job("n", 0, DiagSpec(), run_id="x")


def test_job_names_are_stable_short_and_distinct() -> None:
    long = "gpu-node-" + "x" * 200
    names = {job_name(n, DiagSpec()) for n in ("a", "A.b", long, long + "y")}
    assert len(names) == 4 and all(len(n) <= 52 for n in names)
    assert job_name("gpu-1", DiagSpec()) == job_name("gpu-1", DiagSpec(level=4))


def test_namespace_allows_privileged_pods() -> None:
    ns = namespace_object()
    kubernetes_validate.validate(ns, K8S, strict=True)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_gpu_inventory() -> None:
    nodes = [node("gpu-1", 8), node("gpu-2", 8, 7), {"metadata": {"name": "cpu-1"}, "status": {}}]
    assert sorted(gpu_nodes(nodes)) == ["gpu-1", "gpu-2"]
    assert gpu_capacity(nodes[1]) == (8, 7)
    pods = [
        pod("ml", "train-0", "gpu-1", 4),
        pod("ml", "done", "gpu-1", 4, phase="Succeeded"),
        pod(
            "gpu-operator", "nvidia-dcgm-exporter-x", "gpu-1", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
        ),
        pod("gpustack-diag", "gpustack-diag-y", "gpu-1", 8, labels={"app.kubernetes.io/part-of": "gpustack"}),
        pod("research", "sneaky", "gpu-1", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
        pod("web", "nginx", "gpu-1"),
        pod("ml", "train-1", "gpu-2", 1),
    ]
    assert workload_gpu_pods(pods, "gpu-1") == ["ml/train-0", "research/sneaky"]
    assert workload_gpu_pods(pods, "gpu-2") == ["ml/train-1"]


def test_script_is_valid_posix_shell_and_prints_the_markers() -> None:
    proc = subprocess.run(["sh", "-n"], input=SCRIPT, capture_output=True, text=True, timeout=10, check=False)
    assert proc.returncode == 0, proc.stderr
    assert BEGIN_MARKER in SCRIPT and END_MARKER in SCRIPT
    assert 'dcgmi diag -r "$DIAG_LEVEL" -j --timeout "$DIAG_TIMEOUT"' in SCRIPT
    assert "dcgmi health -s a" in SCRIPT and "dcgmi health -c -j" in SCRIPT


def test_script_runs_against_stand_in_dcgm_binaries(tmp_path) -> None:
    """The container script with stand-ins for nv-hostengine and dcgmi: markers and the exit code arrive."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nv-hostengine").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "dcgmi").write_text(
        '#!/bin/sh\ncase "$1" in discovery) exit 0;; diag) echo \'{"DCGM Diagnostic": {}}\'; exit 226;; esac\nexit 1\n'
    )
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DIAG_MODE": "diag", "DIAG_LEVEL": "2", "DIAG_TIMEOUT": "600",
           "DIAG_HEALTH_WAIT": "0"}  # fmt: skip
    proc = subprocess.run(["sh", "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=20, check=False)
    assert proc.returncode == 226
    assert f"{BEGIN_MARKER} (dcgmi diag -r 2 -j --timeout 600)" in proc.stdout
    assert f"{END_MARKER} (exit 226)" in proc.stdout
