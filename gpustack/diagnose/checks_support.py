"""K10: what the cluster really runs, against the end of its upstream support (gpustack/config/horizons.py).

Read from the snapshot, no extra request and no network: each Node's kubelet and containerd version and OS
(``status.nodeInfo``), the NVIDIA driver the GPU feature discovery labels on GPU nodes, the GPU Operator's chart
version (the ``helm.sh/chart`` label its chart puts on the operator Deployment), and the Prometheus version
Prometheus reports (when the monitoring source ran). A component past its end of support, or within 90 days
of it, is a warning that names the nodes and gpustack's way out (``upgrade --to``, ``upgrade --components``,
``up --only containerd``). The day is :func:`gpustack.config.support.today` (``GPUSTACK_TODAY`` overrides it).
"""

from __future__ import annotations

import re

from gpustack.checks.model import Finding
from gpustack.config import lifecycle, support
from gpustack.diagnose.objects import MAX_LISTED, as_dict, items, labels_of, name_of
from gpustack.diagnose.registry import register
from gpustack.diagnose.snapshot import Snapshot

LAYER = "kubernetes"
CHECK = "K10-support-horizons"
#: ``helm.sh/chart``: "<chart>-<version>" (the chart's _helpers.tpl: printf "%s-%s" .Chart.Name .Chart.Version)
_CHART_LABEL = re.compile(r"^(?P<chart>.+?)-(?P<version>v?\d+\.\d+\.\d+\S*)$")


def chart_versions(snap: Snapshot) -> dict[str, str]:
    """chart name -> version, from the ``helm.sh/chart`` label of the GPU Operator's Deployment."""
    out: dict[str, str] = {}
    for dep in items(snap, "Deployment"):
        label = str(labels_of(dep).get("helm.sh/chart") or "")
        m = _CHART_LABEL.match(label)
        if m and m.group("chart") == "gpu-operator" and name_of(dep) == "gpu-operator":
            out["gpu-operator"] = m.group("version")
    return out


def _where(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    return shown + (f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")


@register(CHECK, LAYER, title="every component the cluster runs is within its upstream support",
          reads="nodes (nodeInfo kubelet, containerd, OS; GPU feature discovery driver labels), the GPU Operator "
                "Deployment's helm.sh/chart label, Prometheus' reported version; dates shipped with gpustack",
          commands=("doctor",), needs=("Node",))  # fmt: skip
def support_horizons(snap: Snapshot) -> list[Finding]:
    on = support.today()
    nodes = [as_dict(n) for n in items(snap, "Node")]
    judged = lifecycle.running_support(nodes, chart_versions(snap), on, prometheus=snap.prometheus.version)
    out = []
    for j in lifecycle.warnings(judged):
        what = f"{j.component} {j.version}" + (f" ({j.branch})" if j.branch and j.branch != j.version else "")
        head = "past its end of support" if j.status == "past" else "near its end of support"
        note = f" ({j.note})" if j.note else ""
        evidence = f"on {_where(j.where)}; as of {on.isoformat()}; source: {j.source}{note}"
        out.append(Finding(CHECK, LAYER, "warn", f"{what} is {head}: {j.verdict.text}", evidence=evidence,
                           fix=lifecycle.upgrade_path(j)))  # fmt: skip
    if out:
        return out
    known = [j for j in judged if j.status == "supported"]
    summary = ", ".join(sorted({f"{j.component} {j.branch}" for j in known})) or "no versions read"
    return [Finding(CHECK, LAYER, "pass", f"within upstream support for 90+ days: {summary}",
                    evidence=f"as of {on.isoformat()}")]  # fmt: skip
