"""A node's diag outcome -> Findings, with stable ``D..`` check ids. Pure.

One finding per node and test while every GPU agrees (``memory: Pass on 8 GPUs``), one per GPU for a GPU
that failed, warned or skipped (host ``node GPU n``), and ``D00-diag-run`` for the run itself (could
not start, timed out, no output). The report is doctor's (:mod:`gpustack.diagnose.report`), layer
:data:`LAYER`.

Whether a GPU failed or warned is decided from the errors DCGM attaches (``error_id``), not from the status
string, which DCGM 4.x writes "Fail" for a warning too (:mod:`gpustack.diag.dcgm_errors` says which errors
block a release; docs/operations.md "Warnings, failures and the release").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpustack.checks.model import Finding, Status
from gpustack.diag.dcgm_errors import blocks_release
from gpustack.diag.dcgmi import parse_diag, parse_health, split_log
from gpustack.diag.job import DiagSpec
from gpustack.diag.model import DcgmiParseError, DiagRun, DiagTest, DiagWarning, EntityResult, HealthRun

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


def error_status(warnings: Sequence[DiagWarning]) -> Status:
    """What DCGM's errors say, whatever the status string: ``fail`` when one blocks a release
    (:func:`gpustack.diag.dcgm_errors.blocks_release`), ``warn`` when every one is a warning-only state."""
    return "fail" if any(blocks_release(w.error_id) for w in warnings) else "warn"


def result_status(r: EntityResult) -> Status:
    """A GPU's result with errors of its own: Pass and Skip as written; anything else ("Fail", which is
    also how DCGM 4.x writes a WARN, or "Warn") decided by the errors."""
    if r.status == "Skip":
        return "skip"
    if r.status == "Pass":
        return "warn" if r.warnings else "pass"
    return error_status(r.warnings) if r.warnings else ("warn" if r.status == "Warn" else "fail")


def _test_findings(node: str, test: DiagTest, run: DiagRun, level: int) -> list[Finding]:
    fid = TEST_IDS.get(test.name, OTHER_ID)
    name = test.label
    gpu_results = [r for r in test.results if r.entity_group == "GPU"]
    other = [r for r in test.results if r.entity_group != "GPU"]
    attached = {w for r in test.results for w in r.warnings}
    unattached = [w for w in test.warnings if w not in attached]  # global errors: test_summary only
    clean = [r for r in gpu_results if r.status == "Pass" and not r.warnings]
    # "Fail" (or "Warn") with no error of its own: DCGM marks every GPU of a test when one check warns or
    # fails the whole test (PluginTest::SetResult), the error going to one GPU or to none
    bare = [r for r in gpu_results if r.status not in ("Pass", "Skip") and not r.warnings]
    out: list[Finding] = []
    if clean:
        out.append(Finding(fid, LAYER, "pass", f"{name}: pass on {len(clean)} GPU(s) ({_ranges([r.entity_id for r in clean])})",
                           host=node, evidence="\n".join(i for r in clean[:1] for i in r.info)))  # fmt: skip
    for r in gpu_results:
        if r in clean or r in bare:
            continue
        status = result_status(r)
        label = _gpu_label(run, r)
        why = "; ".join(w.message for w in r.warnings) or r.status
        written = (
            " (dcgmi wrote 'Fail': DCGM 4.x's JSON writes a warning so)"
            if status == "warn" and r.status == "Fail"
            else ""
        )
        info = run.gpu(r.entity_id)
        fix = _fix(node, r.entity_id, r.warnings, level, info.serial if info else "") if status == "fail" else ""
        out.append(Finding(fid, LAYER, status, f"{name}: {status} on {label}: {why}{written}",
                           host=f"{node} GPU {r.entity_id}",
                           evidence="\n".join([w.describe() for w in r.warnings] + list(r.info)), fix=fix))  # fmt: skip
    # the GPUs whose own errors made the test not pass
    erring = [r.entity_id for r in gpu_results if r.warnings and r.status not in ("Pass", "Skip")]
    # a failing error elsewhere explains the marking (and fails the run); warnings alone do not: DCGM 4.x's JSON
    # writes a GPU marked WARN by another GPU's warning exactly as one FAILed with no error (the software test's
    # denylist check fails every GPU without one when a readlink fails: Software.cpp checkDriverPathDenylist)
    explained = any(blocks_release(w.error_id) for r in gpu_results if r.entity_id in erring for w in r.warnings)
    if bare and not unattached and erring and not explained:
        where = _ranges(erring)
        for r in bare:
            out.append(Finding(fid, LAYER, "fail", f"{name}: fail on {_gpu_label(run, r)}: dcgmi wrote "
                               f"'{r.status}' with no error of its own, and the test's only errors (GPU {where}) are "
                               "warnings, which DCGM 4.x's JSON cannot tell from a failure that names no error: "
                               "failed closed", host=f"{node} GPU {r.entity_id}",
                               fix=f"fix the warning on GPU {where} and run again (a clean run shows whether GPU "
                                   f"{r.entity_id} passes); on {node}: dcgmi diag -r {max(level, 2)} -v shows Warn or Fail"))  # fmt: skip
    elif bare and not unattached:
        marked = _ranges([r.entity_id for r in bare])
        if erring:  # a failing error sits on other GPUs: these passed every check of the test
            where = _ranges(erring)
            out.append(Finding(fid, LAYER, "pass",
                               f"{name}: pass on {len(bare)} GPU(s) ({marked}): no error of their own (dcgmi writes "
                               f"'{bare[0].status}' for every GPU of the test when one check warns or fails; the error "
                               f"is on GPU {where})", host=node))  # fmt: skip
        else:  # nothing says why: fail closed
            for r in bare:
                status = "warn" if r.status == "Warn" else "fail"
                out.append(Finding(fid, LAYER, status, f"{name}: {r.status.lower()} on {_gpu_label(run, r)}: DCGM names no error",
                                   host=f"{node} GPU {r.entity_id}", fix=f"on {node}: dcgmi diag -r {max(level, 2)} -v for details"))  # fmt: skip
    for r in other:  # CPU entities (cpu_eud)
        status = result_status(r)
        out.append(Finding(fid, LAYER, status, f"{name}: {r.status.lower()} on {r.entity_group} {r.entity_id}",
                           host=node, evidence="\n".join(w.describe() for w in r.warnings)))  # fmt: skip
    if unattached or not test.results:  # errors of the whole test, or a test with only a summary
        if unattached:  # a skipped test stays skipped (its reason is an error entry too: DCGM_FR_TEST_SKIPPED)
            status = "skip" if test.status == "Skip" and not bare else error_status(unattached)
        else:
            status = STATUS.get(test.status, "fail") if test.status in ("Pass", "Skip", "Warn") else "fail"
        why = "; ".join(w.message for w in unattached or test.warnings) or test.status or "no status"
        marked = f" (dcgmi marks GPU(s) {_ranges([r.entity_id for r in bare])} '{bare[0].status}')" if bare else ""
        out.append(Finding(fid, LAYER, status, f"{name}: {why}{marked}", host=node,
                           evidence="\n".join(w.describe() for w in unattached or test.warnings),
                           fix=f"on {node}: dcgmi diag -r {max(level, 2)} -v for details" if status == "fail" else ""))  # fmt: skip
    elif test.status not in ("Pass", "Skip", "") and not any(f.status in ("fail", "warn") for f in out):
        # the summary did not pass, and nothing above says why: fail closed
        out.append(Finding(fid, LAYER, "fail", f"{name}: {test.status.lower()} with no error named", host=node,
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
                                     f"driver {run.driver}" if run.driver else "",
                                     "DCGM 3.x output" if run.shape == "3.x" else "",
                                     f"{run.iterations} iteration(s), overall {run.overall or 'unknown'}" if run.iterations else "")
                         if x)  # fmt: skip
    findings = [Finding(RUN_ID, LAYER, "pass",
                        f"{what} ran on {len(run.gpus) or o.gpus} GPU(s) in {o.elapsed:.0f}s" + (f" ({versions})" if versions else ""),
                        host=o.node)]  # fmt: skip
    for test in run.tests:
        findings += _test_findings(o.node, test, run, spec.level)
    named = any(f.status in ("fail", "warn") for f in findings)
    if run.overall == "Fail" and not named:
        findings.append(Finding(RUN_ID, LAYER, "fail", f"{what}: dcgmi reports Overall Result Fail but names no error"
                                + (f" ({run.overall_warning})" if run.overall_warning else ""), host=o.node,
                                fix=f"on {o.node}: dcgmi diag -r {spec.level} -v"))  # fmt: skip
    elif out.exit_code not in (0, None) and not named:  # dcgmi exits non-zero for any error, warnings too
        findings.append(Finding(RUN_ID, LAYER, "fail", f"{what}: dcgmi exited {out.exit_code} but its JSON names no error",
                                host=o.node, evidence=out.text.strip()[-600:], fix=f"on {o.node}: dcgmi diag -r {spec.level} -v"))  # fmt: skip
    return findings


#: health systems whose name needs a word: DCGM reports its "devastating" XIDs (48, 74, 79, 94, 95, 119, 120,
#: 140) with the system DCGM_HEALTH_WATCH_ALL, which dcgmi prints as "Internal error" (Health.cpp v4.6.0
#: HelperSystemToString has no case for it; DcgmHealthWatch.cpp MonitorDevastatingXids)
SYSTEM_NOTES = {"Internal error": "a devastating XID (DCGM reports those under the system 'Internal error')"}


def health_findings(node: str, run: HealthRun) -> list[Finding]:
    """``dcgmi health -c``: the overall verdict per node, then one finding per entity with incidents."""
    overall = STATUS.get(run.overall, "fail")
    out = [Finding(HEALTH_ID, LAYER, overall,
                   f"dcgmi health: {run.overall or 'no verdict'} ({len(run.entities)} entity(ies) with incidents)",
                   host=node)]  # fmt: skip
    for e in run.entities:
        status = STATUS.get(e.health, "fail")
        lines = [f"{i.system}: {i.health}: {i.message}" + (f" [{SYSTEM_NOTES[i.system]}]" if i.system in SYSTEM_NOTES else "")
                 for i in e.incidents]  # fmt: skip
        fix = (f"gpustack diag --node {node} --level 2 for the active tests; kubectl drain {node} before a reset"
               if status == "fail" else "")  # fmt: skip
        out.append(Finding(HEALTH_ID, LAYER, status,
                           f"{e.entity_group} {e.entity_id}: {e.health}: " + "; ".join(i.message or i.system for i in e.incidents),
                           host=f"{node} {e.entity_group} {e.entity_id}", evidence="\n".join(lines), fix=fix))  # fmt: skip
    return out


def _mine(findings: Sequence[Finding], node: str) -> list[Finding]:
    return [f for f in findings if f.host == node or (f.host or "").startswith(f"{node} ")]


def passed(findings: Sequence[Finding], node: str) -> bool:
    """Whether a node's diag passed: it ran, and nothing failed on the node or any of its GPUs. A warning
    (an error :func:`gpustack.diag.dcgm_errors.blocks_release` lets through) does not fail it."""
    mine = _mine(findings, node)
    ran = any(f.id == RUN_ID and f.status == "pass" for f in mine)
    return ran and not any(f.status == "fail" for f in mine)


def warnings(findings: Sequence[Finding], node: str) -> int:
    """How many warnings the node's diag had (recorded with the verdict)."""
    return sum(1 for f in _mine(findings, node) if f.status == "warn")
