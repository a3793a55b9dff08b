"""Support horizons applied: the pins of a config, and what a cluster really runs, each judged on a day.

:func:`pin_support` is what ``gpustack version`` shows beside each pin; :func:`running_support` is what
``gpustack status`` and ``gpustack doctor`` (K10-support-horizons) report for the versions read from the
cluster, with the way gpustack offers out (:func:`upgrade_path`). Pure: ``on`` is a parameter
(:func:`gpustack.config.support.today` gives the default).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date

from gpustack.config import horizons, pins, security_releases, support
from gpustack.config.model import Config
from gpustack.config.security_releases import SecurityRelease
from gpustack.config.support import Horizon, Verdict


@dataclass(frozen=True)
class Judged:
    """One component at one version, its branch's horizon and the verdict on a day."""

    component: str
    version: str
    branch: str
    verdict: Verdict
    source: str
    note: str = ""
    successor: str = ""
    where: tuple[str, ...] = field(default=())  # nodes (or releases) that run it; empty for a pin
    #: security releases of the branch newer than ``version`` that gpustack knows of and does not pin
    security: tuple[SecurityRelease, ...] = field(default=())

    @property
    def status(self) -> support.Status:
        return self.verdict.status

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"component": self.component, "version": self.version, "branch": self.branch,
                                  **self.verdict.to_json(), "source": self.source}  # fmt: skip
        if self.note:
            out["note"] = self.note
        if self.successor:
            out["successor"] = self.successor
        if self.where:
            out["where"] = list(self.where)
        if self.security:
            out["open_security_releases"] = [r.to_json() for r in self.security]
        return out


def _unknown(why: str) -> Verdict:
    return Verdict("unknown", why, None, False, why)


def judge(component: str, version: str, on: date, where: Iterable[str] = ()) -> Judged:
    """``version`` of ``component`` judged on ``on`` (``unknown`` when gpustack has no horizon for its branch)."""
    h: Horizon | None = horizons.horizon_for(component, version)
    branch = horizons.branch_of(component, version)
    if h is None:
        why = "newer than gpustack's support data" if branch else "version not readable"
        return Judged(component, version, branch, _unknown(why), "", where=tuple(where))
    return Judged(component, version, h.branch, support.judge(h, on), h.source, h.note, h.successor, tuple(where),
                  tuple(security_releases.open_releases(component, version)))  # fmt: skip


# --- the pins ------------------------------------------------------------------------------------------------


def prometheus_of(kube_prometheus_stack: str) -> str | None:
    """The Prometheus version a kube-prometheus-stack chart deploys, when gpustack knows it."""
    chart, prometheus = pins.KUBE_PROMETHEUS_STACK_PROMETHEUS
    return prometheus if kube_prometheus_stack.lstrip("v") == chart else None


def pin_support(cfg: Config | None, on: date) -> list[Judged]:
    """Every pinned component (the config's choice, else the pin table's) judged on ``on``. Kubernetes: every
    pinned minor without a config, the chosen one with; kube-prometheus-stack by the Prometheus it deploys."""
    v = cfg.versions if cfg else None
    out = [judge("kubernetes", k, on) for k in ([v.kubernetes] if v else list(pins.KUBERNETES.values()))]
    out += [
        judge("containerd", v.containerd if v else pins.CONTAINERD_VERSION, on),
        judge("runc", v.runc if v else pins.RUNC_VERSION, on),
        judge("flannel", v.flannel if v else pins.FLANNEL_VERSION, on),
        judge("helm", v.helm if v else pins.HELM_VERSION, on),
        judge("cni-plugins", v.cni_plugins if v else pins.CNI_PLUGINS_VERSION, on),
        judge("crictl", v.crictl if v else pins.CRICTL_VERSION, on),
    ]
    operator = v.gpu_operator if v else pins.CHARTS["gpu-operator"].version
    out.append(judge("gpu-operator", operator, on))
    driver = pins.GPU_OPERATOR_DRIVER.get(operator)
    out.append(
        judge("nvidia-driver", driver, on) if driver
        else Judged("nvidia-driver", "?", "", _unknown(f"driver of {operator} not known"), "")
    )  # fmt: skip
    kps = v.kube_prometheus_stack if v else pins.CHARTS["kube-prometheus-stack"].version
    prom = prometheus_of(kps)
    judged_kps = judge("kube-prometheus-stack", kps, on)
    if prom:
        p = judge("prometheus", prom, on)
        judged_kps = Judged("kube-prometheus-stack", kps, p.branch, p.verdict, p.source,
                            f"judged by the Prometheus it deploys, {prom}" + (f": {p.note}" if p.note else ""),
                            p.successor)  # fmt: skip
    out.append(judged_kps)
    out.append(judge("dcgm-exporter", v.dcgm_exporter if v else pins.CHARTS["dcgm-exporter"].version, on))
    out.append(judge("dcgm", pins.DCGM_VERSION, on))
    return out


