"""A node's diag outcome -> Findings, with stable ``D..`` check ids. Pure.

One finding per node and test while every GPU agrees (``memory: Pass on 8 GPUs``), one per GPU for a GPU
that failed, warned or skipped (host ``node GPU n``), and ``D00-diag-run`` for the run itself (could
not start, timed out, no output). The report is doctor's (:mod:`gpustack.diagnose.report`), layer
:data:`LAYER`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpustack.checks.model import Finding, Status
from gpustack.diag.dcgmi import (
    DcgmiParseError,
    DiagRun,
    DiagTest,
    DiagWarning,
    EntityResult,
    HealthRun,
    parse_diag,
    parse_health,
    split_log,
)
from gpustack.diag.job import DiagSpec

LAYER = "diag"
RUN_ID = "D00-diag-run"
OTHER_ID = "D19-other-test"
HEALTH_ID = "D20-dcgm-health"

#: dcgmi test (plugin) name -> check id. Names from DCGM 4.6 (nvvs/include/PluginStrings.h); the
#: levels that run them: 1 software; 2 + memory, pcie; 3 + diagnostic, memory_bandwidth,
#: targeted_stress, targeted_power, nvbandwidth, nccl_tests, eud/cpu_eud (as root, when installed);
#: 4 + memtest, pulse_test.
TEST_IDS: dict[str, str] = {
    "software": "D01-software",
    "pcie": "D02-pcie",
    "memory": "D03-memory",
    "diagnostic": "D04-diagnostic",
    "memory_bandwidth": "D05-memory-bandwidth",
    "targeted_stress": "D06-targeted-stress",
    "targeted_power": "D07-targeted-power",
    "nvbandwidth": "D08-nvbandwidth",
    "memtest": "D09-memtest",
    "pulse_test": "D10-pulse-test",
    "eud": "D11-eud",
    "cpu_eud": "D12-cpu-eud",
    "nccl_tests": "D13-nccl-tests",
    "context_create": "D14-context-create",
    "sm_stress": "D15-sm-stress",
}
#: every id this module can produce, with what it reports (docs/operations.md lists them; a test checks)
CHECK_IDS: dict[str, str] = {
    RUN_ID: "the diagnostic Job ran on the node and dcgmi printed a result",
    **{v: f"dcgmi test `{k}`" for k, v in TEST_IDS.items()},
    OTHER_ID: "a dcgmi test gpustack has no id for (named in the finding)",
    HEALTH_ID: "dcgmi health -c: the background health watches (--health)",
}

STATUS: dict[str, Status] = {"Pass": "pass", "Fail": "fail", "Warn": "warn", "Skip": "skip",
                             "Healthy": "pass", "Warning": "warn", "Failure": "fail"}  # fmt: skip


@dataclass
class NodeOutcome:
    """What happened on one node (filled by the runner; plain data, so it is built in tests too)."""

    node: str
    gpus: int = 0
    job: str = ""
    phase: str = ""  # the pod's: Pending, Running, Succeeded, Failed ("" before it existed)
    reason: str = ""
    message: str = ""
    log: str = ""
    elapsed: float = 0.0
    timed_out: bool = False
    stuck: bool = False  # never started: unschedulable or image pull errors beyond the grace period
    error: str = ""  # an API error, or why no Job was created
    not_started: str = ""  # why gpustack did not create a Job on this node
    blocking_pods: list[str] = field(default_factory=list)  # GPU pods on the node while it was stuck


def _ranges(ids: Sequence[int]) -> str:
    """[0, 1, 2, 5, 6] -> '0-2, 5-6'."""
    out: list[str] = []
    nums = sorted(set(ids))
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ", ".join(out)


def _fix(node: str, gpu: int, warnings: Sequence[DiagWarning], level: int, serial: str) -> str:
    """The next step for a failing GPU, from DCGM's error category (dcgmErrorCategory_t)."""
    cats = {w.category for w in warnings}
    rerun = f"gpustack diag --node {node} --level {max(level, 2)}"
    rma = f"a repeat after a reset: RMA the GPU{f' (serial {serial})' if serial else ''}"
    if cats & {10}:  # hardware memory
        return f"drain {node}, reset GPU {gpu} (nvidia-smi -r -i {gpu}) or reboot, then {rerun}; {rma}"
    if cats & {13}:  # PCIe
        return (
            f"nvidia-smi -q -i {gpu} -d PCIE on {node} (link width/generation); reseat the GPU or riser, then {rerun}"
        )
    if cats & {9}:  # thermal
        return f"check the cooling of {node} (fans, inlet air: ipmitool sdr type Temperature), then {rerun}"
    if cats & {14}:  # power
        return f"check the power supply and power cap of {node} (nvidia-smi -q -i {gpu} -d POWER), then {rerun}"
    if cats & {11, 12}:  # NVLink / NVSwitch
        return f"nvidia-smi nvlink -s -i {gpu} and Fabric Manager on {node} (systemctl status nvidia-fabricmanager), then {rerun}"
    if cats & {3, 4, 6, 8}:  # software configuration / library / CUDA / other
        return f"fix the configuration named above on {node}, then {rerun}"
    return f"on {node}: dcgmi diag -r {max(level, 2)} -i {gpu} -v for details; then {rerun}"


