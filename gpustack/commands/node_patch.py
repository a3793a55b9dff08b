"""``gpustack node patch NODE... | --all``: the distribution's updates (kernel included) on running nodes, one node
at a time (workers ``--max-unavailable`` at a time), without losing a GPU job; the `node-patch` sequence run by the
one engine.

    run 1, every named node: inspect (playbook, read-only: what an upgrade would install, the kernel that boots
      next and its headers, the reboot flag) -> check (Python: which nodes need a turn; a PodDisruptionBudget that
      blocks a drain stops the run here, nothing changed)
    then one run per turn, control planes first, limited to the turn's nodes: a control plane alone (one etcd
    member down at a time), workers up to --max-unavailable together (default 1):
      etcd-before (control planes: etcd's own member health, as node remove judges it) -> drain (cordon, the GPU
      jobs waited for, the Eviction API) -> packages (gpustack's packages held, apt-get upgrade, the new kernel's
      headers, a reboot when asked) -> etcd-after -> gpu (Ready, GPUs allocatable, the GPU Operator's pods Ready,
      as before the drain) -> uncordon

The first node that does not come back stops the run, cordoned. A re-run continues: a node this command left
cordoned gets its turn again (gpustack.cluster.patch_node); a converged re-run changes nothing (no node needs a
turn, so nothing is cordoned). Decisions: docs/decisions.md, "node patch".
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack.console import literal
from gpustack.engine.options import RunFlags
from gpustack.engine.plan import CommandPlan, Stage, Table
from gpustack.engine.steps import StageSummary, StepContext
from gpustack.errors import GpustackError, UsageError

if TYPE_CHECKING:
    from gpustack.config.model import Config, Node
    from gpustack.console import Console
    from gpustack.runners.kube import Kube, Obj

STAGES: tuple[Stage, ...] = (
    Stage(
        "inspect",
        "What a patch would change",
        "ansible",
        "targets",
        "nothing on the hosts (apt's package lists refreshed): an apt-get upgrade simulated, gpustack's held packages "
        "apart; the kernel that boots next and its headers; /var/run/reboot-required; each host's answer written to "
        "<state>/clusters/<cluster>/node-patch/ on this machine (0600)",
    ),
    Stage(
        "check",
        "Which nodes get a turn",
        "python",
        "local",
        "nothing: a node gets a turn when its host has upgrades, missing headers or a reboot due, or an earlier run "
        "left it cordoned; a server-side dry-run eviction of every pod on those nodes: a PodDisruptionBudget that "
        "blocks stops the run here (GPU jobs are waited for at the node's turn instead)",
    ),
    Stage(
        "etcd-before",
        "etcd before the node goes down",
        "ansible",
        "control-plane",
        "nothing (control planes only, one at a time): every etcd member healthy, and the node's own member down "
        "for the reboot still leaves a majority (etcd's member health, as node remove judges it)",
    ),
    Stage(
        "drain",
        "Cordon, GPU jobs, drain",
        "python",
        "targets",
        "the node cordoned; its GPU jobs (pods requesting an NVIDIA GPU resource, owned by a Job or by no "
        "controller) waited for up to --gpu-job-timeout: still running, the node is uncordoned and the run refused "
        "unless --evict-gpu-pods; then every other pod evicted through the Eviction API (PodDisruptionBudgets "
        "respected; a failed drain uncordons)",
    ),
    Stage(
        "packages",
        "Upgrade, headers, reboot",
        "ansible",
        "targets",
        "kubelet, kubeadm, kubectl (and the distribution's containerd) held; with hosts.hold_kernel gpustack's kernel "
        "holds released for the upgrade and the kernel the host runs afterwards held again; apt-get upgrade --with-new-pkgs; "
        "linux-headers-<release> of the kernel that boots next where the host builds kernel modules; a reboot "
        "(ansible.builtin.reboot) only when /var/run/reboot-required exists",
    ),
    Stage(
        "etcd-after",
        "etcd after the node came back",
        "ansible",
        "control-plane",
        "nothing (control planes only): every etcd member healthy again, retried",
    ),
    Stage(
        "gpu",
        "The GPU stack back",
        "python",
        "local",
        "nothing: waits up to --ready-timeout for the node Ready with the host's new boot id, its GPU resources "
        "allocatable as before the drain and the GPU Operator's pods on it (driver, device plugin, dcgm-exporter, "
        "validator) Running and Ready; not back: the run stops, the node stays cordoned",
    ),
    Stage("uncordon", "Uncordon", "python", "local", "the node uncordoned (only a cordon this command made)"),
)

PLAN = CommandPlan(
    "node-patch",
    "gpustack node patch NODE...|--all: apt upgrade, new kernel's headers, reboot when asked; one node at a time, "
    "GPU jobs waited for, PodDisruptionBudgets respected; resumable",
    "node-patch.yml",
    STAGES,
    extravars=("gpustack_node_patch_hold", "gpustack_node_patch_state_dir", "gpustack_node_patch_serial"),
    host_notes={
        "control-plane": "the node itself, when it is a control plane",
        "targets": "the named nodes (inspect: all at once; then each in its turn: a control plane alone, workers "
        "--max-unavailable at a time)",
    },
    details=lambda cfg, _to: details(cfg),
)

#: defaults of the timeouts (seconds); docs/decisions.md, "node patch"
GPU_JOB_TIMEOUT = 3600.0
DRAIN_TIMEOUT = 300.0
READY_TIMEOUT = 1800.0
#: what stays held: the packages gpustack installs at a pinned version (they change through up/upgrade only)
KUBERNETES_PACKAGES = ("kubelet", "kubeadm", "kubectl")


@dataclass(frozen=True)
class PatchOptions(RunFlags):
    nodes: tuple[str, ...] = ()
    all: bool = False
    evict_gpu_pods: bool = False
    gpu_job_timeout: float = GPU_JOB_TIMEOUT
    drain_timeout: float = DRAIN_TIMEOUT
    ready_timeout: float = READY_TIMEOUT
    #: workers patched together in one turn (control planes: always one)
    max_unavailable: int = 1
    #: seconds between two looks at the cluster while waiting
    interval: float = 10.0


def details(cfg: Config) -> list[Table]:
    """`gpustack plan node-patch`: the order of the turns with --all (pure)."""
    rows = [[str(i), n.name, n.role] for i, n in enumerate(select_nodes(cfg, (), True), 1)]
    return [("node patch --all: one node at a time, control planes first", ["#", "node", "role"], rows)]


def held(cfg: Config) -> list[str]:
    """The packages that stay held (pure): Kubernetes', and containerd where it is the distribution's package."""
    return [*KUBERNETES_PACKAGES, *(["containerd"] if cfg.versions.containerd_source == "distribution" else [])]


def select_nodes(cfg: Config, names: Sequence[str], every: bool) -> list[Node]:
    """The nodes to patch, in their order: control planes first, then workers, each in the config's order."""
    if every and names:
        raise UsageError("name nodes or give --all, not both")
    if not every and not names:
        raise UsageError("name the node(s) to patch, or --all: gpustack node patch NODE... | --all")
    by_name = {n.name: n for n in cfg.nodes}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise UsageError(f"no node named {', '.join(unknown)} in the config", hint=f"nodes: {', '.join(by_name)}")
    chosen = set(names) if names else set(by_name)
    return [n for n in cfg.control_planes if n.name in chosen] + [n for n in cfg.workers if n.name in chosen]


