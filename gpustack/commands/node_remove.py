"""``gpustack node remove NAME...``: take nodes out of a running cluster, the `node-remove` sequence
run by the one engine.

    assess (read-only, through the Kubernetes API): refusals -- an unknown node, every node, the last
      control plane, more than one control plane at a time, etcd quorum -- and a server-side dry-run
      eviction of every pod on each node: a PodDisruptionBudget that blocks stops the run here
    -> drain: cordon, evict (the Eviction API; PodDisruptionBudgets respected), wait; a failed drain
       uncordons the node
    -> reset: the host, with the reset role (skipped with --offline: a dead host is not contacted)
    -> etcd-member: a control plane's etcd member removed if still listed (on a remaining control plane)
    -> firewall: the remaining nodes' GPUSTACK-INPUT chain (firewalld's gpustack zone) no longer
       accepts the removed addresses (also with --offline; not with firewall.enabled: false)
    -> delete: the Node object

The drain runs from this machine through gpustack.runners.kube (see docs/decisions.md, "node
remove drains through the API"); the host work is playbooks/node-remove.yml. Every refusal and
quorum rule is a pure function of the nodes the API lists.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack.cluster import etcd_snapshot
from gpustack.console import literal
from gpustack.constants import CONTROL_PLANE_LABEL
from gpustack.engine.options import RunFlags
from gpustack.engine.plan import CommandPlan, Stage
from gpustack.engine.steps import StageSummary, StepContext
from gpustack.errors import ConfigError, GpustackError, UsageError

if TYPE_CHECKING:
    from gpustack.cluster import drain
    from gpustack.config.model import Config, Node
    from gpustack.console import Console
    from gpustack.runners.kube import Kube, Obj

STAGES: tuple[Stage, ...] = (
    Stage(
        "check",
        "Removal check and drain preview",
        "python",
        "local",
        "nothing: reads the nodes through the Kubernetes API; refuses the last control-plane node, more than one "
        "control-plane node at a time, or a removal that leaves etcd without quorum; a server-side dry-run "
        "eviction of every pod on the node lists those a PodDisruptionBudget blocks, and the run stops there",
    ),
    Stage(
        etcd_snapshot.STAGE_ID,
        etcd_snapshot.STAGE.title,
        "ansible",
        "control-plane",
        "control-plane removals only (a worker's removal leaves etcd's members alone), on a control plane that "
        "stays: etcd's own member health first (etcdctl member list, endpoint health --cluster): refused, nothing "
        "changed, unless a majority of the members stays healthy after the removal; then "
        + etcd_snapshot.STAGE.changes.split(": ", 1)[1],
    ),
    Stage(
        "drain",
        "Cordon and drain",
        "python",
        "targets",
        "the node cordoned; each pod evicted through the Eviction API (PodDisruptionBudgets respected, "
        "DaemonSet and static pods left), until gone or the timeout; a failed drain uncordons the node",
    ),
    Stage(
        "reset",
        "Reset the host",
        "ansible",
        "targets",
        "as `gpustack reset --node`: kubeadm reset (a control plane's own etcd member removed), kubelet off, "
        "Kubernetes' files, links and chains, gpustack's firewall chain (skipped with --offline)",
    ),
    Stage(
        "etcd-member",
        "etcd member",
        "ansible",
        "control-plane",
        "control-plane nodes only, on a remaining control plane: the etcd member of the removed node removed "
        "if it is still listed (--offline, or a reset that could not do it)",
    ),
    Stage(
        "firewall",
        "The remaining nodes' firewall",
        "ansible",
        "all",
        "gpustack's firewall on every remaining node rewritten by the firewall role without the removed nodes' "
        "addresses (the GPUSTACK-INPUT peer rules, firewalld's gpustack zone sources and etcd rules), also with "
        "--offline; its stamp is the one `up` records for the config without them (not run with "
        "firewall.enabled: false)",
    ),
    Stage(
        "delete",
        "Delete the Node object",
        "python",
        "local",
        "the Node object deleted (after its kubelet stopped, so it cannot register again)",
    ),
)


PLAN = CommandPlan(
    "node-remove",
    "gpustack node remove NAME...: drain (PodDisruptionBudgets checked first), reset the host, delete the node",
    "node-remove.yml",
    STAGES,
    extravars=(
        "gpustack_node_remove_nodes",
        "gpustack_node_remove_etcd_host",
        "gpustack_node_remove_members",
        "gpustack_node_remove_remaining",
        "gpustack_node_remove_firewall_digests",
        "gpustack_reset_purge",
        "gpustack_reset_restore",
        *etcd_snapshot.EXTRAVARS,
    ),
    host_notes={
        "control-plane": "a remaining control-plane node (control-plane removals only)",
        "all": "every node that remains",
    },
)

#: seconds a drain may take (``--timeout``), as the upgrade's drain
DRAIN_TIMEOUT = 300.0


class RemovalRefused(ConfigError):
    """A removal gpustack will not do (last control plane, etcd quorum, ...); nothing touched, exit 2."""


@dataclass(frozen=True)
class RemoveOptions(RunFlags):
    nodes: tuple[str, ...]
    offline: bool = False
    timeout: float = DRAIN_TIMEOUT


@dataclass(frozen=True)
class ClusterNode:
    """A Node object as the removal rules see it."""

    name: str
    control_plane: bool
    ready: bool
    schedulable: bool  # not cordoned and no NoSchedule/NoExecute taint
    kubelet: str = ""


def cluster_node(obj: Obj) -> ClusterNode:
    """A Node object -> :class:`ClusterNode` (pure)."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    tainted = any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or [])
    return ClusterNode(
        name=str(meta.get("name") or ""),
        control_plane=CONTROL_PLANE_LABEL in (meta.get("labels") or {}),
        ready=ready,
        schedulable=ready and not spec.get("unschedulable") and not tainted,
        kubelet=str((status.get("nodeInfo") or {}).get("kubeletVersion") or ""),
    )


