"""``gpustack reset``: take nodes out of Kubernetes and remove what gpustack and kubeadm put on
them (playbooks/reset.yml), then archive (or, with ``--forget``, delete) this machine's state
of the cluster: the `reset` sequence run by the engine.

What is removed is described by :func:`describe` (pure), shown before anything runs, and done by
the ``reset`` role; see docs/lifecycle.md.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from gpustack.cluster import etcd_snapshot
from gpustack.engine.options import RunFlags
from gpustack.engine.plan import CommandPlan, Stage
from gpustack.engine.steps import StageSummary, StepContext
from gpustack.errors import UsageError
from gpustack.paths import ensure_private_dir, kubeconfig_path, state_dir

if TYPE_CHECKING:
    from gpustack.config.model import Config, Node
    from gpustack.console import Console

STAGES: tuple[Stage, ...] = (
    etcd_snapshot.STAGE,
    Stage(
        "reset",
        "Reset nodes",
        "ansible",
        "targets",
        "kubeadm reset -f; kubelet stopped and disabled; /etc/kubernetes, /var/lib/kubelet, /var/lib/etcd, CNI "
        "config, cni0/flannel.1, /etc/gpustack and the stage stamps removed; gpustack's firewall chain, jump and "
        "unit removed, and only the iptables chains named KUBE-*, FLANNEL*, CNI-* (no table flushed, no policy "
        "changed); kubelet/kubeadm/kubectl unheld (--purge: removed with gpustack's apt source, sysctl, modules "
        "and Helm); --restore: /etc/fstab and containerd's config from up's backups",
    ),
    Stage(
        "local-state",
        "This machine's state of the cluster",
        "python",
        "local",
        "whole-cluster reset only: the admin kubeconfig and Grafana password moved to "
        "<state>/archive/<cluster>-<time> (0700), or deleted with --forget",
    ),
)


PLAN = CommandPlan(
    "reset",
    "tear the cluster (or some nodes) down, leaving each host's own firewall and SSH as they were",
    "reset.yml",
    STAGES,
    extravars=("gpustack_reset_purge", "gpustack_reset_restore", *etcd_snapshot.EXTRAVARS),
    host_notes={
        "targets": "the nodes named on the command line (default: every node)",
        "control-plane": "the first control-plane node being reset (none reset: not run)",
    },
)


@dataclass(frozen=True)
class ResetOptions(RunFlags):
    #: node names to reset; empty: every node of the config (the whole cluster)
    nodes: Sequence[str] = ()
    purge: bool = False
    restore: bool = False
    forget: bool = False
    #: no etcd snapshot first (--no-snapshot: an etcd that cannot answer any more)
    no_snapshot: bool = False


@dataclass
class ResetResult:
    run_dir: Path
    summaries: list[StageSummary]
    #: where this machine's state of the cluster went (None: kept, or deleted with --forget)
    archive: Path | None = None
    removed_state: list[Path] = field(default_factory=list)


def select_nodes(cfg: Config, names: Sequence[str]) -> list[Node]:
    """The nodes to reset; an unknown name is a usage error naming the known ones."""
    if not names:
        return list(cfg.nodes)
    by_name = {n.name: n for n in cfg.nodes}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise UsageError(f"no node named {', '.join(unknown)} in the config", hint=f"nodes: {', '.join(by_name)}")
    return [by_name[n] for n in dict.fromkeys(names)]


def whole_cluster(cfg: Config, nodes: Sequence[Node]) -> bool:
    return {n.name for n in nodes} == {n.name for n in cfg.nodes}


def describe(cfg: Config, nodes: Sequence[Node], opts: ResetOptions) -> list[str]:
    """What a reset will do, one line per item, in the order it happens (shown before asking)."""
    lines = [
        f"hosts: {', '.join(f'{n.name} ({n.address}, {n.role})' for n in nodes)}",
        *snapshot_lines(cfg, nodes, opts),
        "kubeadm reset --force (static pods, containers, certificates); the kubelet stopped and disabled",
        "removed: /etc/kubernetes, /var/lib/kubelet, /var/lib/etcd, /etc/cni/net.d, /run/flannel, "
        "/etc/gpustack, /var/lib/gpustack; the links cni0 and flannel.1",
        "firewall: the GPUSTACK-INPUT chain, its jump from INPUT and its unit; the chains Kubernetes made "
        "(KUBE-*, FLANNEL*, CNI-*) and the jumps into them. No table is flushed, no policy changed, SSH untouched",
    ]
    if opts.purge:
        lines.append(
            "--purge: kubelet, kubeadm and kubectl removed with their apt source, key and pin; the sysctl, "
            "kernel-module and apt-proxy files gpustack wrote; /usr/local/bin/helm"
        )
    else:
        lines.append("packages kubelet, kubeadm, kubectl stay installed, no longer held (--purge removes them)")
    if opts.restore:
        lines.append(
            "--restore: /etc/fstab and /etc/containerd/config.toml put back from the backups up kept "
            "(restored swap entries take effect at the next boot, or with swapon --all)"
        )
    if whole_cluster(cfg, nodes):
        where = state_dir() / "clusters" / cfg.cluster.name
        if opts.forget:
            lines.append(f"this machine: {where} deleted (admin kubeconfig, Grafana password) (--forget)")
        else:
            lines.append(f"this machine: {where} archived under {state_dir() / 'archive'}")
    elif any(n.role == "control-plane" for n in nodes):
        lines.append("the control plane is reset while other nodes stay: they lose their cluster")
    return lines


def archive_state(cfg: Config, *, forget: bool, now: datetime | None = None) -> tuple[Path | None, list[Path]]:
    """Move ``<state>/clusters/<name>`` under ``<state>/archive/`` (0700), or delete it. An empty
    one (the engine makes the directory before a playbook runs, so a reset after a reset finds it
    so) is removed and not archived: nothing was there, nothing changed."""
    src = kubeconfig_path(cfg.cluster.name).parent
    if not src.exists():
        return None, []
    if src.is_dir() and not any(src.iterdir()):
        src.rmdir()
        return None, []
    if forget:
        shutil.rmtree(src)
        return None, [src]
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    dest = ensure_private_dir(state_dir() / "archive") / f"{cfg.cluster.name}-{stamp}"
    src.rename(dest)
    dest.chmod(0o700)
    return dest, []


def snapshots_first(nodes: Sequence[Node], opts: ResetOptions) -> bool:
    """An etcd snapshot before the reset: when a control plane goes, unless --no-snapshot (pure)."""
    return not opts.no_snapshot and any(n.role == "control-plane" for n in nodes)


def snapshot_lines(cfg: Config, nodes: Sequence[Node], opts: ResetOptions) -> list[str]:
    if not snapshots_first(nodes, opts):
        why = "--no-snapshot" if opts.no_snapshot else "no control plane is reset"
        return [f"no etcd snapshot first ({why})"]
    host = next(n.name for n in nodes if n.role == "control-plane")
    return [f"first an etcd snapshot on {host}, copied to {etcd_snapshot.local_dir(cfg)} (a failed snapshot stops the "
            "reset before anything changes; --no-snapshot skips it)"]  # fmt: skip


def reset_extravars(opts: ResetOptions) -> dict[str, object]:
    """What playbooks/reset.yml reads beyond the config's variables (pure)."""
    return {"gpustack_reset_purge": opts.purge, "gpustack_reset_restore": opts.restore}


