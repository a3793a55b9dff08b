"""gpustack diag against the fake API server: the Jobs it creates, the refusals, timeouts, Ctrl-C and
cleanup, the findings per test and GPU, and the verdict recorded on the node."""

from __future__ import annotations

import json

import pytest

from gpustack.console import Console
from gpustack.constants import ANN_DIAG_RESULT, DIAG_NAMESPACE
from gpustack.diag.job import DiagSpec, job_name
from gpustack.diag.runner import DiagOptions, run_diag
from gpustack.errors import BusyError, Interrupted, UsageError
from tests.fakes.kube_api import PodPlan

from .conftest import Cluster, gpu_node, plan, workload_pod


def quiet() -> Console:
    return Console(color=False, stream=open("/dev/null", "w"))


def run(c: Cluster, spec: DiagSpec, **kw: object) -> list:
    opts = DiagOptions(spec=spec, **kw)  # type: ignore[arg-type]
    return run_diag(c.kube, opts, quiet(), by="tester@host", clock=c.clock, sleep=c.clock.sleep)


def job_objects(c: Cluster) -> list[dict]:
    return [o for k, o in c.api.objects.items() if k[:3] == ("batch", "v1", "jobs")]


def pod_objects(c: Cluster, ns: str = DIAG_NAMESPACE) -> list[dict]:
    return [o for k, o in c.api.objects.items() if k[:4] == ("", "v1", "pods", ns)]


