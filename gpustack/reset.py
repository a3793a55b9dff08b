"""``gpustack reset``: take nodes out of Kubernetes and remove what gpustack and kubeadm put on
them (playbooks/reset.yml), then archive (or, with ``--forget``, delete) this machine's state
of the cluster.

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

from gpustack.config.model import Config, Node
from gpustack.console import Console
from gpustack.errors import UsageError
from gpustack.paths import ensure_private_dir, kubeconfig_path, new_run_dir, resource_dir, state_dir
from gpustack.render.ansible import extravars, inventory
from gpustack.runners import ansible as ar
from gpustack.up import StageSummary, ansible_settings, host_key_gate, print_summary


@dataclass(frozen=True)
class ResetOptions:
    #: node names to reset; empty: every node of the config (the whole cluster)
    nodes: Sequence[str] = ()
    purge: bool = False
    restore: bool = False
    forget: bool = False
    dry_run: bool = False
    verbosity: int = 0
    accept_new_host_keys: bool = False


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
    """Move ``<state>/clusters/<name>`` under ``<state>/archive/`` (0700), or delete it."""
    src = kubeconfig_path(cfg.cluster.name).parent
    if not src.exists():
        return None, []
    if forget:
        shutil.rmtree(src)
        return None, [src]
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    dest = ensure_private_dir(state_dir() / "archive") / f"{cfg.cluster.name}-{stamp}"
    src.rename(dest)
    dest.chmod(0o700)
    return dest, []


def reset_extravars(cfg: Config, nodes: Sequence[Node], opts: ResetOptions) -> dict[str, object]:
    """Everything playbooks/reset.yml reads (pure)."""
    ev: dict[str, object] = dict(extravars(cfg, kubeconfig_dest=kubeconfig_path(cfg.cluster.name)))
    ev.update(
        gpustack_reset_hosts=",".join(n.name for n in nodes),
        gpustack_reset_purge=opts.purge,
        gpustack_reset_restore=opts.restore,
    )
    return ev


def reset(cfg: Config, opts: ResetOptions, console: Console) -> ResetResult:
    nodes = select_nodes(cfg, opts.nodes)
    run_dir = new_run_dir()
    console.print(f"run directory: {run_dir}")
    host_key_gate(cfg, nodes, opts.accept_new_host_keys, console)
    ev = reset_extravars(cfg, nodes, opts)
    kwargs = ar.build_runner_kwargs(
        private_data_dir=run_dir / "ansible",
        project_dir=resource_dir("playbooks"),
        playbook="reset.yml",
        inventory=inventory(cfg),
        extravars=ev,
        tags=(),
        settings=ansible_settings(cfg, opts.verbosity, check=opts.dry_run),
        ident="reset",
    )
    t0 = time.monotonic()
    result = ar.run_playbook(kwargs, ar.StageTracker())
    st = result.stages.get("reset")
    summaries = [
        StageSummary(
            "reset",
            st.status if st else "not run",
            st.elapsed if st else time.monotonic() - t0,
            st.changed_total if st else 0,
            sorted(st.hosts) if st else [],
        )
    ]
    if result.failures or result.rc != 0:
        print_summary(summaries, console, dry_run=opts.dry_run)
        result.raise_for_failures()
    archive: Path | None = None
    removed: list[Path] = []
    if whole_cluster(cfg, nodes) and not opts.dry_run:
        archive, removed = archive_state(cfg, forget=opts.forget)
        if archive:
            console.print(f"this machine's state of the cluster is archived in {archive}")
        for path in removed:
            console.print(f"deleted {path}")
    print_summary(summaries, console, dry_run=opts.dry_run)
    return ResetResult(run_dir, summaries, archive, removed)
