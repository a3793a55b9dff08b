"""``gpustack upgrade --to 1.Y[.Z]``: Kubernetes one minor (or a patch) up, control plane first,
workers one at a time (playbooks/upgrade.yml, role upgrade), run by the one engine.

    target resolved and the matrix checked (no host contacted)
    -> preflight (read-only facts: each node's installed version from its marker)
    -> the skew policy (gpustack/cluster/skew.py): refused with exit 2 before anything changes
    -> <state>/clusters/<cluster>/upgrade.json written "running"
    -> repository, control-plane, workers (each node records its steps on the host and, when
       done, in upgrade.json) -> record: upgrade.json "done" (or "failed" with the reason)

A re-run of the same command after an interruption continues: nodes already at the target are
skipped, a node half-way through skips its recorded steps. The local record's format is in
docs/lifecycle.md (``gpustack status`` reads it).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack.cluster import etcd_snapshot
from gpustack.cluster.upgrade_record import finish_progress, new_progress, progress_path, read_progress, write_progress
from gpustack.console import literal
from gpustack.constants import GPU_NAMESPACE
from gpustack.engine.options import LateVars, RunFlags
from gpustack.engine.plan import PREFLIGHT, CommandPlan, Stage, Table
from gpustack.engine.steps import StageSummary, StepContext
from gpustack.errors import GpustackError, StageError

if TYPE_CHECKING:
    from gpustack.cluster import skew
    from gpustack.config.model import Config
    from gpustack.console import Console

STAGES: tuple[Stage, ...] = (
    PREFLIGHT,
    etcd_snapshot.STAGE,
    Stage(
        "repository",
        "Package repository",
        "ansible",
        "all",
        "before this stage: the version-skew policy (gpustack/cluster/skew.py) on the nodes' installed versions, exit 2 "
        "when refused; then every node's pkgs.k8s.io source, key (fingerprint checked) and pin moved to the target "
        "minor; installed packages stay held where they are",
    ),
    Stage(
        "control-plane",
        "Control plane upgrade",
        "ansible",
        "control-plane",
        "one node at a time: kubeadm at the target; the first control plane kubeadm upgrade plan and apply, the "
        "others kubeadm upgrade node; drain (not a single-node cluster); kubelet and kubectl; kubelet restarted; "
        "Ready at the target; uncordon; /etc/gpustack/installed.json records the target. Certificates: renewed by "
        "kubeadm upgrade, or (a node already at the target) as `gpustack certs renew` renews them, unless this upgrade "
        "already did; then the admin kubeconfig fetched again (the login user's, this machine's)",
    ),
    Stage(
        "workers",
        "Worker upgrade",
        "ansible",
        "workers",
        "one node at a time: drain (a failed drain uncordons and stops here); kubeadm; kubeadm upgrade node; "
        "kubelet and kubectl; kubelet restarted; Ready at the target (GPU nodes: the GPU Operator validator "
        "passed); uncordon; the marker records the target. Every step is recorded in /var/lib/gpustack/upgrade.json "
        "on the node: a re-run continues where it stopped",
    ),
    Stage(
        "record",
        "This machine's record of the upgrade",
        "python",
        "local",
        "<state>/clusters/<cluster>/upgrade.json: status done (written as running before the repository stage, "
        "each node's entry as it finishes, failed with the reason when a stage fails)",
    ),
)


def details(cfg: Config, to: str | None) -> list[Table]:
    """`gpustack plan upgrade --to 1.Y`: each node's turn, in order."""
    if not to:
        return []
    from gpustack.cluster import skew

    version = skew.resolve_target(to)
    order = [[str(i), s.node, s.action, s.detail] for i, s in enumerate(skew.upgrade_order(cfg, version), 1)]
    return [(f"upgrade to {version}: one node at a time", ["#", "node", "kubeadm", "steps"], order)]


PLAN = CommandPlan(
    "upgrade",
    "Kubernetes one minor (or patch) up: control plane first, then the workers one at a time; resumable",
    "upgrade.yml",
    STAGES,
    extravars=(
        "gpustack_upgrade_gpu_nodes",
        "gpustack_gpu_namespace",
        "gpustack_upgrade_progress_file",
        "gpustack_certs_renew_nodes",
        *etcd_snapshot.EXTRAVARS,
    ),
    details=details,
)


@dataclass(frozen=True)
class UpgradeOptions(RunFlags):
    to: str
    #: no etcd snapshot first (--no-snapshot: an etcd that cannot answer, or a snapshot taken by other means)
    no_snapshot: bool = False


@dataclass
class UpgradeResult:
    run_dir: Path
    summaries: list[StageSummary]
    target: str
    progress: dict[str, Any]


def gpu_nodes(facts: Mapping[str, Any]) -> list[str]:
    """Nodes with NVIDIA GPUs in their facts: their GPU Operator validator must pass again."""
    return sorted(n for n, f in facts.items() if (f or {}).get("nvidia_pci_devices"))


def upgrade_extravars(cfg: Config, facts: Mapping[str, Any]) -> dict[str, Any]:
    """What playbooks/upgrade.yml reads beyond the (target) config's variables (pure)."""
    return {
        "gpustack_upgrade_gpu_nodes": gpu_nodes(facts),
        "gpustack_gpu_namespace": GPU_NAMESPACE,
        "gpustack_upgrade_progress_file": str(progress_path(cfg)),
    }