def _gpu_label(run: DiagRun, r: EntityResult) -> str:
    info = run.gpu(r.entity_id)
    serial = f", serial {info.serial}" if info and info.serial else ""
    return f"GPU {r.entity_id}{serial}"


def _test_findings(node: str, test: DiagTest, run: DiagRun, level: int) -> list[Finding]:
    fid = TEST_IDS.get(test.name, OTHER_ID)
    gpu_results = [r for r in test.results if r.entity_group == "GPU"]
    other = [r for r in test.results if r.entity_group != "GPU"]
    out: list[Finding] = []
    clean = [r for r in gpu_results if r.status == "Pass" and not r.warnings]
    if clean:
        out.append(Finding(fid, LAYER, "pass", f"{test.name}: pass on {len(clean)} GPU(s) ({_ranges([r.entity_id for r in clean])})",
                           host=node, evidence="\n".join(i for r in clean[:1] for i in r.info)))  # fmt: skip
    for r in gpu_results:
        if r in clean:
            continue
        status = STATUS.get(r.status, "fail")
        label = _gpu_label(run, r)
        why = "; ".join(w.message for w in r.warnings) or r.status
        info = run.gpu(r.entity_id)
        fix = _fix(node, r.entity_id, r.warnings, level, info.serial if info else "") if status == "fail" else ""
        out.append(Finding(fid, LAYER, status, f"{test.name}: {r.status.lower()} on {label}: {why}",
                           host=f"{node} GPU {r.entity_id}",
                           evidence="\n".join([w.describe() for w in r.warnings] + list(r.info)), fix=fix))  # fmt: skip
    for r in other:  # CPU entities (cpu_eud)
        status = STATUS.get(r.status, "fail")
        out.append(Finding(fid, LAYER, status, f"{test.name}: {r.status.lower()} on {r.entity_group} {r.entity_id}",
                           host=node, evidence="\n".join(w.describe() for w in r.warnings)))  # fmt: skip
    if not test.results:  # a test with only a summary (it ran on no entity)
        status = STATUS.get(test.status, "fail")
        why = "; ".join(w.message for w in test.warnings) or test.status
        out.append(Finding(fid, LAYER, status, f"{test.name}: {why}", host=node,
                           evidence="\n".join(w.describe() for w in test.warnings)))  # fmt: skip
    elif test.status == "Fail" and not any(f.status == "fail" for f in out):
        # the summary failed on something no entity carries (a global error)
        why = "; ".join(w.message for w in test.warnings) or "failed"
        out.append(Finding(fid, LAYER, "fail", f"{test.name}: {why}", host=node,
                           evidence="\n".join(w.describe() for w in test.warnings),
                           fix=f"on {node}: dcgmi diag -r {max(level, 2)} -v for details"))  # fmt: skip
    return out


def _run_problem(o: NodeOutcome, spec: DiagSpec) -> Finding | None:
    """D00 when the run itself did not produce a result."""
    what = spec.describe()
    if o.not_started:
        return Finding(RUN_ID, LAYER, "fail" if not o.not_started.startswith("skipped") else "skip",
                       f"{what} not run: {o.not_started}", host=o.node)  # fmt: skip
    if o.error and not o.log:
        return Finding(RUN_ID, LAYER, "fail", f"{what} could not run: {o.error}", host=o.node,
                       fix=f"kubectl -n gpustack-diag describe job {o.job}" if o.job else "")  # fmt: skip
    if o.stuck:
        held = f" GPU pods on the node: {', '.join(o.blocking_pods)}." if o.blocking_pods else ""
        if o.reason in ("Unschedulable", ""):
            return Finding(RUN_ID, LAYER, "fail",
                           f"{what} could not start: the Job needs all {o.gpus} GPU(s) of {o.node} and was not scheduled.{held}",
                           host=o.node, evidence=o.message,
                           fix=f"run it when the GPUs are free (kubectl drain {o.node} --ignore-daemonsets --delete-emptydir-data "
                               f"moves the workloads away), or see kubectl describe node {o.node}")  # fmt: skip
        return Finding(RUN_ID, LAYER, "fail", f"{what} could not start: {o.reason}", host=o.node, evidence=o.message,
                       fix=f"kubectl -n gpustack-diag describe pod -l job-name={o.job} (image pull: is nvcr.io reachable "
                           "from the node, or mirrored?)")  # fmt: skip
    if o.phase == "Failed" and not o.log.strip():  # e.g. the kubelet refused it (UnexpectedAdmissionError)
        return Finding(RUN_ID, LAYER, "fail", f"{what} pod failed before it printed anything: {o.reason or 'Failed'}",
                       host=o.node, evidence=o.message, fix=f"kubectl -n gpustack-diag describe pod -l job-name={o.job}")  # fmt: skip
    if o.timed_out and not o.log:
        return Finding(RUN_ID, LAYER, "fail", f"{what} timed out after {o.elapsed:.0f}s without a result", host=o.node,
                       evidence=f"pod phase {o.phase or 'unknown'} {o.reason}".strip(),
                       fix=f"--timeout SECONDS to allow more; kubectl -n gpustack-diag logs job/{o.job} while it runs")  # fmt: skip
    return None


