"""Every host-changing command as plain data: a named sequence of stages, and stage selection.

A command (``up``, ``reset``, ``upgrade``, ``components``, ``node-add``, ``node-remove``: the keys
of :data:`SEQUENCES`) is a :class:`CommandPlan`: its stages in order and the one playbook its
Ansible stages run (one play per stage, tagged with the stage id). :mod:`gpustack.lifecycle` runs
any plan the same way (host keys, preflight, the playbook with a host limit, Python steps, progress,
summary, run directory); ``gpustack plan <command>`` prints it. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gpustack.errors import UsageError

#: how the engine runs a stage: ``preflight`` (read-only facts + checks), ``ansible`` (a play of the
#: command's playbook, selected by tag) or ``python`` (a step function the command registers by id)
Runner = Literal["preflight", "ansible", "python"]
#: the hosts a stage touches: every node, the control plane, the workers, the nodes the command
#: names (``reset --node w3``, ``node add w3``: the run's host limit), or only this machine
Hosts = Literal["all", "control-plane", "workers", "targets", "local"]


@dataclass(frozen=True)
class Stage:
    id: str
    title: str
    runner: Runner
    hosts: Hosts  # which hosts it touches
    changes: str  # what it changes, for `gpustack plan`


@dataclass(frozen=True)
class CommandPlan:
    """One command's stages, in order, and the playbook its Ansible stages are plays of."""

    command: str
    summary: str  # one line for `gpustack plan`
    playbook: str  # under playbooks/; play names == stage ids, each play tagged with its id
    stages: tuple[Stage, ...]
    #: the playbook's stages record stamps (playbooks/module_utils/gpustack_stage.py): hosts the
    #: preflight finds converged are left out of a stage's play (see gpustack/render/converge.py)
    converges: bool = False

    @property
    def stage_ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self.stages)

    def _check(self, ids: Sequence[str], flag: str) -> None:
        unknown = [i for i in ids if i not in self.stage_ids]
        if unknown:
            raise UsageError(
                f"{flag}: unknown stage {', '.join(unknown)}; `gpustack {self.command}` stages are: "
                f"{', '.join(self.stage_ids)}"
            )

    def select(self, *, only: Sequence[str] = (), from_: str | None = None, skip: Sequence[str] = ()) -> list[Stage]:
        """Resolve --only/--from/--skip into the ordered stages to run.

        Preflight runs before any selection that changes hosts, unless it is skipped explicitly.
        Contradictions are usage errors, never "run nothing" or "run everything": a stage named by
        both --only and --skip, --from a stage that --skip names, --only with --from.
        """
        self._check(only, "--only")
        self._check(skip, "--skip")
        if from_ is not None:
            self._check([from_], "--from")
        if only and from_:
            raise UsageError("--only and --from cannot be combined")
        both = [s for s in self.stage_ids if s in only and s in skip]
        if both:
            raise UsageError(f"--only and --skip both name {', '.join(both)}: say which one you mean")
        if from_ is not None and from_ in skip:
            after = self.stage_ids[self.stage_ids.index(from_) + 1 :]
            hint = f" (to start after it: --from {after[0]})" if after else ""
            raise UsageError(f"--from {from_} and --skip {from_} contradict each other{hint}")
        stages = list(self.stages)
        if from_:
            stages = stages[self.stage_ids.index(from_) :]
        if only:
            stages = [s for s in stages if s.id in only]
        # every stage that changes something needs the hosts' facts (the cluster stage sizes values from them)
        first = self.stages[0]
        if (
            first.runner == "preflight"
            and stages
            and stages[0] != first
            and any(s.runner != "preflight" for s in stages)
        ):
            stages.insert(0, first)
        stages = [s for s in stages if s.id not in skip]
        if not stages:
            raise UsageError("nothing to run: the selection leaves no stage")
        return stages


#: read-only: every command that changes hosts starts with it
PREFLIGHT = Stage(
    "preflight",
    "Preflight checks",
    "preflight",
    "all",
    "nothing: reads OS, CPU, memory, disk, swap, ports, GPUs, Secure Boot, existing Kubernetes, sudo, time sync, "
    "reachability, cgroup v2, containerd version, GPU Operator support (driver container, kernel headers); tries "
    "the package sources and image registries the selected stages need, through the proxy",
)

