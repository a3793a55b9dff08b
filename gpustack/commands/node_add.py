"""``gpustack node add NAME...``: join nodes of the config to the running cluster, the `node-add`
sequence run by the one engine.

    preflight (every node, read-only: the new ones get every check; the existing ones tell the
      cluster's version and their stage stamps)
    -> the cluster guard: a running control plane among the existing nodes, every existing node at
       the config's Kubernetes version (else exit 2, nothing changed)
    -> up's host stages limited to the new nodes (playbooks/node-add.yml imports site.yml), except
       the firewall, which also visits the existing nodes: their GPUSTACK-INPUT chain accepts the
       new addresses, and nothing else changes there
    -> ready: each new node Ready (and the GPU Operator validator on GPU nodes)
    -> kubelet-certs: the new kubelets' serving CSRs approved (gpustack/cluster/kubelet_csr.py)
    -> gpu-sharing: the new nodes' ``gpu_sharing`` (``gpu_sharing.default`` included, on nodes with GPUs)
       through the admin kubeconfig, as `up`'s cluster stage sets it (gpustack/cluster/sharing.py)

Joins take a fresh bootstrap token (and a control-plane node a freshly uploaded certificate key),
made on the first control plane for this run only. `up` with new nodes in the config does the same
for them: the digests of the stages that do not read the node list do not change (see
gpustack/render/converge.py, NODE_SET_VARS), so the existing hosts stay converged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack.bundle import PLAYBOOK_VARS as BUNDLE_VARS
from gpustack.constants import GPU_NAMESPACE
from gpustack.engine.options import LateVars, RunFlags
from gpustack.engine.plan import CommandPlan, Stage
from gpustack.engine.steps import StageSummary, StepContext, StepFn
from gpustack.errors import ConfigError, StageError, UsageError

if TYPE_CHECKING:
    from gpustack.config.model import Config, Node
    from gpustack.console import Console

STAGES: tuple[Stage, ...] = (
    Stage(
        "preflight",
        "Preflight checks",
        "preflight",
        "all",
        "nothing: the new nodes get every preflight check; the existing nodes are only read (their gpustack "
        "marker: the cluster's version, which the new nodes must match; their stage stamps)",
    ),
    Stage("os", "OS preparation", "ansible", "targets", "as `up` does, on the new nodes only"),
    Stage(
        "firewall",
        "Firewall",
        "ansible",
        "all",
        "new nodes: gpustack's firewall as `up` makes it; existing nodes: only the GPUSTACK-INPUT chain's rules "
        "for cluster peers gain the new addresses (script rewritten, chain reloaded atomically; nothing else "
        "changes there, and with firewall.enabled: false nothing at all)",
    ),
    Stage("containerd", "containerd", "ansible", "targets", "as `up` does, on the new nodes only"),
    Stage("kubernetes", "Kubernetes packages", "ansible", "targets", "as `up` does, on the new nodes only"),
    Stage(
        "control-plane",
        "Control-plane join",
        "ansible",
        "targets",
        "new control-plane nodes, one at a time: the certificates uploaded again on the first control plane "
        "(a fresh certificate key) and kubeadm join --control-plane with a fresh token (HA clusters only)",
    ),
    Stage("workers", "Worker join", "ansible", "targets", "new workers: kubeadm join with a fresh token"),
    Stage(
        "network", "Flannel", "ansible", "targets", "new control-plane nodes: gpustack's Flannel manifest (unchanged)"
    ),
    Stage("helm", "Helm", "ansible", "targets", "new control-plane nodes: the pinned Helm binary"),
    Stage(
        "ready",
        "New nodes Ready",
        "ansible",
        "targets",
        "nothing: waits (kubectl on the first control plane) until each new node is Ready and, on GPU nodes, "
        "the GPU Operator validator passed",
    ),
    Stage(
        "kubelet-certs",
        "Kubelet serving certificates",
        "python",
        "control-plane",
        "the new kubelets' pending serving CSRs approved when the requester, subject and addresses are the node's own "
        "(as `up` does)",
    ),
    Stage(
        "gpu-sharing",
        "GPU sharing of the new nodes",
        "python",
        "local",
        "the new nodes' gpu_sharing (their own, their group's, or gpu_sharing.default where the node has NVIDIA "
        "GPUs) set through the GPU Operator's node labels as `up` does (a MIG change waits for the MIG manager); "
        "nothing when none applies",
    ),
)


PLAN = CommandPlan(
    "node-add",
    "gpustack node add NAME...: join new nodes from the config; existing hosts change only their firewall peers",
    "node-add.yml",  # imports site.yml (the same stage plays and stamps) and adds the ready play
    STAGES,
    converges=True,
    extravars=("gpustack_node_add_nodes", "gpustack_node_add_gpu_nodes", "gpustack_gpu_namespace", *BUNDLE_VARS),
)

#: the stages of `node-add` whose plays visit only the new nodes (the firewall visits every node)
NEW_NODES_ONLY = ("os", "containerd", "kubernetes", "control-plane", "workers", "network", "helm")


class AddRefused(ConfigError):
    """A node add gpustack will not do (no running cluster, versions differ); nothing changed, exit 2."""


@dataclass(frozen=True)
class AddOptions(RunFlags):
    nodes: tuple[str, ...]
    #: an air-gapped bundle to install the new nodes from (as `up --bundle`), and where to serve it
    bundle: Path | None = None
    bundle_listen: str | None = None
    #: the kubelet-certs stage approves the new kubelets' serving CSRs (``--no-approve``: left to `certs approve`)
    approve: bool = True


@dataclass
class AddResult:
    run_dir: Path
    summaries: list[StageSummary]
    added: list[str]


def select_new(cfg: Config, names: Sequence[str]) -> list[Node]:
    """The config's nodes named ``names`` (UsageError for an unknown one; every node: no cluster to join)."""
    if not names:
        raise UsageError("name the node(s) to add: add them to gpustack.yaml, then gpustack node add NAME...")
    by_name = {n.name: n for n in cfg.nodes}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise UsageError(
            f"no node named {', '.join(unknown)} in the config",
            hint=f"add it under nodes: in gpustack.yaml first (nodes now: {', '.join(by_name)})",
        )
    chosen = [by_name[n] for n in dict.fromkeys(names)]
    if len(chosen) == len(cfg.nodes):
        raise AddRefused(
            "every node of the config is named: there is no cluster to add them to (`gpustack up` builds it)"
        )
    return chosen


