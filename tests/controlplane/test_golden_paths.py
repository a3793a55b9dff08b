"""The golden paths on a real API server: the cluster ``gpustack up`` leaves, freshly built and then running GPU
workloads, at 1 and 3 nodes, made by the real controllers and scheduler from the scenarios' inputs
(tests/controlplane/realize.py, load.py): ``verify --no-workload`` and ``doctor`` (the CLI in its own process, the
Kubernetes and GPU Operator layers: what the API server serves) exit 0 with no ``fail`` and only the expected skips,
and give **the same verdict on every check** as against the fake API server holding the same scenario: the fake's
contract at the level of what gpustack concludes.

The monitoring and Grafana layers stay on the fake API server (tests/prometheus/test_golden_paths.py): the real API
server proxies only to pod addresses, which kwok's pods do not serve (docs/testing.md, "The real control plane").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpustack.diagnose.collect_workload import VERIFY_NAMESPACE, cuda_pod
from gpustack.runners.kube import Kube
from gpustack.runners.kubeconfig import kube_from_file
from tests.fakes import scenarios as sc
from tests.fakes.gpu_kubelet import GpuKubelet
from tests.fakes.kube_api import FakeKubeAPI

from .cluster import ControlPlane, running
from .load import load

LAYERS = "kubernetes,gpu-operator"
COMMANDS = {"doctor": ["doctor"], "verify": ["verify", "--no-workload"]}
#: what skips on both servers: host facts need SSH (no gpustack.yaml here); the test pods need --no-workload off
EXPECTED_SKIPS = {"doctor": {"G05-driver-preinstalled"},
                  "verify": {"K09-pod-network-probe", "G10-cuda-test-pod", "G18-shared-gpu-test-pod"}}  # fmt: skip


def cli(command: str, kubeconfig: Path, workdir: Path) -> dict[str, Any]:
    """``python -m gpustack COMMAND --output json`` in its own process, as a user runs it (no gpustack.yaml)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_") and k != "KUBECONFIG"}
    env.update(GPUSTACK_STATE_DIR=str(workdir / "state"), HOME=str(workdir), NO_COLOR="1", COLUMNS="120",
               GPUSTACK_TODAY=os.environ.get("GPUSTACK_TODAY", ""))  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "gpustack", *COMMANDS[command], "--kubeconfig", str(kubeconfig),
                           "--layer", LAYERS, "--output", "json"], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    report = json.loads(proc.stdout)
    report["exit"] = proc.returncode
    report["stderr"] = proc.stderr
    return report


#: checks of the kubeconfig, not of the server: kubeadm's admin.conf carries a client certificate, the fake API
#: server's kubeconfig a token (K11 passes on one and is skipped on the other by design)
ABOUT_THE_KUBECONFIG = ("K11-admin-kubeconfig-certificate",)


def verdicts(report: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {(c["id"], c.get("host", "")): c["status"] for c in report["checks"] if c["id"] not in ABOUT_THE_KUBECONFIG}


def failures(report: dict[str, Any]) -> str:
    return "\n".join(f"{c['id']} {c['status']} [{c.get('host', '')}]: {c['summary']} | {c['evidence']}"
                     for c in report["checks"] if c["status"] not in ("pass",))  # fmt: skip


@pytest.fixture(scope="module", params=[1, 3], ids=["1-node", "3-nodes"])
def real(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, ControlPlane]]:
    """A control plane of its own per size (doctor reads the whole cluster), loaded with ``healthy(N)``."""
    nodes = int(request.param)
    with running(tmp_path_factory.mktemp(f"golden-{nodes}")) as cp:
        load(kube_from_file(cp.admin_kubeconfig), sc.healthy(nodes))
        yield nodes, cp


def on_fake(scenario: sc.Scenario, command: str, workdir: Path) -> dict[str, Any]:
    with FakeKubeAPI.running() as api:
        scenario.load(api)
        return cli(command, api.write_kubeconfig(workdir / "fake.conf"), workdir)


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
@pytest.mark.parametrize("command", ["doctor", "verify"])
def test_healthy_cluster_passes_and_agrees_with_the_fake(real: tuple[int, ControlPlane], command: str, busy: bool,
                                                         tmp_path: Path) -> None:  # fmt: skip
    nodes, cp = real
    scenario = sc.healthy(nodes)
    if busy:  # the GPU workloads, once per cluster (idle runs first): StatefulSets the real scheduler places by GPUs
        kube = kube_from_file(cp.admin_kubeconfig)
        if kube.get("apps/v1", "StatefulSet", "train", "ml-team") is None:
            load(kube, sc.Scenario(sc.gpu_workloads(nodes)), crds=False)
        scenario = sc.Scenario(scenario.objects + sc.gpu_workloads(nodes))
    report = cli(command, cp.admin_kubeconfig, tmp_path)
    assert report["exit"] == 0, failures(report) + report["stderr"][-2000:]
    skipped = {c["id"] for c in report["checks"] if c["status"] == "skip"}
    assert skipped == EXPECTED_SKIPS[command], failures(report)
    assert not [c for c in report["checks"] if c["status"] == "fail"]
    fake = on_fake(scenario, command, tmp_path)
    assert verdicts(report) == verdicts(fake), f"real:\n{failures(report)}\nfake:\n{failures(fake)}"
    if busy:
        pods = kube_from_file(cp.admin_kubeconfig).list_objects("v1", "Pod", "ml-team")
        assert len(pods) == max(1, nodes - 1) and all(p["status"]["phase"] == "Running" for p in pods)


@pytest.mark.parametrize(("resource", "on"), [("nvidia.com/mig-1g.10gb", ""), ("nvidia.com/gpu", "absent-node")])
def test_the_gpu_kubelet_doubles_pending_pod_is_the_real_schedulers(real: tuple[int, ControlPlane], resource: str,
                                                                     on: str) -> None:  # fmt: skip
    """verify's CUDA pod (gpustack's own manifest) asking for what no node offers: the GPU kubelet double
    (tests/fakes/gpu_kubelet.py) leaves it Pending with the condition the real scheduler writes."""
    nodes, cp = real
    kube = kube_from_file(cp.admin_kubeconfig)
    manifest = cuda_pod(resource, node=on)
    kube.apply_one({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": VERIFY_NAMESPACE}})
    created = kube.request("POST", f"/api/v1/namespaces/{VERIFY_NAMESPACE}/pods", body=manifest)
    name = created["metadata"]["name"]
    real_cond = until_condition(kube, name)
    kube.delete("v1", "Pod", name, VERIFY_NAMESPACE)
    with FakeKubeAPI.running() as api:
        sc.healthy(nodes).load(api)
        api.on_create.append(GpuKubelet(api))
        fake_kube = kube_from_file(api.write_kubeconfig(Path(cp.workdir) / "fake-kubelet.conf"))
        fake_kube.apply_one({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": VERIFY_NAMESPACE}})
        made = fake_kube.request("POST", f"/api/v1/namespaces/{VERIFY_NAMESPACE}/pods", body=manifest)
        fake_cond = (fake_kube.get("v1", "Pod", made["metadata"]["name"], VERIFY_NAMESPACE) or {})["status"][
            "conditions"
        ][0]
    keys = ("type", "status", "reason", "message")
    assert {k: fake_cond.get(k) for k in keys} == {k: real_cond.get(k) for k in keys}


def until_condition(kube: Kube, name: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        pod = kube.get("v1", "Pod", name, VERIFY_NAMESPACE) or {}
        conditions = (pod.get("status") or {}).get("conditions") or []
        if conditions:
            return dict(conditions[0])
        assert time.monotonic() < deadline, pod
        time.sleep(0.3)