def snapshot_extravars(cfg: Config, nodes: Sequence[Node]) -> dict[str, object]:
    """The snapshot stage's variables: on the first control plane being reset (a host of the run's limit, so no
    host outside the reset is contacted)."""
    ev = etcd_snapshot.extravars(cfg)
    ev["gpustack_etcd_snapshot_host"] = next((n.name for n in nodes if n.role == "control-plane"), "")
    return ev


def reset(cfg: Config, opts: ResetOptions, console: Console) -> ResetResult:
    """Run the `reset` sequence on the chosen nodes with the one engine."""
    from gpustack.engine.run import run

    nodes = select_nodes(cfg, opts.nodes)
    moved: dict[str, object] = {}

    def local_state(ctx: StepContext) -> list[StageSummary]:
        t0 = time.monotonic()
        snap = etcd_snapshot.settle(cfg) if snapshots_first(nodes, opts) and not ctx.opts.dry_run else None
        if snap is not None:  # named before the state directory (with the snapshot in it) is archived or deleted
            console.print(f"etcd snapshot taken before the reset: {snap}", markup=False)
        if ctx.opts.dry_run or not whole_cluster(cfg, nodes):
            why = "dry run" if ctx.opts.dry_run else "some nodes stay: the cluster's state is kept"
            return [StageSummary("local-state", "not run", 0.0, note=why)]
        archive, removed = archive_state(cfg, forget=opts.forget)
        moved.update(archive=archive, removed=removed)
        if archive:
            console.print(f"this machine's state of the cluster is archived in {archive}", markup=False)
        for path in removed:
            console.print(f"deleted {path}", markup=False)
        changed = archive is not None or bool(removed)
        return [StageSummary("local-state", "changed" if changed else "ok", time.monotonic() - t0, int(changed))]

    first = snapshots_first(nodes, opts)
    run_opts = opts.run_options(
        PLAN.select(skip=[] if first else [etcd_snapshot.STAGE_ID]),
        limit=[n.name for n in nodes] if not whole_cluster(cfg, nodes) else (),
        extravars={**reset_extravars(opts), **(snapshot_extravars(cfg, nodes) if first else {})},
    )
    result = run(PLAN, cfg, run_opts, console, steps={"local-state": local_state})
    archive = moved.get("archive")
    removed = moved.get("removed") or []
    return ResetResult(
        result.run_dir,
        result.summaries,
        archive if isinstance(archive, Path) else None,
        [p for p in removed if isinstance(p, Path)] if isinstance(removed, list) else [],
    )