def pin_label(j: Judged) -> str:
    """The pin's row name in ``gpustack version``."""
    return {"nvidia-driver": "nvidia-driver (GPU Operator default)", "dcgm": "dcgm (diag image)"}.get(
        j.component, j.component
    )


def os_support(on: date) -> list[Judged]:
    """The supported host OS releases judged on ``on``."""
    return [
        Judged("os", o.name, key, support.judge(h, on), h.source, h.note)
        for o in pins.OS_RELEASES
        if (h := horizons.BY_KEY.get(("os", key := horizons.os_key(o.id, o.version)))) is not None
    ]


# --- what a cluster runs -----------------------------------------------------------------------------------------


def _d(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def node_versions(nodes: Iterable[dict[str, object]]) -> dict[str, dict[str, list[str]]]:
    """From Node objects: component -> version -> [node names], for the kubelet, containerd, the host OS and the
    NVIDIA driver (the GPU feature discovery label ``nvidia.com/cuda.driver-version.full``, or the deprecated
    ``nvidia.com/cuda.driver.{major,minor,rev}``: NVIDIA/k8s-device-plugin internal/lm/nvml.go)."""
    out: dict[str, dict[str, list[str]]] = {}

    def add(component: str, version: str, node: str) -> None:
        if version:
            out.setdefault(component, {}).setdefault(version, []).append(node)

    for obj in nodes:
        meta, status = _d(_d(obj).get("metadata")), _d(_d(obj).get("status"))
        name = str(meta.get("name") or "?")
        labels, info = _d(meta.get("labels")), _d(status.get("nodeInfo"))
        add("kubernetes", str(info.get("kubeletVersion") or "").lstrip("v"), name)
        runtime = str(info.get("containerRuntimeVersion") or "")
        if runtime.startswith("containerd://"):
            add("containerd", runtime.removeprefix("containerd://"), name)
        add("os", horizons.os_from_image(str(info.get("osImage") or "")), name)
        driver = str(labels.get("nvidia.com/cuda.driver-version.full") or "")
        if not driver and labels.get("nvidia.com/cuda.driver.major"):
            driver = ".".join(str(labels.get(f"nvidia.com/cuda.driver.{p}") or "") for p in ("major", "minor", "rev"))
        add("nvidia-driver", driver.strip("."), name)
    return out


#: where the running Prometheus' version was read (:func:`running_prometheus`)
BUILDINFO = "Prometheus (its /api/v1/status/buildinfo)"


def _release(text: str) -> str:
    """'3.14.0' from buildinfo's '3.14.0', a resource's 'v3.14.0-distroless' or Debian's '2.42.0+ds' ("" if none)."""
    m = re.match(r"v?(\d+\.\d+\.\d+)", text.strip())
    return m.group(1) if m else ""


def running_prometheus(buildinfo: str, resources: Iterable[dict[str, object]] = ()) -> tuple[str, str]:
    """(the version of the Prometheus that runs, where it was read): its own ``/api/v1/status/buildinfo``, else the
    ``version`` (or image tag) of its prometheus-operator ``Prometheus`` resource, which kube-prometheus-stack sets
    from ``prometheus.prometheusSpec.image.tag`` (templates/prometheus/prometheus.yaml); ("", "") when neither was
    read. Never the chart: one chart (88.5.3) runs 3.14.0 by its default and 3.13.5 with gpustack's values."""
    if _release(buildinfo):
        return _release(buildinfo), BUILDINFO
    for obj in resources:
        meta, spec = _d(_d(obj).get("metadata")), _d(_d(obj).get("spec"))
        version = _release(str(spec.get("version") or "")) or _release(str(spec.get("image") or "").rpartition(":")[2])
        if version:
            name = f"{meta.get('namespace') or '?'}/{meta.get('name') or '?'}"
            return version, f"Prometheus resource {name} (spec.version: Prometheus itself not read)"
    return "", ""


def running_support(
    nodes: Iterable[dict[str, object]], charts: dict[str, str], on: date, prometheus: tuple[str, str] = ("", "")
) -> list[Judged]:
    """What the cluster runs, judged on ``on``: per component and version (with the nodes that run it), the GPU
    Operator by its chart (release name -> chart version in ``charts``) and Prometheus by its own version
    (``prometheus``: :func:`running_prometheus`; not judged when it was not read)."""
    out: list[Judged] = []
    for component, versions in node_versions(nodes).items():
        for version, names in sorted(versions.items()):
            if component == "os":
                h = horizons.BY_KEY.get(("os", version))
                verdict = support.judge(h, on) if h else _unknown("no support data for this OS")
                out.append(Judged("os", version, version, verdict, h.source if h else "", h.note if h else "",
                                  where=tuple(names)))  # fmt: skip
            else:
                out.append(judge(component, version, on, names))
    if charts.get("gpu-operator"):
        out.append(judge("gpu-operator", charts["gpu-operator"], on, ["release gpu-operator"]))
    version, where = prometheus
    if version:
        out.append(judge("prometheus", version, on, [where]))
    return out


def warnings(judged: Iterable[Judged], *, estimates: bool = False) -> list[Judged]:
    """The components past their end of support or within the warning window. Verdicts resting on an estimate (a
    successor's expected month) only with ``estimates``: ``status`` and ``doctor`` report what a dated source says
    about the cluster, ``version`` and ``scripts/pins_report.py`` also what is expected."""
    return [j for j in judged if j.status in ("past", "ending") and (estimates or not j.verdict.estimated)]


def upgrade_path(j: Judged, cfg: Config | None = None) -> str:
    """The way out gpustack offers for ``j`` (a running component)."""
    if j.component == "kubernetes":
        minors = sorted(pins.KUBERNETES, key=pins.version_tuple)
        newer = [m for m in minors if pins.version_tuple(m) > pins.version_tuple(j.branch)]
        if newer:
            return (f"`gpustack upgrade --to {newer[0]}` (one minor at a time"
                    + (f", then {', '.join(newer[1:])})" if newer[1:] else ")"))  # fmt: skip
        return "the newest minor gpustack pins: a newer gpustack release pins the next one"
    if j.component in ("containerd", "runc"):
        cd = cfg.versions.containerd if cfg else pins.CONTAINERD_VERSION
        return (f"`gpustack up --only containerd` installs containerd {cd} and runc "
                f"{cfg.versions.runc if cfg else pins.RUNC_VERSION} (versions.containerd_source: release)")  # fmt: skip
    if j.component == "gpu-operator":
        return f"`gpustack upgrade --components` installs GPU Operator {pins.CHARTS['gpu-operator'].version}"
    if j.component == "nvidia-driver":
        chart = pins.CHARTS["gpu-operator"].version
        return (f"operator-managed driver: `gpustack upgrade --components` (GPU Operator {chart} deploys "
                f"{pins.GPU_OPERATOR_DRIVER.get(chart, '?')}); a preinstalled driver: install a supported branch "
                "(R580 LTSB until June 2028) on the host")  # fmt: skip
    if j.component == "prometheus":
        chart = pins.CHARTS["kube-prometheus-stack"].version
        prom = prometheus_of(chart) or "?"
        back = (" (back from a newer non-LTS minor: the TSDB on its volume stays readable, docs/decisions.md)"
                if prom != "?" and pins.version_tuple(j.version) > pins.version_tuple(prom) else "")  # fmt: skip
        return f"`gpustack upgrade --components` runs Prometheus {prom} with kube-prometheus-stack {chart}{back}"
    if j.component == "os":
        return "upgrade the host OS to a supported release, then `gpustack up`"
    return "a newer gpustack release"
