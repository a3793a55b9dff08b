"""``gpustack diag``: the I/O. Choose the nodes, create one Job per node, watch them, read the pod logs,
delete the Jobs (also on Ctrl-C and on failure), record each node's verdict, return the findings.

Requests while waiting do not grow with the node count: one LIST of the run's pods and one of its Jobs
per poll (label ``gpustack.io/diag-run=<run id>``), one log read per finished pod.
"""

from __future__ import annotations

import getpass
import json
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpustack.checks.model import Finding
from gpustack.console import Console
from gpustack.constants import ANN_DIAG_RESULT, DIAG_FIELD_MANAGER, DIAG_NAMESPACE
from gpustack.diag import findings as fd
from gpustack.diag.job import (
    EXCLUSIVE_LEVELS,
    GPU,
    NODE_ANNOTATION,
    PART_OF,
    RUN_LABEL,
    DiagSpec,
    build_job,
    gpu_capacity,
    gpu_nodes,
    job_name,
    namespace_object,
    workload_gpu_pods,
)
from gpustack.errors import BusyError, GpustackError, Interrupted, UsageError
from gpustack.runners.kube import Kube

Obj = dict[str, Any]
LOG_LIMIT = 2 * 1024 * 1024  # a level-4 run on 8 GPUs prints ~100 KiB of JSON
#: pod states that will not resolve by waiting (as verify's test pods)
STUCK_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                           "CreateContainerError", "RunContainerError"})  # fmt: skip


@dataclass(frozen=True)
class DiagOptions:
    spec: DiagSpec
    nodes: tuple[str, ...] = ()  # empty: every GPU node
    force: bool = False
    image: str | None = None
    poll_interval: float = 5.0
    #: how long a pod may stay unschedulable (GPUs held) or fail to pull before gpustack gives up
    stuck_grace: float = 120.0
    #: added to the Job's activeDeadlineSeconds before gpustack stops waiting itself
    deadline_margin: float = 30.0


@dataclass
class _Tracked:
    outcome: fd.NodeOutcome
    deadline: float
    started: float
    stuck_since: float | None = None
    done: bool = False
    last_state: str = ""


@dataclass
class Selection:
    """Which nodes run, which do not and why, which GPU pods stand in the way."""

    run: dict[str, int] = field(default_factory=dict)  # node -> GPUs to request
    skipped: dict[str, str] = field(default_factory=dict)  # node -> why no Job
    busy: dict[str, list[str]] = field(default_factory=dict)  # node -> workload GPU pods on it