def node_findings(o: NodeOutcome, spec: DiagSpec) -> list[Finding]:
    """Every finding for one node's outcome."""
    problem = _run_problem(o, spec)
    if problem is not None:
        return [problem]
    what = spec.describe()
    out = split_log(o.log)
    if not out.begun:
        tail = "\n".join(o.log.strip().splitlines()[-8:])
        return [Finding(RUN_ID, LAYER, "fail", f"{what} did not start on {o.node}: nv-hostengine did not come up",
                        host=o.node, evidence=tail,
                        fix=f"kubectl -n gpustack-diag logs job/{o.job}; check the driver on {o.node} (nvidia-smi)")]  # fmt: skip
    try:
        if spec.mode == "health":
            return health_findings(o.node, parse_health(out.text))
        run = parse_diag(out.text)
    except DcgmiParseError as exc:
        timed = " (the container was stopped: timed out)" if o.timed_out or out.exit_code is None else ""
        return [Finding(RUN_ID, LAYER, "fail", f"{what} printed no result{timed}: {exc}", host=o.node,
                        evidence=out.text.strip()[-600:], fix=f"kubectl -n gpustack-diag logs job/{o.job}")]  # fmt: skip
    if run.runtime_error:
        timeout = "Timeout" in run.runtime_error
        summary = (f"{what} timed out (dcgmi --timeout {spec.dcgmi_timeout}s)" if timeout
                   else f"{what} could not complete: {run.runtime_error.splitlines()[0]}")  # fmt: skip
        return [Finding(RUN_ID, LAYER, "fail", summary, host=o.node, evidence=run.runtime_error,
                        fix=("--timeout SECONDS to allow more (GPUs under load run the tests slower)" if timeout
                             else f"on {o.node}: dcgmi diag -r {spec.level} -v"))]  # fmt: skip
    versions = ", ".join(x for x in (f"DCGM {run.version}" if run.version else "",
                                     f"driver {run.driver}" if run.driver else "") if x)  # fmt: skip
    findings = [Finding(RUN_ID, LAYER, "pass",
                        f"{what} ran on {len(run.gpus) or o.gpus} GPU(s) in {o.elapsed:.0f}s" + (f" ({versions})" if versions else ""),
                        host=o.node)]  # fmt: skip
    for test in run.tests:
        findings += _test_findings(o.node, test, run, spec.level)
    return findings


def health_findings(node: str, run: HealthRun) -> list[Finding]:
    """``dcgmi health -c``: the overall verdict per node, then one finding per entity with incidents."""
    overall = STATUS.get(run.overall, "fail")
    out = [Finding(HEALTH_ID, LAYER, overall,
                   f"dcgmi health: {run.overall or 'no verdict'} ({len(run.entities)} entity(ies) with incidents)",
                   host=node)]  # fmt: skip
    for e in run.entities:
        status = STATUS.get(e.health, "fail")
        lines = [f"{i.system}: {i.health}: {i.message}" for i in e.incidents]
        fix = (f"gpustack diag --node {node} --level 2 for the active tests; kubectl drain {node} before a reset"
               if status == "fail" else "")  # fmt: skip
        out.append(Finding(HEALTH_ID, LAYER, status,
                           f"{e.entity_group} {e.entity_id}: {e.health}: " + "; ".join(i.message or i.system for i in e.incidents),
                           host=f"{node} {e.entity_group} {e.entity_id}", evidence="\n".join(lines), fix=fix))  # fmt: skip
    return out


def passed(findings: Sequence[Finding], node: str) -> bool:
    """Whether a node's diag passed: it ran, and nothing failed on the node or any of its GPUs."""
    mine = [f for f in findings if f.host == node or (f.host or "").startswith(f"{node} ")]
    ran = any(f.id == RUN_ID and f.status == "pass" for f in mine)
    return ran and not any(f.status == "fail" for f in mine)