def renew_due(cfg: Config, facts: Mapping[str, Any], progress: Mapping[str, Any]) -> list[str]:
    """The control planes whose certificates this upgrade (resumed: since its start) has not renewed (pure); the
    upgrade role renews those where kubeadm upgrade does not run."""
    from gpustack.cluster import renewal

    started = renewal.parse_time(progress.get("started")) or datetime.now(timezone.utc)
    return renewal.nodes_to_renew(cfg, facts, started)


def current_versions(cfg: Config, facts: Mapping[str, Any]) -> skew.ClusterVersions:
    """Each node's installed version from the facts; SkewError for a node gpustack did not install."""
    from gpustack.cluster import skew

    installed = skew.installed_versions(facts)
    missing = [n.name for n in cfg.nodes if n.name in facts and n.name not in installed]
    if missing:
        raise skew.SkewError(
            f"no Kubernetes installed by gpustack on {', '.join(missing)} (no /etc/gpustack/installed.json)",
            hint="`gpustack up` builds the cluster; upgrade moves a running one",
        )
    return skew.ClusterVersions(installed, tuple(n.name for n in cfg.nodes if n.role == "control-plane"))


def upgrade(cfg: Config, opts: UpgradeOptions, console: Console) -> UpgradeResult:
    """Check, then run the `upgrade` sequence at ``opts.to`` with the one engine."""
    from gpustack.cluster import skew
    from gpustack.engine.run import run

    target = skew.resolve_target(opts.to)
    problems = skew.matrix_problems(cfg, target)
    if problems:  # before any host is contacted
        raise skew.SkewError(f"upgrade to {target} refused: " + "; ".join(problems))
    moved = skew.with_version(cfg, target)
    path = progress_path(cfg)
    state: dict[str, Any] = {}
    # --no-snapshot: the stage's play targets no host (playbooks/upgrade.yml: an empty host is 'all:!all')
    late = LateVars({"gpustack_etcd_snapshot_host": ""} if opts.no_snapshot else etcd_snapshot.extravars(cfg))

    def guard(_cfg: Config, facts: Mapping[str, Any]) -> None:
        current = current_versions(cfg, facts)
        skew.check_upgrade(cfg, current, target)
        console.print(
            f"upgrade {current.apiserver} -> {target}: "
            + ", ".join(f"{n} {v}" for n, v in sorted(current.nodes.items())),
            markup=False,
        )
        progress = new_progress(cfg, current, target, read_progress(path))
        late.update({**upgrade_extravars(cfg, facts), "gpustack_certs_renew_nodes": renew_due(cfg, facts, progress)})
        if opts.dry_run:
            return
        state["progress"] = progress
        write_progress(path, state["progress"])

    def record(ctx: StepContext) -> list[StageSummary]:
        t0 = time.monotonic()
        if ctx.opts.dry_run or "progress" not in state:
            return [StageSummary("record", "not run", 0.0, note="dry run")]
        # the playbook added each finished node; keep those entries
        state["progress"] = finish_progress(read_progress(path) or state["progress"], status="done")
        write_progress(path, state["progress"])
        return [StageSummary("record", "changed", time.monotonic() - t0, 1, note=str(path))]

    run_opts = opts.run_options(PLAN.stages, extravars=late)
    try:
        result = run(PLAN, moved, run_opts, console, steps={"record": record}, after_preflight=guard)
    except GpustackError as exc:
        if "progress" in state:
            failed = finish_progress(
                read_progress(path) or state["progress"],
                status="failed",
                error=exc.message + (f" (stage {exc.stage})" if isinstance(exc, StageError) else ""),
            )
            write_progress(path, failed)
            exc.hint = resume_hint(target, exc.hint)
        exc.hint = snapshot_hint(cfg, exc.hint)
        raise
    snap = etcd_snapshot.settle(cfg)
    if snap is not None and not opts.dry_run and not opts.no_snapshot:
        console.print(f"etcd snapshot taken before the upgrade: {literal(str(snap))}")
    if not opts.dry_run:
        console.print(
            f'[ok]upgraded to {literal(target)}[/ok]: set versions.kubernetes: "{literal(skew.minor_str(target))}" in your '
            "gpustack.yaml (up refuses a config that differs from the cluster)"
        )
    return UpgradeResult(result.run_dir, result.summaries, target, state.get("progress", {}))


def snapshot_hint(cfg: Config, hint: str | None) -> str | None:
    """The hint, naming the etcd snapshot taken before this upgrade (or the newest one here)."""
    snap = etcd_snapshot.settle(cfg)
    if snap is None:
        return hint
    where = f"etcd as it was before: {snap} (docs/lifecycle.md, etcd snapshots)"
    return f"{hint}; {where}" if hint else where


def resume_hint(target: str, hint: str | None) -> str:
    """How to continue after a failure, keeping the runner's pointer to the full log (pure)."""
    log = hint.split("full log:", 1)[1].strip() if hint and "full log:" in hint else None
    resume = f"fix the cause, then run `gpustack upgrade --to {target}` again: it continues where it stopped"
    if log:
        return f"{resume}; full log: {log}"
    return f"{resume}; {hint}" if hint else resume