def majority(members: int) -> int:
    return members // 2 + 1


def restore_advice(snapshot: str = "") -> str:
    """What to do when etcd has lost quorum, naming the newest snapshot on this machine (pure)."""
    if snapshot:
        return (
            f"or restore etcd from the newest snapshot on this machine, {snapshot} (docs/lifecycle.md, etcd snapshots)"
        )
    return (
        "no etcd snapshot is on this machine; each control plane keeps the scheduled ones in "
        f"{etcd_snapshot.HOST_DIR} (docs/lifecycle.md, etcd snapshots)"
    )


def removal_problems(nodes: Mapping[str, ClusterNode], removing: Sequence[str], snapshot: str = "") -> list[str]:
    """Why removing ``removing`` from a cluster of ``nodes`` is refused (pure; empty: allowed).

    kubeadm's stacked etcd has one member per control-plane node; a Ready node stands for a healthy
    member. ``etcdctl member remove`` needs a majority of the members now, and the cluster needs a
    majority of the members that remain afterwards."""
    cps = [n for n in nodes.values() if n.control_plane]
    going = [nodes[r] for r in removing if r in nodes and nodes[r].control_plane]
    if len(going) > 1:
        return [
            f"{', '.join(n.name for n in going)} are control-plane nodes: remove them one at a time "
            "(etcd removes one member at a time; run `gpustack node remove` once per node)"
        ]
    if not going:
        return []
    target = going[0]
    members, healthy = len(cps), sum(n.ready for n in cps)
    after, healthy_after = members - 1, healthy - int(target.ready)
    if after == 0:
        return [f"{target.name} is the cluster's last control-plane node: `gpustack reset` takes the cluster down"]
    if healthy < majority(members):
        return [
            f"etcd has no quorum: only {healthy} of {members} control-plane nodes are Ready, so no etcd member "
            f"can be removed; bring the others back first, {restore_advice(snapshot)}"
        ]
    if healthy_after < majority(after):
        down = [n.name for n in cps if not n.ready and n.name != target.name]
        return [
            f"removing {target.name} would leave {healthy_after} Ready of {after} control-plane nodes, less than the "
            f"majority etcd needs: remove the NotReady control plane(s) {', '.join(down)} first (--offline) "
            "or bring them back"
        ]
    return []