def test_one_job_per_gpu_node_requesting_all_its_gpus(cluster: Cluster) -> None:
    cluster.jobs.plans = {"gpu-node-1": plan("diag-r2-pass.log"), "gpu-node-2": plan("diag-r3-memory-fail-gpu5.log",
                                                                                       phase="Failed", exit_code=226)}  # fmt: skip
    findings = run(cluster, DiagSpec(level=2))
    made = cluster.jobs.pods_created
    assert sorted(p["metadata"]["annotations"]["gpustack.io/node"] for p in made) == ["gpu-node-1", "gpu-node-2"]
    for pod in made:
        node = pod["metadata"]["annotations"]["gpustack.io/node"]
        [container] = pod["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [node]
        assert container["image"].startswith("nvcr.io/nvidia/cloud-native/dcgm:4.6.0")
    # the simulated scheduler placed each pod on its own node
    posts = [p for m, p, _ in cluster.api.requests if m == "POST" and p.endswith("/jobs")]
    assert len(posts) == 2
    # cleaned up: no Job, no pod (deleted with propagationPolicy=Background, not orphaned)
    assert job_objects(cluster) == [] and pod_objects(cluster) == []
    deletes = [p for m, p, _ in cluster.api.requests if m == "DELETE"]
    assert len(deletes) == 2 and all("propagationPolicy=Background" in p for p in deletes)
    by = {(f.id, f.host, f.status) for f in findings}
    assert ("D00-diag-run", "gpu-node-1", "pass") in by and ("D03-memory", "gpu-node-1", "pass") in by
    assert ("D03-memory", "gpu-node-2 GPU 5", "fail") in by
    failed = next(f for f in findings if f.host == "gpu-node-2 GPU 5")
    assert "Found 12 faulty memory elements on GPU 5" in failed.summary and "serial" in failed.summary
    assert "nvidia-smi -r -i 5" in failed.fix and "RMA" in failed.fix
    # the verdicts are recorded on the nodes, for `gpustack health release`
    rec1 = json.loads(cluster.api.get("v1", "Node", "gpu-node-1")["metadata"]["annotations"][ANN_DIAG_RESULT])
    rec2 = json.loads(cluster.api.get("v1", "Node", "gpu-node-2")["metadata"]["annotations"][ANN_DIAG_RESULT])
    assert (rec1["result"], rec1["level"], rec1["by"]) == ("pass", 2, "tester@host")
    assert rec2["result"] == "fail"


def test_only_the_named_nodes_and_bad_names(cluster: Cluster) -> None:
    cluster.jobs.plans = {"gpu-node-2": plan("diag-r2-pass.log")}
    findings = run(cluster, DiagSpec(level=2), nodes=("gpu-node-2",))
    assert {f.host.split()[0] for f in findings} == {"gpu-node-2"}
    with pytest.raises(UsageError, match="no such node"):
        run(cluster, DiagSpec(), nodes=("nope",))
    with pytest.raises(UsageError, match=r"no nvidia\.com/gpu capacity"):
        run(cluster, DiagSpec(), nodes=("cpu-1",))
    for name in ("gpu-node-1", "gpu-node-2"):  # a cluster without GPU nodes: a failure, not a usage error
        cluster.api.objects.pop(("", "v1", "nodes", "", name))
    [f] = run(cluster, DiagSpec())
    assert f.status == "fail" and "no node has nvidia.com/gpu capacity" in f.summary


def test_level3_refused_while_gpu_pods_run_unless_forced(cluster: Cluster) -> None:
    cluster.api.seed([workload_pod("gpu-node-1", 4)])
    cluster.api.reset_requests()
    with pytest.raises(
        UsageError, match=r"--level 3 refused: GPU workloads run on gpu-node-1 \(gpu-node-1: ml/train-0\)"
    ):
        run(cluster, DiagSpec(level=3))
    assert cluster.api.mutating_requests() == []  # nothing created
    # levels 1-2 are not refused; --force runs level 3: the Job cannot get the GPUs the workload holds
    cluster.jobs.plans = {"gpu-node-2": plan("diag-r3-memory-fail-gpu5.log", seconds=900)}
    findings = run(cluster, DiagSpec(level=3), force=True, stuck_grace=120.0)
    d00 = next(f for f in findings if f.id == "D00-diag-run" and f.host == "gpu-node-1")
    assert d00.status == "fail" and "was not scheduled" in d00.summary and "ml/train-0" in d00.summary
    assert "Insufficient nvidia.com/gpu" in d00.evidence
    assert any(f.host == "gpu-node-2 GPU 5" and f.status == "fail" for f in findings)
    assert job_objects(cluster) == [] and pod_objects(cluster) == []


def test_cordoned_and_quarantined_node_is_still_diagnosed(cluster: Cluster) -> None:
    taint = {"key": "gpustack.io/gpu-health", "value": "fatal", "effect": "NoSchedule"}
    cluster.api.seed([gpu_node("gpu-node-1", taints=[taint], unschedulable=True)])
    cluster.jobs.plans = {"gpu-node-1": plan("diag-r2-pass.log")}
    findings = run(cluster, DiagSpec(level=2), nodes=("gpu-node-1",))
    assert all(f.status == "pass" for f in findings)


def test_a_gpu_the_device_plugin_marked_unhealthy_is_not_requested(cluster: Cluster) -> None:
    cluster.api.seed([gpu_node("gpu-node-1", allocatable=7), gpu_node("gpu-node-2", allocatable=0)])
    cluster.jobs.plans = {"gpu-node-1": plan("diag-r2-pass.log")}
    findings = run(cluster, DiagSpec(level=1))
    [pod] = cluster.jobs.pods_created
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "7"
    skipped = next(f for f in findings if f.host == "gpu-node-2")
    assert (
        skipped.id == "D00-diag-run"
        and skipped.status == "fail"
        and "no allocatable GPU (8 in capacity)" in skipped.summary
    )


def test_timeout_the_job_deadline_and_cleanup(cluster: Cluster) -> None:
    cluster.jobs.plans = {
        "gpu-node-1": PodPlan(hang=True),
        "gpu-node-2": plan("diag-r3-timeout.log", seconds=60, phase="Failed", exit_code=245),
    }
    findings = run(cluster, DiagSpec(level=2, timeout=30))
    hung = next(f for f in findings if f.host == "gpu-node-1")
    assert hung.id == "D00-diag-run" and hung.status == "fail" and "timed out" in hung.summary
    dcgmi = next(f for f in findings if f.host == "gpu-node-2")
    assert dcgmi.status == "fail" and "timed out (dcgmi --timeout 30s)" in dcgmi.summary
    assert job_objects(cluster) == [] and pod_objects(cluster) == []
    # nothing recorded for the node without a result
    assert ANN_DIAG_RESULT not in (cluster.api.get("v1", "Node", "gpu-node-1")["metadata"].get("annotations") or {})


def test_image_pull_errors_give_up_after_the_grace(cluster: Cluster) -> None:
    cluster.jobs.plans = {"gpu-node-1": PodPlan(waiting_reason="ImagePullBackOff")}
    findings = run(cluster, DiagSpec(level=1), nodes=("gpu-node-1",), stuck_grace=60.0)
    [f] = findings
    assert f.status == "fail" and "ImagePullBackOff" in f.summary and "nvcr.io" in f.fix
    assert job_objects(cluster) == []


def test_ctrl_c_deletes_the_jobs(cluster: Cluster) -> None:
    cluster.jobs.plans = {"gpu-node-1": PodPlan(hang=True), "gpu-node-2": PodPlan(hang=True)}
    calls = []

    def interrupted(seconds: float) -> None:
        calls.append(seconds)
        cluster.clock.sleep(seconds)
        if len(calls) == 3:
            raise Interrupted("interrupted")

    with pytest.raises(Interrupted):
        run_diag(
            cluster.kube, DiagOptions(spec=DiagSpec(level=2)), quiet(), by="t", clock=cluster.clock, sleep=interrupted
        )
    assert len(cluster.jobs.pods_created) == 2
    assert job_objects(cluster) == [] and pod_objects(cluster) == []


def test_leftover_jobs_from_an_interrupted_run(cluster: Cluster) -> None:
    name = job_name("gpu-node-1", DiagSpec())
    leftover = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": DIAG_NAMESPACE, "labels": {"app.kubernetes.io/part-of": "gpustack"}},
                "spec": {"template": {"spec": {"containers": []}}},
                "status": {"conditions": [{"type": "Complete", "status": "True"}]}}  # fmt: skip
    cluster.api.seed([leftover])
    cluster.jobs.plans = {"gpu-node-1": plan("diag-r2-pass.log")}
    findings = run(cluster, DiagSpec(level=1), nodes=("gpu-node-1",))
    assert all(f.status == "pass" for f in findings) and job_objects(cluster) == []
    # an active one: another diag is running there
    leftover["status"] = {"active": 1, "startTime": "2026-11-18T09:00:00Z"}
    cluster.api.seed([leftover])
    with pytest.raises(BusyError, match="another diagnostic is running on gpu-node-1"):
        run(cluster, DiagSpec(level=1), nodes=("gpu-node-1",))


