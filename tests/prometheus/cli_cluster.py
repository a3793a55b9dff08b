"""``gpustack verify`` / ``doctor`` as a user runs them, against the fake API server and fake Grafana in front of a
real Prometheus: the CLI in its own process, judged by its exit code and its JSON report (the documented
contract). Shared by test_verify_cli.py and test_golden_paths.py.

How the cluster is reached (:data:`VIA`): ``--kubeconfig FILE`` with the state ``gpustack up`` keeps (the
Grafana admin password file), or ``$KUBECONFIG`` alone with an empty state directory: a cluster not built
from this machine, whose Grafana password is read from the Secret its Deployment references.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

from gpustack.diagnose.collect_workload import VERIFY_NAMESPACE
from tests.fakes.kube_api import FakeKubeAPI

REPO = Path(__file__).resolve().parents[2]
FIELDS = ("id", "layer", "status", "summary", "evidence", "fix")
STATUSES = ("pass", "warn", "fail", "skip")
COLUMNS = 110
CLI_TIMEOUT = 120.0
NVIDIA_SMI = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5f3c9a1e-8b2d-4c7f-9e61-0d4a2b7c8e19)\n"
Via = Literal["--kubeconfig", "$KUBECONFIG"]
VIA: tuple[Via, ...] = ("--kubeconfig", "$KUBECONFIG")


class Kubelet:
    """Runs verify's pods on ``node`` at once: they succeed, with the log the real container prints."""

    def __init__(self, api: FakeKubeAPI, node: str = "node-a") -> None:
        self.api = api
        self.node = node
        self.ran: dict[str, str] = {}  # pod name -> its gpustack/verify role

    def __call__(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if obj.get("kind") != "Pod" or meta.get("namespace") != VERIFY_NAMESPACE:
            return
        role = meta["labels"]["gpustack/verify"]
        self.ran[meta["name"]] = role
        obj["spec"]["nodeName"] = self.node
        obj["status"] = {"phase": "Succeeded", "containerStatuses": [
            {"name": "main", "ready": False, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}  # fmt: skip
        # agnhost connect prints nothing when it connected; nvidia-smi -L lists the GPU the pod got (G18's pod on a
        # time-sliced GPU sees one whole GPU, as the CUDA pod does)
        gpu_pod = role in ("gpustack-cuda", "gpustack-shared")
        self.api.set_log(VERIFY_NAMESPACE, meta["name"], "main", NVIDIA_SMI if gpu_pod else "")


def run_cli(
    command: str, kubeconfig: Path, workdir: Path, *, via: Via = "--kubeconfig", state: Path | None = None,
    args: tuple[str, ...] = ("--output", "json"),
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``python -m gpustack COMMAND`` in its own process (no config file: the defaults), reaching the cluster
    ``via`` the option or the environment variable; ``state``: GPUSTACK_STATE_DIR (default: an empty one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_") and k != "KUBECONFIG"}
    state = state or workdir / f"empty-state-{command}"
    env.update(GPUSTACK_STATE_DIR=str(state), HOME=str(workdir), NO_COLOR="1", COLUMNS=str(COLUMNS),
               PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH")))))  # fmt: skip
    cmd = [sys.executable, "-m", "gpustack", command, *args]
    if via == "--kubeconfig":
        cmd += ["--kubeconfig", str(kubeconfig)]
    else:
        env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT,
                          stdin=subprocess.DEVNULL, check=False)  # fmt: skip


def report_of(proc: subprocess.CompletedProcess[str], command: str = "verify") -> dict[str, Any]:
    """The JSON report on stdout, checked against the documented contract."""
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"stdout is not JSON (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from None
    assert isinstance(report, dict) and set(report) == {"command", "cluster", "checks", "summary"}, report
    assert report["command"] == command
    assert set(report["cluster"]) == {
        "server",
        "context",
        "cluster",
        "source",
        "kubeconfig",
        "gpustack_cluster",
        "client_certificate_expires",
    }
    for check in report["checks"]:
        assert set(FIELDS) <= set(check) <= {*FIELDS, "host"}, check
        assert all(isinstance(check[k], str) for k in FIELDS), check
        assert check["status"] in STATUSES and check["summary"], check
    counts = {s: sum(c["status"] == s for c in report["checks"]) for s in STATUSES}
    assert report["summary"] == counts, (report["summary"], counts)
    return report


def short(check: dict[str, Any]) -> str:
    return str(check["id"]).split("-", 1)[0]


def not_passing(report: dict[str, Any]) -> str:
    """The report's non-pass findings, one per line (assertion messages)."""
    return "\n".join(f"{c['id']} {c['status']} [{c.get('host', '')}]: {c['summary']} | {c['evidence']} | fix: {c['fix']}"
                     for c in report["checks"] if c["status"] != "pass")  # fmt: skip
