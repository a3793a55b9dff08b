"""Kubernetes version-skew rules for ``gpustack upgrade`` and ``up``: pure functions, no I/O.

The rules (kubernetes.io "Version Skew Policy" and the kubeadm upgrade procedure):

- the target is a version gpustack pins (gpustack/config/pins.py) and the compatibility matrix
  accepts it with the rest of the config (containerd, GPU Operator range: gpustack/config/compat.py);
- the control plane moves at most one minor per upgrade (no minor skipped) and never backwards;
- the control plane goes first: no kubelet is ever newer than the API server;
- kubelets may stay behind the API server by at most three minors (1.28+ policy), so an upgrade
  that would leave a kubelet further behind is refused until that node has caught up.

What a host runs is read from the marker gpustack writes on every node
(``/etc/gpustack/installed.json``, ``kubernetes_version``), which preflight collects as
``facts["kubernetes"]["gpustack_marker"]``; the ``upgrade`` playbook rewrites it on each node
when that node's upgrade is complete.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpustack.config import compat, pins
from gpustack.config.model import Config
from gpustack.errors import ConfigError

#: how many minors a kubelet may be older than the API server (Kubernetes >= 1.28)
KUBELET_MAX_BEHIND = 3


class SkewError(ConfigError):
    """An upgrade (or an `up` with a changed version) the version-skew policy refuses; exit 2."""


def minor_of(version: str) -> tuple[int, int]:
    """'v1.36.4' -> (1, 36)."""
    parts = pins.version_tuple(version)
    if len(parts) < 2:
        raise ValueError(f"not a Kubernetes version: {version!r}")
    return parts[0], parts[1]


def minor_str(version: str) -> str:
    major, minor = minor_of(version)
    return f"{major}.{minor}"


def resolve_target(to: str) -> str:
    """``--to 1.36`` or ``1.36.4`` -> the pinned patch; SkewError naming the pinned ones otherwise."""
    try:
        return pins.kubernetes_patch(to.strip())
    except (KeyError, IndexError):
        raise SkewError(
            f"--to {to}: not a Kubernetes version gpustack pins",
            hint=f"pinned versions: {', '.join(pins.KUBERNETES.values())} (--to MINOR picks the pinned patch)",
        ) from None


def kubelet_allowed(kubelet: str, apiserver: str) -> bool:
    """A kubelet may be as new as the API server and up to three minors older, never newer."""
    k, a = minor_of(kubelet), minor_of(apiserver)
    return k[0] == a[0] and a[1] - KUBELET_MAX_BEHIND <= k[1] <= a[1]


@dataclass(frozen=True)
class ClusterVersions:
    """What each node runs (node name -> Kubernetes version) and which are control planes."""

    nodes: Mapping[str, str]
    control_planes: tuple[str, ...]

    @property
    def apiserver(self) -> str:
        """The oldest control-plane version: during an upgrade the one every kubelet must not pass."""
        versions = [self.nodes[n] for n in self.control_planes if n in self.nodes]
        if not versions:
            raise SkewError("no control-plane node reports its Kubernetes version (/etc/gpustack/installed.json)")
        return min(versions, key=pins.version_tuple)


def installed_versions(facts: Mapping[str, Any]) -> dict[str, str]:
    """Node -> the Kubernetes version gpustack's marker records there (nodes without one are left out)."""
    out: dict[str, str] = {}
    for node, f in facts.items():
        marker = ((f or {}).get("kubernetes") or {}).get("gpustack_marker") or {}
        version = marker.get("kubernetes_version") if isinstance(marker, dict) else None
        if isinstance(version, str) and pins.version_tuple(version)[:2]:
            out[node] = version.lstrip("v")
    return out


def upgrade_problems(current: ClusterVersions, target: str) -> list[str]:
    """Why an upgrade of ``current`` to ``target`` (a pinned patch) is refused; empty: allowed."""
    out: list[str] = []
    api = current.apiserver
    t, a = minor_of(target), minor_of(api)
    newest_cp = max((current.nodes[n] for n in current.control_planes if n in current.nodes), key=pins.version_tuple)
    if pins.version_tuple(target) < pins.version_tuple(newest_cp):
        out.append(f"{target} is older than the control plane's {newest_cp}: downgrades are not supported")
    elif t[0] != a[0] or t[1] > a[1] + 1:
        nxt = f"{a[0]}.{a[1] + 1}"
        out.append(
            f"{minor_str(target)} skips a minor: the control plane runs {api}; upgrade one minor at a time "
            f"(gpustack upgrade --to {nxt} first)"
        )
    for node, version in sorted(current.nodes.items()):
        if node in current.control_planes:
            continue
        if pins.version_tuple(version)[:2] > a:
            out.append(f"{node}: kubelet {version} is newer than the API server {api} (fix that node first)")
        elif t[1] - minor_of(version)[1] > KUBELET_MAX_BEHIND:
            out.append(
                f"{node}: kubelet {version} would fall more than {KUBELET_MAX_BEHIND} minors behind {target}; "
                f"upgrade it first"
            )
    return out


