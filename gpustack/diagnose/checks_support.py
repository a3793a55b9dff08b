"""K10: what the cluster really runs, against the end of its upstream support (gpustack/config/horizons.py).

Read from the snapshot, no extra request and no network: each Node's kubelet and containerd version and OS
(``status.nodeInfo``), the NVIDIA driver the GPU feature discovery labels on GPU nodes, the GPU Operator's chart
version (the ``helm.sh/chart`` label on its operator Deployment), and Prometheus by its own version: the
``/api/v1/status/buildinfo`` the ``prometheus`` source already read (when doctor's layers include it), else its
``Prometheus`` resource's ``spec.version`` (never by the chart: kube-prometheus-stack 88.5.3 ran 3.14.0 by default
and runs 3.13.5 with gpustack's values). A component past its end of support, or
within 90 days of it by a dated source, is a warning that names the nodes and gpustack's way out (``upgrade --to``,
``upgrade --components``, ``up --only containerd``) when that way out changes something; otherwise the check passes
and notes it (gpustack/config/advice.py: e.g. the pinned GPU Operator's default driver branch nearing its end with
no newer branch that operator supports). A known security release of a branch newer than what a node runs
(gpustack/config/security_releases.py) is a warning naming its CVEs and how to install it; a verdict resting on an estimate (a successor's expected
month) is not a finding about the cluster and is left to ``gpustack version``. The day is
:func:`gpustack.config.support.today` (``GPUSTACK_TODAY`` overrides it).
"""

from __future__ import annotations

import re

from gpustack.checks.model import Finding
from gpustack.config import advice, lifecycle, support
from gpustack.diagnose.objects import MAX_LISTED, as_dict, items, labels_of, name_of
from gpustack.diagnose.registry import register
from gpustack.diagnose.snapshot import Snapshot

LAYER = "kubernetes"
CHECK = "K10-support-horizons"
#: ``helm.sh/chart``: "<chart>-<version>" (the chart's _helpers.tpl: printf "%s-%s" .Chart.Name .Chart.Version)
_CHART_LABEL = re.compile(r"^(?P<chart>.+?)-(?P<version>v?\d+\.\d+\.\d+\S*)$")


#: chart -> its operator Deployment (whose chart label is read): the GPU Operator's (deployments/gpu-operator
#: templates/_helpers.tpl gpu-operator.labels: helm.sh/chart) and kube-prometheus-stack's (templates/_helpers.tpl
#: kube-prometheus-stack.labels: chart)
OPERATORS = {"gpu-operator": "gpu-operator", "kube-prometheus-stack": "kube-prometheus-stack-operator"}


def chart_versions(snap: Snapshot) -> dict[str, str]:
    """chart name -> version, from the chart label of each chart's operator Deployment."""
    out: dict[str, str] = {}
    for dep in items(snap, "Deployment"):
        labels = labels_of(dep)
        for key in ("helm.sh/chart", "chart"):
            m = _CHART_LABEL.match(str(labels.get(key) or ""))
            if m and OPERATORS.get(m.group("chart")) == name_of(dep):
                out[m.group("chart")] = m.group("version")
    return out


def _where(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    return shown + (f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")


@register(CHECK, LAYER, title="every component the cluster runs is within its upstream support",
          reads="nodes (nodeInfo kubelet, containerd, OS; GPU feature discovery driver labels), the chart label of "
                "the GPU Operator's operator Deployment, Prometheus' /api/v1/status/buildinfo (else its Prometheus "
                "resource's spec.version); dates shipped with gpustack",
          commands=("doctor",), needs=("Node",))  # fmt: skip
def support_horizons(snap: Snapshot) -> list[Finding]:
    on = support.today()
    nodes = [as_dict(n) for n in items(snap, "Node")]
    prometheus = lifecycle.running_prometheus(snap.prometheus.version, items(snap, "Prometheus"))
    judged = lifecycle.running_support(nodes, chart_versions(snap), on, prometheus)
    advised = advice.advise(judged, on)
    noted_keys = bool(advice.notes(advised))
    out = []
    for a in advice.warnings(advised):
        j = a.judged
        what = f"{j.component} {j.version}" + (f" ({j.branch})" if j.branch and j.branch != j.version else "")
        if j.security and a.text.startswith("open security release"):
            head = f"{what}: {a.text}"
        else:
            head = (
                f"{what} is {'past its end of support' if j.status == 'past' else 'near its end of support'}: {a.text}"
            )
        note = f" ({j.note})" if j.note else ""
        evidence = f"on {_where(j.where)}; as of {on.isoformat()}; source: {j.source}{note}"
        if j.security and head.startswith(f"{what}: open security"):
            evidence += "; " + ", ".join(u for r in j.security for u in r.sources[:2])
        out.append(Finding(CHECK, LAYER, "warn", head, evidence=evidence, fix=a.fix))
    if out:
        return out
    known = [j for j in judged if j.status == "supported" or (noted_keys and j.status in ("ending", "past"))]
    summary = ", ".join(sorted({f"{j.component} {j.branch}" for j in known})) or "no versions read"
    noted = [f"{a.judged.component} {a.judged.version}: {a.text}" for a in advice.notes(advised)]
    guessed = [f"{j.component} {j.version}: {j.verdict.text}" for j in lifecycle.warnings(judged, estimates=True)
               if j.verdict.estimated]  # fmt: skip
    evidence = f"as of {on.isoformat()}"
    if noted:
        evidence += f"; noted, no action possible yet: {'; '.join(noted)}"
    if guessed:
        evidence += f"; estimated only (see `gpustack version`): {'; '.join(guessed)}"
    title = "nothing to act on (see the notes)" if noted else "within upstream support for 90+ days"
    return [Finding(CHECK, LAYER, "pass", f"{title}: {summary}", evidence=evidence)]
