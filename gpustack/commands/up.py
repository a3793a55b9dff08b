"""``gpustack up``: build (or converge) the cluster -- the `up` sequence run by the engine
(:mod:`gpustack.engine.run`), with one Python step, the cluster layer (:mod:`gpustack.cluster.stage`),
and one guard: a live cluster at another Kubernetes version is upgraded by ``gpustack upgrade``, never
by ``up``. ``up --bundle DIR`` serves an air-gapped bundle to the nodes for the run's lifetime."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack.bundle import PLAYBOOK_VARS as BUNDLE_VARS
from gpustack.engine.options import RunOptions
from gpustack.engine.plan import PREFLIGHT, CommandPlan, Stage, Table
from gpustack.engine.steps import Guard, RunResult, StageSummary, StepContext, StepFn
from gpustack.paths import kubeconfig_path

if TYPE_CHECKING:
    from gpustack.checks.model import Finding
    from gpustack.config.model import Config
    from gpustack.console import Console

STAGES: tuple[Stage, ...] = (
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
        "iptables chain GPUSTACK-INPUT with one jump from INPUT (nodes, pod CIDR, firewall.admin_cidrs -> API, kubelet, "
        "VXLAN; etcd, API, kubelet, 10257, 10259 dropped for anyone else) and GPUSTACK-PREROUTING (mangle) with one jump "
        "from PREROUTING (NodePorts from nodes, pods and firewall.admin_cidrs only, before kube-proxy's DNAT), "
        "the same GPUSTACK-INPUT in ip6tables on hosts with IPv6, "
        "gpustack-firewall.service to persist them; firewalld zone 'gpustack' when firewalld runs",
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
        "with signed-by, kubelet/kubeadm/kubectl pinned and held; with hosts.hold_kernel the kernel and NVIDIA driver "
        "packages held (off: the holds gpustack made released)",
    ),
    Stage(
        "control-plane",
        "Control plane",
        "ansible",
        "control-plane",
        "kubeadm init from /etc/gpustack/kubeadm-config.yaml (first run only), ~/.kube/config 0600, local copy of the admin kubeconfig, control-plane taint removed on single-node clusters; the gpustack-etcd-snapshot systemd timer (etcd.snapshots)",
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
        "kubelet-certs",
        "Kubelet serving certificates",
        "python",
        "control-plane",
        "the kubelets' pending kubernetes.io/kubelet-serving CSRs approved when the requester, subject and addresses "
        "are the node's own (gpustack.yaml and its Node object); any other left pending (doctor K12)",
    ),
    Stage(
        "cluster",
        "GPU and monitoring stack",
        "python",
        "control-plane",
        "namespaces, Prometheus volume, Grafana admin Secret; Helm: kube-prometheus-stack (CRDs first), then "
        "GPU Operator and dcgm-exporter concurrently (unchanged releases untouched); ServiceMonitor, "
        "GPU alert and usage recording rules, DCGM and capacity dashboard ConfigMaps (server-side apply); "
        "GPU sharing: the device-plugin and mig-parted ConfigMaps, node labels nvidia.com/mig.config and "
        "nvidia.com/device-plugin.config (a node whose MIG configuration changes is drained of GPU pods first)",
    ),
)


def details(cfg: Config, to: str | None) -> list[Table]:
    """`gpustack plan up` shows the versions the config chooses with their end of support (the first table of
    `gpustack version`, which adds the compatibility matrix, host OS support and every artifact's checksum),
    when nodes share their GPUs, what the cluster stage sets for each (docs/gpu-sharing.md), the control
    plane's hardening settings (docs/configuration.md) and, with gpustack's firewall, who reaches which port
    (docs/configuration.md, "Security defaults")."""
    from gpustack.config import compat, support
    from gpustack.render import firewall, security
    from gpustack.render.sharing import plan_rows

    day = support.today()
    title = f"pins on {day.isoformat()} (end of support); matrix, checksums: `gpustack version`"
    tables = [(title, ["component", "version", "support ends", "status"], compat.pin_rows(cfg, day))]
    rows = plan_rows(cfg)
    if rows:
        tables.append(("GPU sharing (cluster stage)", ["node", "mode", "setting", "labels (nvidia.com/)"], rows))
    tables.append(("control-plane hardening (security:)", ["setting", "value", "new cluster", "running cluster"],
                   security.plan_rows(cfg)))  # fmt: skip
    walls = firewall.plan_rows(cfg)
    if walls:
        title = "firewall stage: who reaches what (an existing cluster's next `up` applies it too)"
        tables.append((title, ["ports", "accepted from", "everyone else"], walls))
    return tables


PLAN = CommandPlan(
    "up",
    "build (or converge) the cluster: host layer, Kubernetes, network, Helm, GPU and monitoring stack",
    "site.yml",
    STAGES,
    converges=True,
    extravars=BUNDLE_VARS,
    details=details,
)


@dataclass
class UpResult:
    run_dir: Path
    summaries: list[StageSummary]
    findings: list[Finding]
    kubeconfig: Path | None


def up(
    cfg: Config, opts: RunOptions, console: Console, *, bundle: Path | None = None, bundle_listen: str | None = None
) -> UpResult:
    """Run the `up` sequence; with ``bundle`` (``up --bundle DIR``), from an air-gapped bundle:
    checked against the config before anything else, served to the nodes for the run's lifetime
    (gpustack/bundle/use.py)."""
    from gpustack.cluster.kubelet_csr import kubelet_certs_step
    from gpustack.cluster.stage import cluster_step, run_cluster_stage

    if bundle is None:
        result = _run(cfg, opts, console, steps={"kubelet-certs": kubelet_certs_step, "cluster": cluster_step})
    else:
        from gpustack.bundle.use import session
        from gpustack.paths import resource_dir

        with session(cfg, bundle, console, playbooks=resource_dir("playbooks"), listen=bundle_listen) as served:

            def bundled_cluster(ctx: StepContext) -> list[StageSummary]:
                return run_cluster_stage(ctx.cfg, ctx.facts, ctx.opts, ctx.console, charts=served.charts)

            opts = replace(opts, extravars={**opts.extravars, **served.extravars})
            result = _run(
                served.config,
                opts,
                console,
                steps={"kubelet-certs": kubelet_certs_step, "cluster": bundled_cluster},
                also_after_preflight=lambda _cfg, facts: served.check_hosts(facts),
            )
    kubeconfig = kubeconfig_path(cfg.cluster.name)
    return UpResult(result.run_dir, result.summaries, result.findings, kubeconfig if kubeconfig.exists() else None)


def _run(
    cfg: Config,
    opts: RunOptions,
    console: Console,
    *,
    steps: Mapping[str, StepFn],
    also_after_preflight: Guard | None = None,
) -> RunResult:
    from gpustack.cluster import encryption_off, skew
    from gpustack.engine.run import run

    def after_preflight(c: Config, facts: Mapping[str, Any]) -> None:
        # a live cluster at another version is upgraded by `gpustack upgrade`, never by `up`
        skew.refuse_version_change(c, facts)
        # encryption at rest is never turned off on a cluster that encrypts (gpustack/cluster/encryption_off.py)
        encryption_off.refuse_at_up(c, facts)
        if also_after_preflight is not None:
            also_after_preflight(c, facts)

    return run(PLAN, cfg, opts, console, steps=steps, after_preflight=after_preflight)


def run_stage(cfg: Config, console: Console, stage_id: str, facts: Mapping[str, Any] | None = None) -> None:
    """Re-run one `up` stage without preflight (host keys verified, never recorded): what
    ``doctor --fix`` is given as its "run stage" callable. ``facts``: the hosts' facts, for the
    cluster stage (it sizes values from them)."""
    stages = PLAN.select(only=[stage_id], skip=["preflight"])
    up(cfg, RunOptions(stages=stages, verbosity=max(0, console.verbosity - 1), facts=facts), console)