def batches(nodes: Sequence[Node], max_unavailable: int = 1) -> list[list[str]]:
    """The turns, in order (pure): each control plane alone -- one etcd member down at a time, whatever the
    cluster's size, so etcd's quorum never rests on a second rebooting member -- then the workers in groups of up to
    ``max_unavailable``, in the given order."""
    if max_unavailable < 1:
        raise UsageError(f"--max-unavailable {max_unavailable}: at least 1 node")
    out = [[n.name] for n in nodes if n.role == "control-plane"]
    workers = [n.name for n in nodes if n.role != "control-plane"]
    return out + [workers[i : i + max_unavailable] for i in range(0, len(workers), max_unavailable)]


def describe(cfg: Config, nodes: Sequence[Node], opts: PatchOptions) -> list[str]:
    """What the patch will do, one line each (shown before asking; pure)."""
    gpu = (
        "evicted (--evict-gpu-pods)"
        if opts.evict_gpu_pods
        else f"waited for up to {opts.gpu_job_timeout:.0f}s, then the patch is refused"
    )
    at_a_time = (
        "one at a time"
        if opts.max_unavailable == 1
        else (f"control planes one at a time, workers up to {opts.max_unavailable} at a time (--max-unavailable)")
    )
    return [
        f"nodes, {at_a_time}: {', '.join(f'{n.name} ({n.role})' for n in nodes)}; a node with nothing to upgrade, "
        "no headers missing and no reboot due is left alone",
        f"each: cordon; GPU jobs {gpu}; drain (PodDisruptionBudgets respected, {opts.drain_timeout:.0f}s)",
        f"apt-get upgrade with {', '.join(held(cfg))} held; the new kernel's headers; reboot only when "
        "/var/run/reboot-required exists",
        f"then the node Ready with its GPUs and GPU Operator pods back (up to {opts.ready_timeout:.0f}s), uncordon; "
        "a node that does not come back stops the run, cordoned",
    ]