def removal_warnings(nodes: Mapping[str, ClusterNode], removing: Sequence[str]) -> list[str]:
    """What a user should know before an allowed removal (pure)."""
    out: list[str] = []
    left = [n for n in nodes.values() if n.name not in removing]
    cps_left = [n for n in left if n.control_plane]
    if any(nodes[r].control_plane for r in removing if r in nodes) and len(cps_left) % 2 == 0:
        out.append(
            f"{len(cps_left)} control-plane nodes remain: etcd then tolerates no more failures than with "
            f"{len(cps_left) - 1}; add one back (`gpustack node add`)"
        )
    if not any(n.schedulable for n in left):
        out.append(
            "no remaining node accepts workloads (cordoned or tainted): evicted pods will stay Pending "
            "(a cluster left with its control plane alone: `gpustack up` with that node alone in the config "
            "removes its control-plane taint)"
        )
    return out


def select_nodes(cfg: Config, names: Sequence[str]) -> list[Node]:
    """The config's nodes named ``names``; UsageError for an unknown one, RemovalRefused for all of them."""
    if not names:
        raise UsageError("name the node(s) to remove: gpustack node remove NAME...")
    by_name = {n.name: n for n in cfg.nodes}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise UsageError(f"no node named {', '.join(unknown)} in the config", hint=f"nodes: {', '.join(by_name)}")
    chosen = [by_name[n] for n in dict.fromkeys(names)]
    if len(chosen) == len(cfg.nodes):
        raise RemovalRefused("that is every node of the cluster: `gpustack reset` takes a cluster down")
    return chosen


def etcd_host(cfg: Config, nodes: Mapping[str, ClusterNode], removing: Sequence[str]) -> Node | None:
    """A remaining control plane to clean etcd from: the first of the config that is Ready (pure)."""
    for n in cfg.control_planes:
        if n.name not in removing and (n.name not in nodes or nodes[n.name].ready):
            return n
    return None


@dataclass
class Assessment:
    """What a removal will do, read from the cluster before anything changes."""

    targets: list[Node]
    nodes: dict[str, ClusterNode]
    previews: list[drain.Preview] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    etcd_host: Node | None = None
    #: the config's nodes that stay
    remaining: list[Node] = field(default_factory=list)
    #: gpustack manages the nodes' firewall (firewall.enabled): the remaining ones forget the removed addresses
    firewall: bool = True
    #: the control plane that takes the etcd snapshot first (one that stays)
    snapshot_host: str = ""

    @property
    def control_planes(self) -> list[Node]:
        """The targets that are control-plane nodes (by the config, or by the API's role label)."""
        return [
            n
            for n in self.targets
            if n.role == "control-plane" or (n.name in self.nodes and self.nodes[n.name].control_plane)
        ]

    @property
    def blocked(self) -> list[str]:
        return [f"{p.node}: {line}" for p in self.previews for line in p.problems()]


def assess(cfg: Config, kube: Kube, opts: RemoveOptions) -> Assessment:
    """Read the cluster and check the removal; RemovalRefused when a rule forbids it. A
    PodDisruptionBudget that blocks is not raised here: :attr:`Assessment.blocked` lists it."""
    from gpustack.cluster import drain

    targets = select_nodes(cfg, opts.nodes)
    nodes = {cn.name: cn for cn in (cluster_node(o) for o in kube.list_objects("v1", "Node"))}
    names = [n.name for n in targets]
    newest = etcd_snapshot.latest(cfg)
    problems = removal_problems(nodes, names, str(newest) if newest else "")
    if problems:
        raise RemovalRefused("; ".join(problems), hint="nothing was changed")
    a = Assessment(
        targets,
        nodes,
        warnings=removal_warnings(nodes, names),
        remaining=[n for n in cfg.nodes if n.name not in names],
        firewall=cfg.firewall.enabled,
        snapshot_host=etcd_snapshot.snapshot_host(cfg, names),
    )
    if a.control_planes:
        a.etcd_host = etcd_host(cfg, nodes, names)
        if a.etcd_host is None:
            raise RemovalRefused("no Ready control-plane node would remain to remove the etcd member from")
    a.previews = [drain.preview(kube, n.name) for n in targets if n.name in nodes]
    return a