def who() -> str:
    """``user@host`` for annotations (never a secret)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def now_rfc3339(epoch: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if epoch is None else epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def select_nodes(nodes: list[Obj], pods: list[Obj], opts: DiagOptions) -> Selection:
    """Pure: the nodes to test (all GPU nodes, or ``--node``), the GPUs each Job requests, and the
    level >= 3 refusal. Raises :class:`UsageError` for an unknown or GPU-less ``--node``."""
    by_name = {str((n.get("metadata") or {}).get("name")): n for n in nodes}
    gpus = gpu_nodes(nodes)
    wanted = list(dict.fromkeys(opts.nodes)) or sorted(gpus)
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise UsageError(f"--node {', '.join(unknown)}: no such node (nodes: {', '.join(sorted(by_name)[:20])})")
    no_gpu = [n for n in wanted if n not in gpus]
    if no_gpu:
        raise UsageError(
            f"--node {', '.join(no_gpu)}: no {GPU} capacity on the node (GPU nodes: {', '.join(sorted(gpus)) or 'none'})"
        )
    sel = Selection()
    for node in wanted:
        capacity, allocatable = gpu_capacity(gpus[node])
        busy = workload_gpu_pods(pods, node)
        if busy:
            sel.busy[node] = busy
        if allocatable < 1:
            sel.skipped[node] = (f"no allocatable GPU ({capacity} in capacity): the device plugin reports none healthy "
                                 f"(kubectl -n gpu-operator logs -l app=nvidia-device-plugin-daemonset on {node})")  # fmt: skip
            continue
        sel.run[node] = allocatable
    if opts.spec.mode == "diag" and opts.spec.level in EXCLUSIVE_LEVELS and not opts.force:
        blocked = {n: p for n, p in sel.busy.items() if n in sel.run}
        if blocked:
            lines = "; ".join(
                f"{n}: {', '.join(p[:5])}{' ...' if len(p) > 5 else ''}" for n, p in sorted(blocked.items())
            )
            raise UsageError(
                f"--level {opts.spec.level} refused: GPU workloads run on {', '.join(sorted(blocked))} ({lines}); "
                f"a level {opts.spec.level} diagnostic stresses the GPUs for a long time",
                hint="drain the node first (kubectl drain NODE --ignore-daemonsets --delete-emptydir-data), choose other "
                "nodes with --node, or pass --force (the Job waits until the GPUs are free, at most the stuck grace)",
            )
    return sel


def _api(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


class DiagJobs:
    """One ``gpustack diag`` run against one cluster (see :func:`run_diag`)."""

    def __init__(self, kube: Kube, opts: DiagOptions, console: Console, *,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:  # fmt: skip
        self.kube, self.opts, self.console = kube, opts, console
        self.clock, self.sleep = clock, sleep
        self.run_id = secrets.token_hex(4)
        self.created: list[str] = []
        self.tracked: dict[str, _Tracked] = {}

    # -- paths -----------------------------------------------------------------------------------

    @staticmethod
    def _jobs_path(name: str | None = None) -> str:
        base = f"/apis/batch/v1/namespaces/{DIAG_NAMESPACE}/jobs"
        return f"{base}/{name}" if name else base

    # -- steps -----------------------------------------------------------------------------------

    def _leftovers(self, selection: Selection) -> None:
        """Jobs an earlier run left on the selected nodes: finished ones are deleted, an active one means
        another diag is running there (refused, nothing created)."""
        if self.kube.resource("batch/v1", "Job") is None:
            raise GpustackError("the API server does not serve batch/v1 Jobs")
        try:
            jobs = self.kube.list_all(self._jobs_path(), {"labelSelector": f"{PART_OF}=gpustack"})
        except ApiException as exc:
            if exc.status == 404:  # the namespace does not exist yet
                return
            raise GpustackError(f"cannot list Jobs in {DIAG_NAMESPACE}: {_api(exc)}") from None
        mine = {job_name(n, self.opts.spec): n for n in selection.run}
        active = []
        for job in jobs:
            name = str((job.get("metadata") or {}).get("name"))
            if name not in mine:
                continue
            status = job.get("status") or {}
            finished = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                           for c in status.get("conditions") or [])  # fmt: skip
            if finished or not status.get("active"):
                self.console.info(f"diag: removing Job {DIAG_NAMESPACE}/{name} left by an earlier run on {mine[name]}")
                self._delete(name)
            else:
                started = status.get("startTime") or (job.get("metadata") or {}).get("creationTimestamp")
                active.append(f"{mine[name]} (Job {DIAG_NAMESPACE}/{name}, started {started})")
        if active:
            raise BusyError(
                f"another diagnostic is running on {'; '.join(active)}",
                hint=f"wait for it, or stop it: kubectl -n {DIAG_NAMESPACE} delete job NAME --cascade=background",
            )

    def _create(self, node: str, gpus: int) -> None:
        job = build_job(node, gpus, self.opts.spec, run_id=self.run_id, image=self.opts.image)
        name = job["metadata"]["name"]
        outcome = fd.NodeOutcome(node=node, gpus=gpus, job=name)
        now = self.clock()
        self.tracked[node] = _Tracked(outcome, deadline=now + self.opts.spec.active_deadline + self.opts.deadline_margin,
                                      started=now)  # fmt: skip
        try:
            self.kube.request("POST", self._jobs_path(), body=job)
        except ApiException as exc:
            outcome.error = f"creating Job {DIAG_NAMESPACE}/{name} failed: {_api(exc)}"
            self.tracked[node].done = True
            return
        self.created.append(name)
        self.console.info(f"diag: {node}: Job {DIAG_NAMESPACE}/{name} created ({self.opts.spec.describe()}, {gpus} GPU(s), "
                          f"deadline {self.opts.spec.active_deadline}s)")  # fmt: skip

    def _delete(self, name: str) -> bool:
        """Delete a Job and its pods (Background: batch/v1 would orphan the pods otherwise)."""
        try:
            self.kube.request("DELETE", self._jobs_path(name), query={"propagationPolicy": "Background"})
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return True

    def cleanup(self) -> list[str]:
        """Delete every Job this run created; returns the ones that could not be deleted (with why)."""
        left = []
        for name in list(self.created):
            for attempt in range(2):
                try:
                    self._delete(name)
                    self.created.remove(name)
                    break
                except Interrupted:  # a second Ctrl-C during cleanup: finish cleaning up first
                    continue
                except (ApiException, GpustackError) as exc:
                    if attempt == 1:
                        left.append(f"{name} ({exc})")
        if left:
            self.console.error(
                f"could not delete diag Job(s): {', '.join(left)}",
                hint=f"kubectl -n {DIAG_NAMESPACE} delete job -l {RUN_LABEL}={self.run_id} --cascade=background "
                "(or wait: they delete themselves an hour after they finish)",
            )
        return left

    def _pod_node(self, pod: Obj) -> str:
        return str(((pod.get("metadata") or {}).get("annotations") or {}).get(NODE_ANNOTATION) or "")

    def _read_log(self, pod: Obj) -> str:
        name = str((pod.get("metadata") or {}).get("name"))
        try:
            return self.kube.text(f"/api/v1/namespaces/{DIAG_NAMESPACE}/pods/{name}/log", {"container": "dcgm"})[
                -LOG_LIMIT:
            ]
        except ApiException as exc:
            return f"(log unavailable: {_api(exc)})"

    def _poll(self, busy: Mapping[str, list[str]]) -> None:
        selector = {"labelSelector": f"{RUN_LABEL}={self.run_id}"}
        pods = self.kube.list_all(f"/api/v1/namespaces/{DIAG_NAMESPACE}/pods", selector)
        jobs = {str((j.get("metadata") or {}).get("name")): j for j in self.kube.list_all(self._jobs_path(), selector)}
        by_node: dict[str, Obj] = {}  # node -> its pod
        for item in pods:
            by_node.setdefault(self._pod_node(item), item)
        now = self.clock()
        for node, t in self.tracked.items():
            if t.done:
                continue
            o = t.outcome
            pod = by_node.get(node)
            job = jobs.get(o.job) or {}
            failed = [c for c in (job.get("status") or {}).get("conditions") or []
                      if c.get("type") == "Failed" and c.get("status") == "True"]  # fmt: skip
            o.elapsed = now - t.started
            if pod is not None:
                phase, reason, message = _pod_state(pod)
                o.phase, o.reason, o.message = phase, reason, message
                if phase in ("Succeeded", "Failed"):
                    o.log = self._read_log(pod)
                    t.done = True
                    self.console.info(f"diag: {node}: finished ({phase.lower()}) after {o.elapsed:.0f}s")
                    continue
                if phase == "Pending" and (reason == "Unschedulable" or reason in STUCK_REASONS):
                    t.stuck_since = now if t.stuck_since is None else t.stuck_since
                    if now - t.stuck_since >= self.opts.stuck_grace:
                        o.stuck, o.blocking_pods, t.done = True, list(busy.get(node, [])), True
                        self.console.info(f"diag: {node}: gave up waiting: {reason}")
                        continue
                else:
                    t.stuck_since = None
                state = f"{phase} {reason}".strip()
                if state != t.last_state:
                    t.last_state = state
                    self.console.info(
                        f"diag: {node}: {state.lower()}" + (" (dcgmi is running)" if phase == "Running" else "")
                    )
            if failed:
                reason = str(failed[0].get("reason") or "")
                o.timed_out = reason == "DeadlineExceeded"
                o.reason = o.reason or reason
                if pod is not None and o.phase == "Running":
                    o.log = self._read_log(pod)
                o.error = "" if o.timed_out else f"the Job failed: {reason} {failed[0].get('message') or ''}".strip()
                t.done = True
                continue
            if now >= t.deadline:
                o.timed_out, t.done = True, True
                if pod is not None and o.phase == "Running":
                    o.log = self._read_log(pod)

    def execute(self, selection: Selection) -> list[fd.NodeOutcome]:
        """Create the Jobs, wait for them, and always delete them."""
        self._leftovers(selection)
        self.kube.apply_one(namespace_object())
        try:
            for node, gpus in sorted(selection.run.items()):
                self._create(node, gpus)
            polls = 0
            while not all(t.done for t in self.tracked.values()):
                # a level-1 run is over in seconds: look early, then every poll_interval
                self.sleep(min(self.opts.poll_interval, (1.0, 2.0)[polls] if polls < 2 else self.opts.poll_interval))
                polls += 1
                self._poll(selection.busy)
        finally:
            self.cleanup()
        outcomes = [t.outcome for t in self.tracked.values()]
        outcomes += [fd.NodeOutcome(node=n, not_started=why) for n, why in selection.skipped.items()]
        return sorted(outcomes, key=lambda o: o.node)

    def record(self, outcomes: list[fd.NodeOutcome], findings: list[Finding], by: str) -> None:
        """Write each diagnosed node's verdict on the node (``gpustack.io/diag-result``): ``gpustack health
        release`` requires a passing level >= 2 diag after the quarantine."""
        if self.opts.spec.mode != "diag":
            return
        for o in outcomes:
            if not o.log:  # no result: the previous verdict stays
                continue
            verdict = {"level": self.opts.spec.level, "result": "pass" if fd.passed(findings, o.node) else "fail",
                       "warnings": fd.warnings(findings, o.node), "at": now_rfc3339(), "job": o.job, "by": by}  # fmt: skip
            patch = {"metadata": {"annotations": {ANN_DIAG_RESULT: json.dumps(verdict, sort_keys=True)}}}
            try:
                self.kube.request("PATCH", f"/api/v1/nodes/{o.node}", body=patch, query={"fieldManager": DIAG_FIELD_MANAGER},
                                  content_type="application/merge-patch+json")  # fmt: skip
            except ApiException as exc:
                self.console.warn(f"could not record the diag result on node {o.node}: {_api(exc)}")


def _pod_state(pod: Obj) -> tuple[str, str, str]:
    status = pod.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    for cs in status.get("containerStatuses") or []:
        state = (cs or {}).get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting.get("reason"):
            return phase, str(waiting["reason"]), str(waiting.get("message") or "")
        terminated = state.get("terminated") or {}
        if terminated.get("reason") and phase in ("Succeeded", "Failed"):
            return phase, str(terminated["reason"]), f"exit code {terminated.get('exitCode')}"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return phase, str(cond.get("reason") or "Unschedulable"), str(cond.get("message") or "")
    return phase, str(status.get("reason") or ""), str(status.get("message") or "")


def run_diag(kube: Kube, opts: DiagOptions, console: Console, *, by: str | None = None,
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> list[Finding]:  # fmt: skip
    """Select the nodes, run the Jobs, return every finding (and record diag verdicts on the nodes)."""
    nodes = kube.list_all("/api/v1/nodes")
    if not opts.nodes and not gpu_nodes(nodes):
        return [Finding(fd.RUN_ID, fd.LAYER, "fail", f"no node has {GPU} capacity: nothing to diagnose",
                        evidence=f"{len(nodes)} node(s), none with {GPU}",
                        fix="gpustack doctor --layer gpu-operator (is the NVIDIA device plugin running?)")]  # fmt: skip
    pods = kube.list_all("/api/v1/pods", {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"})
    selection = select_nodes(nodes, pods, opts)
    run = DiagJobs(kube, opts, console, clock=clock, sleep=sleep)
    outcomes = run.execute(selection) if selection.run else [
        fd.NodeOutcome(node=n, not_started=why) for n, why in sorted(selection.skipped.items())]  # fmt: skip
    findings = [f for o in outcomes for f in fd.node_findings(o, opts.spec)]
    run.record(outcomes, findings, by or who())
    return findings