@dataclass
class PatchResult:
    run_dirs: list[Path] = field(default_factory=list)
    patched: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)


def turns(states: Mapping[str, Mapping[str, Any]], nodes: Mapping[str, Obj | None], order: Sequence[str]) -> list[str]:
    """The nodes that get a turn, in order (pure; see gpustack.cluster.patch_node.needs_patch)."""
    from gpustack.cluster.patch_node import needs_patch

    return [n for n in order if needs_patch(states.get(n) or {}, nodes.get(n))]


def state_rows(states: Mapping[str, Mapping[str, Any]], order: Sequence[str], due: Sequence[str]) -> list[list[str]]:
    """The check's table: each node's pending upgrades, kernel, headers, reboot (pure)."""
    rows = []
    for n in order:
        s = states.get(n) or {}
        pending = s.get("pending") or []
        kernel = str(s.get("running_kernel") or "?")
        if s.get("newest_kernel") and s.get("newest_kernel") != s.get("running_kernel"):
            kernel += f" -> {s['newest_kernel']}"
        rows.append([
            n, str(len(pending)), ", ".join(s.get("held_pending") or []) or "-", kernel,
            ", ".join(s.get("headers_missing") or []) or "-", "yes" if s.get("reboot_required") else "no",
            "patch" if n in due else "up to date",
        ])  # fmt: skip
    return rows


def patch(cfg: Config, opts: PatchOptions, console: Console, kube: Kube) -> PatchResult:
    """Inspect every named node, then give each node that needs it its turn (one engine run per node)."""
    from gpustack.cluster import drain, patch_node
    from gpustack.engine.run import run
    from gpustack.paths import ensure_private_dir

    nodes = select_nodes(cfg, opts.nodes, opts.all)
    order = [n.name for n in nodes]
    state_dir = ensure_private_dir(patch_node.state_dir(cfg.cluster.name))
    ev: dict[str, Any] = {
        "gpustack_node_patch_hold": held(cfg),
        "gpustack_node_patch_state_dir": str(state_dir),
        "gpustack_node_patch_serial": 1,
    }
    result = PatchResult()
    due: list[str] = []

    def check(ctx: StepContext) -> list[StageSummary]:
        t0 = time.monotonic()
        states = {n: patch_node.host_state(cfg.cluster.name, n) for n in order}
        objs = {n: kube.get("v1", "Node", n) for n in order}
        due[:] = turns(states, objs, order)
        console.table(
            "Patch state", ["node", "upgrades", "held back", "kernel", "headers missing", "reboot", "turn"],
            [[literal(c) for c in row] for row in state_rows(states, order, due)],
        )  # fmt: skip
        blocked = []
        for name in due:
            pv = drain.preview(kube, name)
            gpu_jobs = set(gpu_jobs_on(kube, name))
            blocked += [f"{name}: {q.ref} ({q.owner}): {why}" for q, why in pv.blocked]
            blocked += [f"{name}: {q.ref}: not managed by a controller" for q in pv.pods.unmanaged
                        if q.ref not in gpu_jobs]  # fmt: skip
        if blocked:
            raise drain.DrainError(
                "the drain would be blocked: " + "; ".join(blocked),
                hint="nothing was changed (no node cordoned): relax the PodDisruptionBudget or scale the workload "
                "(move or delete the unmanaged pods), then run again",
            )
        return [StageSummary("check", "ok", time.monotonic() - t0, hosts=order, note=f"{len(due)} to patch")]

    first = opts.run_options(PLAN.select(only=["inspect", "check"]), limit=order, extravars=ev)
    result.run_dirs.append(run(PLAN, cfg, first, console, steps={"check": check}).run_dir)
    result.current = [n for n in order if n not in due]
    if opts.dry_run:
        return result
    by_name = {n.name: n for n in nodes}
    for turn in batches([by_name[n] for n in due], opts.max_unavailable):
        console.print(f"[stage]▶ node patch[/stage] {literal(', '.join(turn))}")
        try:
            result.run_dirs.append(_turn(cfg, opts, console, kube, [by_name[n] for n in turn], ev))
        except GpustackError as exc:
            if not isinstance(exc, patch_node.NodeNotBack):
                left = [n for n in turn if patch_node.cordoned_by_patch(kube.get("v1", "Node", n))]
                for name in left:
                    patch_node.update_record(cfg.cluster.name, name, status="failed", error=exc.message)
                if left:
                    names = ", ".join(left)
                    stays = (
                        f"{names} {'stays' if len(left) == 1 else 'stay'} cordoned; fix the cause, then run the same "
                        f"command again: it continues with {names}"
                    )
                    exc.hint = f"{exc.hint}; {stays}" if exc.hint else stays
            raise
        result.patched += turn
    return result