def test_a_failed_delete_is_reported_with_the_command(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.jobs.plans = {"gpu-node-1": plan("diag-r2-pass.log")}
    cluster.api.fail(r"/jobs/gpustack-diag-", 500, method="DELETE")
    run_diag(cluster.kube, DiagOptions(spec=DiagSpec(level=1), nodes=("gpu-node-1",)), Console(color=False), by="t",
             clock=cluster.clock, sleep=cluster.clock.sleep)  # fmt: skip
    err = capsys.readouterr().err
    assert (
        "could not delete diag Job(s)" in err and "kubectl -n gpustack-diag delete job -l gpustack.io/diag-run=" in err
    )
    assert len(job_objects(cluster)) == 1  # really left behind (and said so)


def test_health_mode(cluster: Cluster) -> None:
    cluster.jobs.plans = {
        "gpu-node-1": plan("health-failure.log", seconds=70),
        "gpu-node-2": plan("health-healthy.log", seconds=70),
    }
    findings = run(cluster, DiagSpec(mode="health"))
    by = {(f.host, f.status) for f in findings}
    assert ("gpu-node-2", "pass") in by and ("gpu-node-1", "fail") in by
    assert ("gpu-node-1 GPU 3", "fail") in by and ("gpu-node-1 GPU 2", "warn") in by
    assert all(f.id == "D20-dcgm-health" for f in findings)
    env = cluster.jobs.pods_created[0]["spec"]["containers"][0]["env"]
    assert {"name": "DIAG_MODE", "value": "health"} in env
    # --health does not record a diag verdict
    assert ANN_DIAG_RESULT not in (cluster.api.get("v1", "Node", "gpu-node-1")["metadata"].get("annotations") or {})


def test_requests_per_poll_do_not_grow_with_nodes(cluster: Cluster) -> None:
    cluster.api.seed([gpu_node(f"gpu-node-{i}") for i in range(3, 11)])
    cluster.jobs.plans = lambda node, job: plan("diag-r2-pass.log", seconds=120)  # type: ignore[assignment]
    cluster.api.reset_requests()
    run(cluster, DiagSpec(level=2))
    reqs = cluster.api.requests
    pod_polls = [p for m, p, _ in reqs if m == "GET" and "/pods?" in p and "diag-run" in p]
    job_polls = [p for m, p, _ in reqs if m == "GET" and "/jobs?" in p and "diag-run" in p]
    per_node = [p for m, p, _ in reqs if p.endswith("/log?container=dcgm") or m in ("POST", "DELETE")
                or (m == "PATCH" and "/nodes/" in p)]  # fmt: skip
    assert len(pod_polls) == len(job_polls) > 1  # one LIST of the run's pods and one of its Jobs per poll
    assert len(per_node) == 4 * 10  # create, log, delete, record: nothing else per node
    assert len(reqs) - len(pod_polls) - len(job_polls) - len(per_node) <= 8  # nodes, pods, discovery, namespace


def test_a_pod_the_kubelet_refused(cluster: Cluster) -> None:
    cluster.jobs.plans = {"gpu-node-1": PodPlan(phase="Failed", exit_code=0, log="")}
    [f] = run(cluster, DiagSpec(level=1), nodes=("gpu-node-1",))
    assert f.id == "D00-diag-run" and f.status == "fail" and "failed before it printed anything" in f.summary