UP_STAGES: tuple[Stage, ...] = (
    PREFLIGHT,
    Stage(
        "os",
        "OS preparation",
        "ansible",
        "all",
        "kernel modules overlay/br_netfilter (/etc/modules-load.d/gpustack.conf), sysctl (/etc/sysctl.d/99-gpustack-kubernetes.conf), swap off and commented out in /etc/fstab (backup kept), base packages, apt proxy; up --bundle: the bundle's signed apt repository for the node's release",
    ),
    Stage(
        "firewall",
        "Firewall",
        "ansible",
        "all",
        "iptables chain GPUSTACK-INPUT with one jump from INPUT (pod CIDR -> API, kubelet, VXLAN, NodePorts), gpustack-firewall.service to persist it; firewalld zone 'gpustack' when firewalld runs",
    ),
    Stage(
        "containerd",
        "containerd",
        "ansible",
        "all",
        "containerd and runc from the sha256-verified release archives into /usr/local (or the distribution's "
        "package where the matrix allows), own unit, /etc/containerd/config.toml version 3 with SystemdCgroup = true "
        "and the minor's sandbox image (backup kept), proxy drop-in, service enabled; up --bundle: the bundle's images "
        "imported (ctr -n k8s.io images import)",
    ),
    Stage(
        "kubernetes",
        "Kubernetes packages",
        "ansible",
        "all",
        "apt key checked against its pinned gpg fingerprint, keyring /etc/apt/keyrings, pkgs.k8s.io source "
        "with signed-by, kubelet/kubeadm/kubectl pinned and held",
    ),
    Stage(
        "control-plane",
        "Control plane",
        "ansible",
        "control-plane",
        "kubeadm init from /etc/gpustack/kubeadm-config.yaml (first run only), ~/.kube/config 0600, local copy of the admin kubeconfig, control-plane taint removed on single-node clusters",
    ),
    Stage(
        "workers", "Worker join", "ansible", "workers", "kubeadm join with a fresh token (only nodes not joined yet)"
    ),
    Stage(
        "network",
        "Flannel",
        "ansible",
        "control-plane",
        "Flannel manifest rendered by gpustack (pod CIDR, interface, pinned images), applied; waits for Flannel and CoreDNS",
    ),
    Stage(
        "helm",
        "Helm",
        "ansible",
        "control-plane",
        "helm binary, pinned version, sha256-verified, in /usr/local/bin (and for you, in the state directory)",
    ),
    Stage(
        "cluster",
        "GPU and monitoring stack",
        "python",
        "control-plane",
        "namespaces, Prometheus volume, Grafana admin Secret; Helm: kube-prometheus-stack (CRDs first), then "
        "GPU Operator and dcgm-exporter concurrently (unchanged releases untouched); ServiceMonitor, "
        "GPU alert and usage recording rules, DCGM and capacity dashboard ConfigMaps (server-side apply)",
    ),
)


RESET_STAGES: tuple[Stage, ...] = (
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


UPGRADE_STAGES: tuple[Stage, ...] = (
    PREFLIGHT,
    Stage(
        "repository",
        "Package repository",
        "ansible",
        "all",
        "before this stage: the version-skew policy (gpustack/skew.py) on the nodes' installed versions, exit 2 "
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
        "Ready at the target; uncordon; /etc/gpustack/installed.json records the target",
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


COMPONENTS_STAGES: tuple[Stage, ...] = (
    PREFLIGHT,
    Stage(
        "crds",
        "CRDs of the pinned charts",
        "python",
        "control-plane",
        "each pinned chart pulled; the CustomResourceDefinitions in its crds/ directories (and its subcharts') "
        "applied server-side and waited for (Helm never upgrades CRDs)",
    ),
    Stage(
        "cluster",
        "Releases at their pins",
        "python",
        "control-plane",
        "kube-prometheus-stack, then GPU Operator and dcgm-exporter upgraded to the pinned chart versions with the "
        "values rendered from the config and facts (unchanged releases untouched); gpustack's objects re-applied",
    ),
    Stage(
        "check",
        "ClusterPolicy check",
        "python",
        "control-plane",
        "nothing: reads the ClusterPolicy and fails when a key gpustack's GPU Operator values set is missing or changed",
    ),
)


NODE_ADD_STAGES: tuple[Stage, ...] = (
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
)


NODE_REMOVE_STAGES: tuple[Stage, ...] = (
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
        "delete",
        "Delete the Node object",
        "python",
        "local",
        "the Node object deleted (after its kubelet stopped, so it cannot register again)",
    ),
)


SEQUENCES: dict[str, CommandPlan] = {
    "up": CommandPlan(
        "up",
        "build (or converge) the cluster: host layer, Kubernetes, network, Helm, GPU and monitoring stack",
        "site.yml",
        UP_STAGES,
        converges=True,
    ),
    "reset": CommandPlan(
        "reset",
        "tear the cluster (or some nodes) down, leaving each host's own firewall and SSH as they were",
        "reset.yml",
        RESET_STAGES,
    ),
    "upgrade": CommandPlan(
        "upgrade",
        "Kubernetes one minor (or patch) up: control plane first, then the workers one at a time; resumable",
        "upgrade.yml",
        UPGRADE_STAGES,
    ),
    "components": CommandPlan(
        "components",
        "gpustack upgrade --components: Helm releases to their pinned chart versions, CRDs first",
        "site.yml",  # no Ansible stage: every step is Python
        COMPONENTS_STAGES,
    ),
    "node-add": CommandPlan(
        "node-add",
        "gpustack node add NAME...: join new nodes from the config; existing hosts change only their firewall peers",
        "node-add.yml",  # imports site.yml (the same stage plays and stamps) and adds the ready play
        NODE_ADD_STAGES,
        converges=True,
    ),
    "node-remove": CommandPlan(
        "node-remove",
        "gpustack node remove NAME...: drain (PodDisruptionBudgets checked first), reset the host, delete the node",
        "node-remove.yml",
        NODE_REMOVE_STAGES,
    ),
}


def sequence(command: str) -> CommandPlan:
    """The plan of one command; UsageError for a command that has none."""
    try:
        return SEQUENCES[command]
    except KeyError:
        raise UsageError(f"no plan for {command!r}: commands with a plan are {', '.join(SEQUENCES)}") from None


# `up`'s stages under their historical names
STAGES = UP_STAGES
STAGE_IDS: tuple[str, ...] = SEQUENCES["up"].stage_ids


def select(*, only: Sequence[str] = (), from_: str | None = None, skip: Sequence[str] = ()) -> list[Stage]:
    """`up`'s stage selection (see :meth:`CommandPlan.select`)."""
    return SEQUENCES["up"].select(only=only, from_=from_, skip=skip)