def describe(a: Assessment, opts: RemoveOptions) -> list[str]:
    """What the removal will do, in order, one line each (shown before asking; pure)."""
    lines = []
    for n in a.targets:
        cn = a.nodes.get(n.name)
        state = (
            f"{'Ready' if cn.ready else 'NotReady'}, kubelet {cn.kubelet or '?'}" if cn else "not a node of the cluster"
        )
        lines.append(f"node {n.name} ({n.address}, {n.role}): {state}")
    for p in a.previews:
        stays = f"; {len(p.pods.skipped)} DaemonSet/static pod(s) stay" if p.pods.skipped else ""
        lost = [q.ref for q in p.pods.evict if q.note]
        lines.append(
            f"check {p.node}: {len(p.pods.evict)} pod(s) to evict{stays}"
            + (f"; emptyDir data lost: {', '.join(lost)}" if lost else "")
            + ("; no PodDisruptionBudget blocks (server-side dry run)" if p.ok else "")
        )
    names = ", ".join(n.name for n in a.targets)
    if a.control_planes:
        lines.append(
            f"etcd snapshot on {a.snapshot_host}, copied to this machine: first etcd's own member health must leave "
            "a majority after the removal"
        )
    lines.append(
        f"drain {names}: cordon, evict (PodDisruptionBudgets respected, timeout {opts.timeout:.0f}s); "
        "a failed drain uncordons the node"
        + ("; --offline: the pods are not waited for (nobody is left to stop them)" if opts.offline else "")
    )
    if opts.offline:
        lines.append(f"reset: skipped (--offline): {names} not contacted")
    else:
        lines.append(f"reset {names}: as `gpustack reset --node` (kubeadm reset, kubelet off, files, links, chains)")
    for n in a.control_planes:
        host = a.etcd_host.name if a.etcd_host else "?"
        lines.append(f"etcd: the member of {n.name} removed (kubeadm reset does it when it can; checked on {host})")
    if a.firewall:
        lines.append(
            f"firewall of {', '.join(n.name for n in a.remaining)}: gpustack's chain no longer accepts "
            + ", ".join(n.address for n in a.targets)
        )
    lines.append(f"delete the Node object(s) {names}")
    return lines


@dataclass
class RemoveResult:
    run_dir: Path
    summaries: list[StageSummary]
    removed: list[str]


def remove_extravars(a: Assessment) -> dict[str, Any]:
    """What playbooks/node-remove.yml reads beyond the config's variables (pure)."""
    return {
        "gpustack_node_remove_nodes": [n.name for n in a.targets],
        "gpustack_node_remove_etcd_host": a.etcd_host.name if a.etcd_host else "",
        "gpustack_node_remove_members": [{"name": n.name, "address": n.address} for n in a.control_planes],
        "gpustack_node_remove_remaining": [n.name for n in a.remaining] if a.firewall else [],
        "gpustack_reset_purge": False,
        "gpustack_reset_restore": False,
    }


def without(cfg: Config, names: Sequence[str]) -> Config:
    """The config without the nodes ``names`` (pure): what gpustack.yaml says once they are taken out."""
    return cfg.model_copy(update={"nodes": [n for n in cfg.nodes if n.name not in names]})


def firewall_extravars(cfg: Config, names: Sequence[str]) -> dict[str, Any]:
    """The firewall stage's variables: the node-list variables as the config without the removed
    nodes has them (the firewall role reads them under their own names), and each remaining host's
    firewall stage digest for that config, as the engine computes it for `up`
    (gpustack/render/converge.py): the `up` after gpustack.yaml lost the nodes finds the stage
    converged, an `up` with them still listed visits it again (and accepts them again)."""
    from gpustack.engine.stages import stage_inventory
    from gpustack.paths import kubeconfig_path
    from gpustack.render.ansible import extravars

    pruned = without(cfg, names)
    ev = extravars(pruned, kubeconfig_dest=kubeconfig_path(cfg.cluster.name))
    inv = stage_inventory(pruned, ev)
    return {
        "gpustack_node_addresses": ev["gpustack_node_addresses"],
        "gpustack_control_plane_addresses": ev["gpustack_control_plane_addresses"],
        "gpustack_node_remove_firewall_digests": {
            name: hv["gpustack_stage_digests"]["firewall"]
            for group in inv["all"]["children"].values()
            for name, hv in (group.get("hosts") or {}).items()
        },
    }