def matrix_problems(cfg: Config, target: str) -> list[str]:
    """The compatibility matrix for the config at ``target`` (containerd minimum, GPU Operator range)."""
    moved = with_version(cfg, target)
    return [f"{'.'.join(str(p) for p in pr.path)}: {pr.message}" for pr in compat.config_problems(moved)]


def with_version(cfg: Config, version: str) -> Config:
    """The config with ``versions.kubernetes`` moved to ``version`` (what the upgrade renders)."""
    return cfg.model_copy(update={"versions": cfg.versions.model_copy(update={"kubernetes": version})})


def check_upgrade(cfg: Config, current: ClusterVersions, target: str) -> None:
    """Raise SkewError (exit 2) with every reason an upgrade to ``target`` is refused."""
    problems = upgrade_problems(current, target) + matrix_problems(cfg, target)
    if problems:
        raise SkewError(
            f"upgrade to {target} refused: " + "; ".join(problems),
            hint="see `gpustack version` for the compatibility matrix and docs/lifecycle.md (upgrade)",
        )


def version_change_problem(cfg: Config, installed: Mapping[str, str]) -> str | None:
    """`up` on a live cluster whose installed version differs from ``versions.kubernetes``: why it is
    refused (None: nothing installed yet, or the same version everywhere)."""
    want = cfg.versions.kubernetes
    differ = {n: v for n, v in installed.items() if v != want}
    if not differ:
        return None
    listed = ", ".join(f"{n} runs {v}" for n, v in sorted(differ.items()))
    newer = all(pins.version_tuple(want) > pins.version_tuple(v) for v in differ.values())
    if newer:
        return (
            f"versions.kubernetes is {want} but {listed}: `up` does not upgrade a live cluster; "
            f"run `gpustack upgrade --to {want}` (control plane first, workers one at a time)"
        )
    return (
        f"versions.kubernetes is {want} but {listed}: set versions.kubernetes to the installed version "
        "(downgrades are not supported), or finish an interrupted upgrade with `gpustack upgrade --to <version>`"
    )


def refuse_version_change(cfg: Config, facts: Mapping[str, Any]) -> None:
    """`up`'s guard after preflight: SkewError (exit 2) pointing at `gpustack upgrade`."""
    why = version_change_problem(cfg, installed_versions(facts))
    if why:
        raise SkewError(why, hint="nothing was changed; see docs/lifecycle.md (upgrade)")


@dataclass(frozen=True)
class Step:
    """One node's turn in an upgrade, in order."""

    node: str
    action: str  # "apply" (first control plane), "node" (other control planes), "worker"
    detail: str


def upgrade_order(cfg: Config, target: str) -> list[Step]:
    """The order an upgrade takes the nodes in: the first control plane (``kubeadm upgrade plan`` and
    ``apply``), the other control planes one at a time, then the workers one at a time."""
    v = f"v{target}"
    cps = [n for n in cfg.nodes if n.role == "control-plane"]
    single = len(cfg.nodes) == 1
    steps = [
        Step(
            cps[0].name,
            "apply",
            f"kubeadm {target}; kubeadm upgrade plan {v}; kubeadm upgrade apply {v}; "
            + ("" if single else "drain; ")
            + f"kubelet/kubectl {target}; kubelet restarted; Ready"
            + ("" if single else "; uncordon"),
        )
    ]
    steps += [
        Step(
            n.name,
            "node",
            f"kubeadm {target}; kubeadm upgrade node; drain; kubelet/kubectl {target}; kubelet restarted; Ready; uncordon",
        )
        for n in cps[1:]
    ]
    steps += [
        Step(
            n.name,
            "worker",
            f"drain; kubeadm {target}; kubeadm upgrade node; kubelet/kubectl {target}; kubelet restarted; Ready"
            + " (GPU nodes: and the GPU Operator validator)"
            + "; uncordon",
        )
        for n in cfg.workers
    ]
    return steps