def gpu_jobs_on(kube: Kube, node: str) -> list[str]:
    from gpustack.cluster import drain, patch_wait

    return patch_wait.gpu_jobs(drain.node_pods(kube, node))


def _turn(
    cfg: Config, opts: PatchOptions, console: Console, kube: Kube, turn: Sequence[Node], ev: Mapping[str, Any]
) -> Path:
    """One turn: one engine run limited to its nodes (a control plane alone, or up to --max-unavailable workers).
    The drain takes the nodes out one after the other (each cordoned, its GPU jobs waited for, drained); the
    packages play patches and reboots them together (its ``serial`` is the turn's size); the GPU stack is waited for
    and the nodes uncordoned one after the other."""
    from gpustack.cluster import patch_node
    from gpustack.engine.run import run

    names, cluster = [n.name for n in turn], cfg.cluster.name

    def say(line: str) -> None:
        console.print(f"  {line}", markup=False)

    def drain_step(ctx: StepContext) -> list[StageSummary]:
        t0 = time.monotonic()
        evicted = 0
        for name in names:
            evicted += 1 + patch_node.take_out(
                kube, cluster, name, gpu_job_timeout=opts.gpu_job_timeout, drain_timeout=opts.drain_timeout,
                evict_gpu_pods=opts.evict_gpu_pods, interval=opts.interval, progress=say,
            )  # fmt: skip
        return [StageSummary("drain", "changed", time.monotonic() - t0, evicted, names)]

    def gpu_step(ctx: StepContext) -> list[StageSummary]:
        t0 = time.monotonic()
        for name in names:
            patch_node.bring_back(kube, cluster, name, timeout=opts.ready_timeout, interval=opts.interval, progress=say)
        return [StageSummary("gpu", "ok", time.monotonic() - t0, hosts=names)]

    def uncordon_step(ctx: StepContext) -> list[StageSummary]:
        t0 = time.monotonic()
        done = sum(patch_node.uncordon(kube, cluster, name) for name in names)
        return [StageSummary("uncordon", "changed" if done else "ok", time.monotonic() - t0, done, names)]

    control_plane = any(n.role == "control-plane" for n in turn)
    if control_plane and len(turn) > 1:
        raise UsageError(f"{', '.join(names)}: a control plane is patched alone (one etcd member down at a time)")
    skip = ["inspect", "check"] + ([] if control_plane else ["etcd-before", "etcd-after"])
    ev = {**ev, "gpustack_node_patch_serial": len(turn)}
    run_opts = opts.run_options(PLAN.select(skip=skip), limit=names, extravars=ev)
    steps = {"drain": drain_step, "gpu": gpu_step, "uncordon": uncordon_step}
    return run(PLAN, cfg, run_opts, console, steps=steps).run_dir