def stages(a: Assessment, opts: RemoveOptions) -> list[Stage]:
    """The stages this removal runs: no reset with --offline, no etcd stage without a control plane,
    no firewall stage when gpustack does not manage the firewall."""
    skip = (
        (["reset"] if opts.offline else [])
        + ([] if a.control_planes else ["etcd-member", etcd_snapshot.STAGE_ID])
        + ([] if a.firewall else ["firewall"])
    )
    return PLAN.select(skip=skip)


def host_limit(a: Assessment, opts: RemoveOptions) -> list[str]:
    """The hosts the playbook may contact: the removed ones (not with --offline), the etcd host and,
    for their firewall, the remaining ones."""
    hosts = [] if opts.offline else [n.name for n in a.targets]
    if a.control_planes and a.etcd_host is not None:
        hosts.append(a.etcd_host.name)
    if a.control_planes and a.snapshot_host and a.snapshot_host not in hosts:
        hosts.append(a.snapshot_host)
    if a.firewall:
        hosts += [n.name for n in a.remaining if n.name not in hosts]
    return hosts


def remove(cfg: Config, opts: RemoveOptions, console: Console, kube: Kube) -> RemoveResult:
    """Run the `node-remove` sequence with the one engine (after :func:`assess` and the question)."""
    from gpustack.cluster import drain
    from gpustack.engine.run import run

    a = assess(cfg, kube, opts)
    names = [n.name for n in a.targets]

    def check(ctx: StepContext) -> list[StageSummary]:
        t0 = time.monotonic()
        again = assess(cfg, kube, opts)  # the cluster may have moved since the question
        if again.blocked:
            raise drain.DrainError(
                "a PodDisruptionBudget blocks the drain: " + "; ".join(again.blocked),
                hint="nothing was changed (no node cordoned); relax the budget or scale the workload, then run again",
            )
        return [StageSummary("check", "ok", time.monotonic() - t0, hosts=names)]

    def drain_step(ctx: StepContext) -> list[StageSummary]:
        t0 = time.monotonic()
        evicted = 0
        for name in names:
            console.print(f"[stage]▶ drain[/stage] {literal(name)}")
            result = drain.drain(
                kube,
                name,
                timeout=opts.timeout,
                wait_gone=not opts.offline,
                progress=lambda line: console.print(f"  {line}", markup=False),
            )
            evicted += len(result.evicted) + int(result.cordoned)
        return [StageSummary("drain", "changed" if evicted else "ok", time.monotonic() - t0, evicted, names)]

    def delete(ctx: StepContext) -> list[StageSummary]:
        t0 = time.monotonic()
        deleted = [n for n in names if kube.delete("v1", "Node", n)]
        return [StageSummary("delete", "changed" if deleted else "ok", time.monotonic() - t0, len(deleted), names)]

    before = set(etcd_snapshot.local_snapshots(cfg))
    extra = remove_extravars(a)
    if a.control_planes:
        extra.update(etcd_snapshot.extravars(cfg, names))
    if a.firewall:
        extra.update(firewall_extravars(cfg, names))
    run_opts = opts.run_options(stages(a, opts), limit=host_limit(a, opts), extravars=extra)
    try:
        result = run(PLAN, cfg, run_opts, console, steps={"check": check, "drain": drain_step, "delete": delete})
    except GpustackError as exc:
        snap = etcd_snapshot.settle(cfg)
        if snap is not None and snap not in before:
            exc.hint = (
                f"{exc.hint}; etcd before this removal: {snap}" if exc.hint else f"etcd before this removal: {snap}"
            )
        raise
    snap = etcd_snapshot.settle(cfg)
    if snap is not None and snap not in before:
        console.print(f"etcd snapshot taken before the removal: {literal(str(snap))}")
    return RemoveResult(result.run_dir, result.summaries, names)
