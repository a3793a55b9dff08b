"""``gpustack upgrade --components``: the Helm releases moved to the pinned chart versions.

Helm installs a chart's CRDs only on the first install and never upgrades them (helm/helm#7735;
the GPU Operator and kube-prometheus-stack upgrade guides both say to apply them by hand first).
So, per release, in install order:

    crds     the pinned chart pulled; every CustomResourceDefinition in its ``crds/`` directories
             (its subcharts' too: kube-prometheus-stack keeps them in charts/crds/crds/, the GPU
             Operator its NFD CRDs in charts/node-feature-discovery/crds/) applied server-side
             (gpustack's field manager, forced: Helm created them), then waited for Established
    cluster  the same cluster layer as `up` (gpustack/cluster/layer.py): each release upgraded to its pin
             with the values rendered from the config and the hosts' facts, unchanged ones untouched
    check    the ClusterPolicy still holds every key gpustack's GPU Operator values set

It is the ``components`` sequence (preflight first: the values depend on the hosts' facts).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack.engine.options import RunOptions
from gpustack.engine.plan import PREFLIGHT, CommandPlan, Stage
from gpustack.engine.steps import RunResult, StageSummary, StepContext
from gpustack.errors import StageError
from gpustack.paths import kubeconfig_path

if TYPE_CHECKING:
    from gpustack.config.model import Config
    from gpustack.console import Console
    from gpustack.runners.helm import Helm, ReleaseSpec
    from gpustack.runners.kube import Kube

STAGES: tuple[Stage, ...] = (
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


PLAN = CommandPlan(
    "components",
    "gpustack upgrade --components: Helm releases to their pinned chart versions, CRDs first",
    "site.yml",  # no Ansible stage: every step is Python
    STAGES,
)

#: gpu-operator values that configure the chart itself, not the ClusterPolicy it templates
CHART_ONLY_KEYS = frozenset({"nfd", "node-feature-discovery", "nameOverride", "fullnameOverride"})
CLUSTER_POLICY = ("nvidia.com/v1", "ClusterPolicy", "cluster-policy")


def chart_crds(chart_dir: Path) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in a pulled chart's ``crds/`` directories (the chart's and its
    subcharts'), in path order; non-CRD documents are ignored."""
    import yaml

    out: list[dict[str, Any]] = []
    for crds in sorted(p for p in chart_dir.rglob("crds") if p.is_dir() and (p.parent / "Chart.yaml").is_file()):
        for path in sorted(crds.rglob("*")):
            if path.suffix not in (".yaml", ".yml", ".json") or not path.is_file():
                continue
            for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    out.append(doc)
    return out


def crd_names(crds: Iterable[Mapping[str, Any]]) -> list[str]:
    return [str(c["metadata"]["name"]) for c in crds]


def clusterpolicy_drift(values: Mapping[str, Any], spec: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys gpustack's GPU Operator values set that the ClusterPolicy spec lacks or holds
    differently (pure). Chart-level keys (``nfd``...) are not ClusterPolicy fields."""
    out: list[str] = []
    for key, want in values.items():
        if not prefix and key in CHART_ONLY_KEYS:
            continue
        path = f"{prefix}{key}"
        if key not in spec:
            out.append(f"{path} (missing)")
        elif isinstance(want, Mapping) and isinstance(spec[key], Mapping):
            out += clusterpolicy_drift(want, spec[key], f"{path}.")
        elif spec[key] != want:
            out.append(f"{path} ({spec[key]!r}, gpustack set {want!r})")
    return out


def apply_crds(helm: Helm, kube: Kube, specs: Iterable[ReleaseSpec], *, timeout: float = 300.0) -> list[str]:
    """Pull each pinned chart and apply its CRDs server-side, waiting until they are established;
    returns ``release: n CRDs`` per release."""
    lines = []
    for spec in specs:
        where = helm.pull_chart(spec)
        try:
            crds = chart_crds(where)
        finally:
            shutil.rmtree(where, ignore_errors=True)
        if crds:
            kube.apply(crds)
            kube.wait_for_crds(crd_names(crds), time.monotonic() + timeout, interval=0.5)
        lines.append(f"{spec.release} {spec.version}: {len(crds)} CRDs")
    return lines


def upgrade_components(cfg: Config, opts: RunOptions, console: Console) -> RunResult:
    """Run the ``components`` sequence with the one engine."""
    from gpustack.cluster.layer import etcd_metrics_exposed, foreign_nfd_running, release_specs
    from gpustack.cluster.stage import find_helm, run_cluster_stage
    from gpustack.engine.run import run
    from gpustack.render.values import render_values, summarize_facts
    from gpustack.runners.helm import Helm
    from gpustack.runners.kubeconfig import kube_from_file

    kubeconfig = kubeconfig_path(cfg.cluster.name)
    state: dict[str, Any] = {}

    def clients() -> tuple[Helm, Kube]:
        if not kubeconfig.is_file():
            raise StageError(
                f"no admin kubeconfig at {kubeconfig}", stage="crds", hint="gpustack up builds the cluster"
            )
        return Helm(kubeconfig, executable=find_helm()), kube_from_file(kubeconfig)

    def crds(ctx: StepContext) -> list[StageSummary]:
        t0 = time.monotonic()
        if ctx.opts.dry_run:
            return [StageSummary("crds", "not run", 0.0, note="dry run")]
        helm, kube = clients()
        summary = summarize_facts(
            ctx.facts, nfd_running=foreign_nfd_running(kube), etcd_metrics_exposed=etcd_metrics_exposed(kube)
        )
        state["values"] = render_values(cfg, summary)
        lines = apply_crds(helm, kube, release_specs(cfg, state["values"]))
        for line in lines:
            console.print(f"  crds: {line}", markup=False)
        return [
            StageSummary(
                "crds", "changed", time.monotonic() - t0, len(lines), [cfg.control_plane.name], "; ".join(lines)
            )
        ]

    def cluster(ctx: StepContext) -> list[StageSummary]:
        return run_cluster_stage(cfg, ctx.facts, ctx.opts, console)

    def check(ctx: StepContext) -> list[StageSummary]:
        t0 = time.monotonic()
        values = (state.get("values") or {}).get("gpu-operator")
        if ctx.opts.dry_run or not values:
            return [StageSummary("check", "not run", 0.0, note="dry run" if ctx.opts.dry_run else "no GPU Operator")]
        _, kube = clients()
        policy = kube.get(*CLUSTER_POLICY)
        if policy is None:
            raise StageError(
                "the GPU Operator's ClusterPolicy cluster-policy is missing after the upgrade", stage="check"
            )
        drift = clusterpolicy_drift(values, policy.get("spec") or {})
        if drift:
            raise StageError(
                "the ClusterPolicy lost settings gpustack made: " + ", ".join(drift),
                stage="check",
                hint="gpustack up --only cluster re-applies them; see docs/lifecycle.md (components)",
            )
        return [
            StageSummary(
                "check",
                "ok",
                time.monotonic() - t0,
                hosts=[cfg.control_plane.name],
                note="ClusterPolicy keeps gpustack's settings",
            )
        ]

    return run(PLAN, cfg, opts, console, steps={"crds": crds, "cluster": cluster, "check": check})