def stage_nodes(names: Sequence[str]) -> dict[str, list[str]]:
    """The engine's per-stage host restriction: the new nodes only, except the firewall (pure)."""
    return {stage: list(names) for stage in NEW_NODES_ONLY}


def check_cluster(cfg: Config, facts: Mapping[str, Any], names: Sequence[str]) -> None:
    """After the preflight, before anything changes: the existing nodes run gpustack's cluster at
    the config's version (AddRefused / SkewError otherwise, exit 2)."""
    from gpustack.cluster import skew

    existing = [n for n in cfg.nodes if n.name not in names]
    running = [
        n.name
        for n in existing
        if n.role == "control-plane" and ((facts.get(n.name) or {}).get("kubernetes") or {}).get("admin_conf")
    ]
    if not running:
        raise AddRefused(
            "no running control plane among the existing nodes "
            f"({', '.join(n.name for n in existing if n.role == 'control-plane') or 'none in the config'})",
            hint="`gpustack up` builds the cluster; node add joins nodes to a running one",
        )
    skew.refuse_version_change(cfg, {n.name: facts[n.name] for n in existing if n.name in facts})


def gpu_nodes(facts: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    """New nodes whose facts show NVIDIA GPUs: the ready stage waits for the GPU Operator there."""
    return sorted(n for n in names if ((facts.get(n) or {}).get("nvidia_pci_devices")))


def add_extravars(names: Sequence[str], facts: Mapping[str, Any]) -> dict[str, Any]:
    """What playbooks/node-add.yml reads beyond the config's variables (pure); site.yml's plays get
    their hosts from the engine (``gpustack_stage_hosts``)."""
    return {
        "gpustack_node_add_nodes": list(names),
        "gpustack_node_add_gpu_nodes": gpu_nodes(facts, names),
        "gpustack_gpu_namespace": GPU_NAMESPACE,
    }


def describe(cfg: Config, new: Sequence[Node]) -> list[str]:
    """What `node add` will do, in order (shown before asking; pure)."""
    names = [n.name for n in new]
    existing = [n.name for n in cfg.nodes if n.name not in names]
    lines = [f"new node {n.name} ({n.address}, {n.role})" for n in new]
    lines.append(f"preflight: every node (read-only); the existing ones ({', '.join(existing)}) must run the cluster")
    lines.append(f"{', '.join(names)}: OS preparation, firewall, containerd, Kubernetes packages (as `up`)")
    cps = [n.name for n in new if n.role == "control-plane"]
    if cps:
        lines.append(
            f"{', '.join(cps)}: kubeadm join --control-plane with a fresh certificate key and token, one at a time; "
            "then Flannel and Helm as on every control plane"
        )
    workers = [n.name for n in new if n.role == "worker"]
    if workers:
        lines.append(f"{', '.join(workers)}: kubeadm join with a fresh token")
    if cfg.firewall.enabled:
        lines.append(
            f"existing nodes {', '.join(existing)}: only gpustack's firewall chain changes (it accepts "
            f"{', '.join(n.address for n in new)}); nothing else is touched there"
        )
    else:
        lines.append(f"existing nodes {', '.join(existing)}: nothing changes there")
    lines.append(f"wait until {', '.join(names)} Ready (and the GPU Operator validator on GPU nodes)")
    return lines


def sharing_step(names: Sequence[str]) -> StepFn:
    """The ``gpu-sharing`` stage: the new nodes' GPU sharing labels, through the stored admin kubeconfig."""

    def step(ctx: StepContext) -> list[StageSummary]:
        from gpustack.cluster.sharing import converge_sharing
        from gpustack.config.sharing import settings

        t0 = time.monotonic()
        wanted = [n for n in names if n in settings(ctx.cfg)]
        if not wanted:
            return [StageSummary("gpu-sharing", "ok", time.monotonic() - t0, hosts=list(names))]
        from gpustack.paths import kubeconfig_path
        from gpustack.runners.kubeconfig import kube_from_file

        kubeconfig = kubeconfig_path(ctx.cfg.cluster.name)
        if not kubeconfig.is_file():
            raise StageError(f"no admin kubeconfig at {kubeconfig}: the new nodes' GPU sharing was not set",
                             stage="gpu-sharing", hosts=tuple(wanted),
                             hint="gpustack up --only cluster sets it (and fetches the admin kubeconfig first)")  # fmt: skip
        kube = kube_from_file(kubeconfig)
        shared = converge_sharing(ctx.cfg, kube, only=wanted, gpu_nodes=gpu_nodes(ctx.facts, names),
                                  progress=lambda line: ctx.console.info(f"gpu-sharing: {line}"))  # fmt: skip
        status = "changed" if shared.changed else "ok"
        changed = sum(bool(n.changed) for n in shared.nodes)
        return [StageSummary("gpu-sharing", status, time.monotonic() - t0, changed, list(names), shared.detail())]

    return step


def add(cfg: Config, opts: AddOptions, console: Console) -> AddResult:
    """Run the `node-add` sequence for ``opts.nodes`` with the one engine; with ``opts.bundle``, from
    an air-gapped bundle checked and served as by `up --bundle` (gpustack/bundle/use.py)."""
    if opts.bundle is None:
        return _add(cfg, opts, console)
    from gpustack.bundle.use import session
    from gpustack.paths import resource_dir

    with session(cfg, opts.bundle, console, playbooks=resource_dir("playbooks"), listen=opts.bundle_listen) as served:
        return _add(served.config, opts, console, extra=served.extravars, host_check=served.check_hosts)


def _add(
    cfg: Config,
    opts: AddOptions,
    console: Console,
    *,
    extra: Mapping[str, Any] | None = None,
    host_check: Callable[[Mapping[str, Any]], None] | None = None,
) -> AddResult:
    from gpustack.cluster.kubelet_csr import kubelet_certs_step
    from gpustack.engine.run import run

    new = select_new(cfg, opts.nodes)
    names = [n.name for n in new]
    late = LateVars({**(extra or {}), **add_extravars(names, {})})

    def guard(_cfg: Config, facts: Mapping[str, Any]) -> None:
        check_cluster(cfg, facts, names)
        if host_check is not None:
            host_check({n: f for n, f in facts.items() if n in names})
        late.update(add_extravars(names, facts))

    run_opts = opts.run_options(PLAN.stages, extravars=late, stage_nodes=stage_nodes(names))

    def certs(ctx: StepContext) -> list[StageSummary]:
        if not opts.approve:
            return [StageSummary("kubelet-certs", "not run", 0.0, note="--no-approve: gpustack certs approve")]
        return kubelet_certs_step(ctx)

    steps = {"kubelet-certs": certs, "gpu-sharing": sharing_step(names)}
    result = run(PLAN, cfg, run_opts, console, steps=steps, after_preflight=guard)
    return AddResult(result.run_dir, result.summaries, names)
