"""What ``gpustack status`` and ``doctor`` (K10-support-horizons) say about a judged component: a warning only
when there is a way out that changes something, else a note.

A component past or near its end of upstream support is a *warning* when gpustack (or the user, with a setting
gpustack names) can move it somewhere better: a newer pinned Kubernetes minor, a newer pinned containerd, runc or
GPU Operator than the cluster runs, the Prometheus gpustack deploys when it is supported and differs from the one
that runs (3.14 -> the 3.13 LTS is a move back), a newer NVIDIA driver branch the pinned GPU Operator supports and
that is itself supported, a host OS release. When the way out would reinstall what already runs (the
pinned GPU Operator's default driver nearing its end, with no newer branch that operator supports), it is a
*note* (``level: info``): doctor passes and says so, status lists it apart. An open security release
(gpustack/config/security_releases.py) is always a warning: installing it changes something. Pure: ``on`` is a parameter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from typing import Literal

from gpustack.config import horizons, lifecycle, pins, security_releases, support
from gpustack.config.lifecycle import Judged
from gpustack.config.model import Config

Level = Literal["warn", "info"]


@dataclass(frozen=True)
class Advice:
    judged: Judged
    level: Level
    text: str  # one line: what is wrong (or noted)
    fix: str  # the way out; "" for a note

    def to_json(self) -> dict[str, object]:
        return {**self.judged.to_json(), "level": self.level, "advice": self.text, "fix": self.fix}


def _newer(a: str, b: str) -> bool:
    return pins.version_tuple(a) > pins.version_tuple(b)


def driver_branches(on: date, chart: str | None = None) -> list[tuple[str, str, support.Verdict]]:
    """(driver, branch, verdict on ``on``) for every driver the GPU Operator ``chart`` (default: the pinned one)
    supports, newest first."""
    chart = chart or pins.CHARTS["gpu-operator"].version
    out = []
    for driver in pins.GPU_OPERATOR_DRIVERS.get(chart, ()):
        h = horizons.horizon_for("nvidia-driver", driver)
        verdict = support.judge(h, on) if h else support.Verdict("unknown", "no data", None, False, "no data")
        out.append((driver, horizons.branch_of("nvidia-driver", driver), verdict))
    return sorted(out, key=lambda d: pins.version_tuple(d[0]), reverse=True)


def way_out(j: Judged, on: date, cfg: Config | None = None) -> tuple[str, str]:
    """(the fix, "") when something gpustack offers moves ``j`` somewhere better; ("", why not) otherwise."""
    v = cfg.versions if cfg else None
    if j.component == "os":
        return lifecycle.upgrade_path(j, cfg), ""
    if j.component == "kubernetes":
        if any(_newer(m, j.branch) for m in pins.KUBERNETES):
            return lifecycle.upgrade_path(j, cfg), ""
        return "", f"Kubernetes {j.branch} is the newest minor gpustack pins"
    if j.component in ("containerd", "runc"):
        pinned = (v.containerd if v else pins.CONTAINERD_VERSION) if j.component == "containerd" else (
            v.runc if v else pins.RUNC_VERSION)  # fmt: skip
        if _newer(pinned, j.version):
            return lifecycle.upgrade_path(j, cfg), ""
        return "", f"gpustack pins {j.component} {pinned}, which is what runs"
    if j.component == "gpu-operator":
        pinned = pins.CHARTS["gpu-operator"].version
        if _newer(pinned, j.version):
            return lifecycle.upgrade_path(j, cfg), ""
        return "", f"GPU Operator {pinned} is the newest gpustack pins"
    if j.component == "nvidia-driver":
        return _driver_way_out(j, on)
    if j.component == "prometheus":
        # the way out is the Prometheus gpustack deploys, newer or not (3.14 -> the 3.13 LTS), when it is supported
        prom = lifecycle.prometheus_of(pins.CHARTS["kube-prometheus-stack"].version) or ""
        h = horizons.horizon_for("prometheus", prom) if prom else None
        if not prom or pins.version_tuple(prom) == pins.version_tuple(j.version):
            return "", f"gpustack deploys Prometheus {prom or '?'}, which is what runs"
        if h is None or support.judge(h, on).status != "supported":
            return "", f"gpustack deploys Prometheus {prom}, itself not within its support"
        return lifecycle.upgrade_path(j, cfg), ""
    return "", "a newer gpustack release is needed"


def _driver_way_out(j: Judged, on: date) -> tuple[str, str]:
    chart = pins.CHARTS["gpu-operator"].version
    default = pins.GPU_OPERATOR_DRIVER.get(chart, "")
    better = [(d, b, vd) for d, b, vd in driver_branches(on, chart)
              if _newer(b, j.branch) and vd.status == "supported"]  # fmt: skip
    if better:
        driver, branch, verdict = better[0]
        how = ("`gpustack upgrade --components` (its default)" if driver == default
               else "install it on the GPU hosts (gpu.driver: preinstalled)")  # fmt: skip
        return (f"driver {driver} ({branch}, {verdict.text}), which GPU Operator {chart} supports: {how}"), ""
    listed = ", ".join(f"{d} ({b}: {vd.status})" for d, b, vd in driver_branches(on, chart))
    return "", (f"no newer driver branch that GPU Operator {chart} supports is within its own support "
                f"(it lists {listed or 'none known'}); `gpustack upgrade --components` would reinstall {default}")  # fmt: skip


def advise(judged: Iterable[Judged], on: date, cfg: Config | None = None) -> list[Advice]:
    """Warnings (with their fix) and notes for the components of ``judged`` that need either: an open security
    release, or past/near the end of support by a dated source (estimates are left to ``gpustack version``)."""
    out = []
    for j in judged:
        if j.security:
            text = (f"open security release{'s' if len(j.security) > 1 else ''} {security_releases.summary(list(j.security))}"
                    f", not pinned by gpustack: {j.security[-1].why_not_pinned}")  # fmt: skip
            out.append(Advice(j, "warn", text, security_releases.install_hint(list(j.security))))
        if j.status not in ("past", "ending") or j.verdict.estimated:
            continue
        fix, why = way_out(j, on, cfg)
        if fix:
            out.append(Advice(j, "warn", j.verdict.text, fix))
        else:
            out.append(Advice(j, "info", f"{j.verdict.text}; nothing to do yet: {why}", ""))
    return out


def warnings(advice: Iterable[Advice]) -> list[Advice]:
    return [a for a in advice if a.level == "warn"]


def notes(advice: Iterable[Advice]) -> list[Advice]:
    return [a for a in advice if a.level == "info"]
