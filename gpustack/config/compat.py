"""The compatibility matrix applied to a config: pure functions over gpustack/config/pins.py.

:func:`config_problems` is what config validation refuses (exit 2, naming the field);
:func:`matrix_rows` and :func:`artifacts` are what ``gpustack version`` and ``plan`` print.
Per-host refusals (cgroup v1, an old containerd already installed, missing kernel headers)
need the host's facts and live in :mod:`gpustack.checks.compat`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from gpustack.config import lifecycle, pins, support
from gpustack.config.model import Config

ARCHES = ("amd64", "arm64")


@dataclass(frozen=True)
class Problem:
    path: tuple[str | int, ...]
    message: str


def line(cfg: Config) -> pins.KubernetesLine:
    return pins.KUBERNETES_LINES[cfg.versions.kubernetes_minor]


def containerd_sha256(cfg: Config) -> dict[str, str]:
    v = cfg.versions
    return dict(v.containerd_sha256 or pins.CONTAINERD_SHA256.get(v.containerd, {}))


def runc_sha256(cfg: Config) -> dict[str, str]:
    v = cfg.versions
    return dict(v.runc_sha256 or pins.RUNC_SHA256.get(v.runc, {}))


def helm_sha256(cfg: Config) -> dict[str, str]:
    v = cfg.versions
    return dict(v.helm_sha256 or pins.HELM_SHA256.get(v.helm, {}))


def cni_plugins_sha256(cfg: Config) -> dict[str, str]:
    v = cfg.versions
    return dict(v.cni_plugins_sha256 or pins.CNI_PLUGINS_SHA256.get(v.cni_plugins, {}))


def crictl_sha256(cfg: Config) -> dict[str, str]:
    v = cfg.versions
    return dict(v.crictl_sha256 or pins.CRICTL_SHA256.get(v.crictl, {}))


def etcd_sha256(cfg: Config) -> dict[str, str]:
    """etcd's release archive (etcdutl for `etcd restore` where the etcd image lacks it): the pinned release's, or
    versions.etcd_sha256 for a mirror's own build."""
    return dict(cfg.versions.etcd_sha256 or pins.ETCD_SHA256.get(pins.ETCD_VERSION, {}))


def sandbox_image(cfg: Config) -> str:
    return pins.PAUSE_IMAGE.format(tag=line(cfg).pause)


def distribution_allowed(minor: str, on: date | None = None) -> list[pins.OsRelease]:
    """The OS releases whose own containerd is new enough for ``minor`` and not past its end of upstream support on
    ``on`` (default today): gpustack never installs a runtime its own doctor (K10) flags."""
    need = pins.KUBERNETES_LINES[minor].containerd_min
    day = on or support.today()
    return [o for o in pins.OS_RELEASES
            if distribution_ok(o.distribution_containerd, need) and not distribution_past(o, day)]  # fmt: skip


def distribution_past(o: pins.OsRelease, on: date) -> bool:
    """The OS archive's containerd branch is past its end of upstream support on ``on``."""
    return lifecycle.judge("containerd", o.distribution_containerd + ".0", on).status == "past"


def distribution_ok(shipped_minor: str, need: str) -> bool:
    """An OS archive's containerd line (e.g. '1.7', patched within the line) against a minimum."""
    return pins.version_tuple(shipped_minor)[:2] >= pins.version_tuple(need)[:2]


def config_problems(cfg: Config) -> list[Problem]:
    """Combinations the matrix refuses before any host is contacted."""
    v = cfg.versions
    minor = v.kubernetes_minor
    kl = pins.KUBERNETES_LINES.get(minor)
    out: list[Problem] = []
    if kl is None:  # pragma: no cover - the pin table lists a line for every pinned minor
        return [Problem(("versions", "kubernetes"), f"Kubernetes {minor} has no line in the compatibility matrix")]
    supported = pins.gpu_operator_supports(v.gpu_operator, minor)
    widest = pins.GPU_OPERATOR_VALIDATED.get(v.gpu_operator)
    if supported is False and not any(
        pins.gpu_operator_supports(v.gpu_operator, minor, o.id, o.version) for o in pins.OS_RELEASES
    ):
        assert widest is not None
        out.append(
            Problem(
                ("versions", "kubernetes"),
                f"GPU Operator {v.gpu_operator} is validated on Kubernetes "
                f"{widest.kubernetes_min}-{widest.kubernetes_max}, not {minor}",
            )
        )
    if v.containerd_source == "release":
        if not pins.at_least(v.containerd, kl.containerd_min):
            out.append(
                Problem(
                    ("versions", "containerd"),
                    f"containerd {v.containerd} is too old for Kubernetes {minor} (needs {kl.containerd_min} or newer)",
                )
            )
        refused = pins.containerd_refusal(v.containerd, minor)
        if refused:
            out.append(Problem(("versions", "containerd"), refused))
        if not containerd_sha256(cfg):
            out.append(
                Problem(
                    ("versions", "containerd"),
                    f"containerd {v.containerd} has no pinned checksum: set versions.containerd_sha256 {{amd64: ..., arm64: ...}}",
                )
            )
        if not runc_sha256(cfg):
            out.append(
                Problem(
                    ("versions", "runc"),
                    f"runc {v.runc} has no pinned checksum: set versions.runc_sha256 {{amd64: ..., arm64: ...}}",
                )
            )
    for name, field, version, sums in (("CNI plugins", "cni_plugins", v.cni_plugins, cni_plugins_sha256(cfg)),
                                       ("crictl", "crictl", v.crictl, crictl_sha256(cfg))):  # fmt: skip
        if not sums:
            out.append(Problem(("versions", field), f"{name} {version} has no pinned checksum: set "
                               f"versions.{field}_sha256 {{amd64: ..., arm64: ...}}"))  # fmt: skip
    if v.containerd_source != "release" and not distribution_allowed(minor):
        ships = ", ".join(f"{o.name} {o.distribution_containerd}" for o in pins.OS_RELEASES)
        out.append(
            Problem(
                ("versions", "containerd_source"),
                f"Kubernetes {minor} needs containerd {kl.containerd_min} or newer on a branch still in upstream "
                f"support; no supported OS ships one ({ships}): use containerd_source: release",
            )
        )
    return out


def matrix_rows(cfg: Config | None = None) -> list[list[str]]:
    """One row per Kubernetes minor (only the chosen one with a config): minor, patch, minimum
    containerd, cgroup v2, sandbox image, GPU Operator validated range, OS releases and their
    containerd."""
    chart = cfg.versions.gpu_operator if cfg else pins.CHARTS["gpu-operator"].version
    rng = pins.GPU_OPERATOR_VALIDATED.get(chart)
    minors = [cfg.versions.kubernetes_minor] if cfg else list(pins.KUBERNETES_LINES)
    rows = []
    for minor in minors:
        kl = pins.KUBERNETES_LINES[minor]
        patch = cfg.versions.kubernetes if cfg else pins.KUBERNETES[minor]
        operator = (
            "unknown chart"
            if rng is None
            else ("yes" if pins.gpu_operator_supports(chart, minor) else "no")
            + f" ({rng.kubernetes_min}-{rng.kubernetes_max})"
        )
        allowed = {o.name for o in distribution_allowed(minor)}
        own = [o.name for o in pins.OS_RELEASES if o.name in allowed]
        day = support.today()
        too_old = ", ".join(
            f"{o.name}'s {o.distribution_containerd}" + (": past its end of support" if distribution_past(o, day) and
                                                          distribution_ok(o.distribution_containerd, kl.containerd_min)
                                                          else "")
            for o in pins.OS_RELEASES if o.name not in allowed
        )  # fmt: skip
        # every supported OS runs every minor with containerd from the release archives (the default); only the
        # OS's own containerd (containerd_source: distribution) depends on the release
        oses = (
            ", ".join(o.name for o in pins.OS_RELEASES)
            + ": all, with containerd from the release archives (the default); with the OS's own containerd "
            + f"(containerd_source: distribution): {', '.join(own) or 'none'}"
            + (f" (not: {too_old})" if too_old else "")
        )
        rows.append(
            [
                minor,
                patch,
                f">= {kl.containerd_min}, one of {', '.join(f + '+' for f in kl.containerd_recommended)} "
                "(containerd RELEASES.md; newer branches refused)"
                + ("; upgrade-only: past its end of life, pinned to add nodes and upgrade" if kl.upgrade_only else ""),
                "required" if kl.cgroup_v2_required else "recommended",
                pins.PAUSE_IMAGE.format(tag=kl.pause),
                f"{chart}: {operator}",
                oses,
            ]
        )
    return rows


MATRIX_HEADERS = [
    "kubernetes",
    "patch",
    "containerd",
    "cgroup v2",
    "sandbox image",
    "GPU Operator validated",
    "OS releases",
]


@dataclass(frozen=True)
class Artifact:
    """One file a run downloads (or renders): what, which version, where from, and how it is verified."""

    name: str
    version: str
    arch: str
    url: str
    checksum: str  # "sha256:<hex>", "gpg:<fingerprint>", or "not pinned: <why>"


def artifacts(cfg: Config, arches: tuple[str, ...] = ARCHES) -> list[Artifact]:
    """Every file a run downloads for the config, with its checksum (images and charts: see bundle)."""
    v, s = cfg.versions, cfg.sources
    minor = v.kubernetes_minor
    out: list[Artifact] = []
    if v.containerd_source == "release":
        cd, rc = containerd_sha256(cfg), runc_sha256(cfg)
        for arch in arches:
            out.append(
                Artifact(
                    "containerd",
                    v.containerd,
                    arch,
                    s.containerd_url.format(version=v.containerd, arch=arch),
                    f"sha256:{cd[arch]}" if arch in cd else "not pinned",
                )
            )
        for arch in arches:
            out.append(
                Artifact(
                    "runc",
                    v.runc,
                    arch,
                    s.runc_url.format(version=v.runc, arch=arch),
                    f"sha256:{rc[arch]}" if arch in rc else "not pinned",
                )
            )
    for name, version, url, sums in (("cni-plugins", v.cni_plugins, s.cni_plugins_url, cni_plugins_sha256(cfg)),
                                     ("crictl", v.crictl, s.crictl_url, crictl_sha256(cfg)),
                                     ("etcd", pins.ETCD_VERSION, s.etcd_url, etcd_sha256(cfg))):  # fmt: skip
        out += [Artifact(name, version, arch, url.format(version=version, arch=arch),
                         f"sha256:{sums[arch]}" if arch in sums else "not pinned") for arch in arches]  # fmt: skip
    out.append(
        Artifact(
            "kubernetes apt key",
            minor,
            "all",
            s.kubernetes_apt_key_url.format(minor=minor),
            f"gpg:{s.kubernetes_apt_key_fingerprint}",
        )
    )
    hs = helm_sha256(cfg)
    for arch in arches:
        out.append(
            Artifact(
                "helm",
                v.helm,
                arch,
                s.helm_url.format(version=v.helm, arch=arch),
                f"sha256:{hs[arch]}" if arch in hs else "not pinned",
            )
        )
    return out


def rendered(cfg: Config) -> list[Artifact]:
    """What gpustack writes itself where others download a file: Flannel's manifest (its sha256 is
    that of the rendering for this config; ``url`` names the images it runs)."""
    from gpustack.render import flannel  # the renderer imports the config model

    return [
        Artifact(
            "kube-flannel.yml",
            cfg.versions.flannel,
            "all",
            "rendered by gpustack, images: " + ", ".join(flannel.images(cfg)),
            f"sha256:{flannel.manifest_sha256(cfg)}",
        )
    ]


def pin_rows(cfg: Config | None = None, on: date | None = None) -> list[list[str]]:
    """component -> version, the end of its upstream support and how that stands on ``on`` (default: today), for
    the config (or the pin table's defaults)."""
    judged = lifecycle.pin_support(cfg, on or support.today())
    source = cfg.versions.containerd_source if cfg else "release"
    rows = []
    for j in judged:
        version = j.version + (f" ({source})" if j.component == "containerd" else "")
        if j.component == "kubernetes" and not cfg and j.version == pins.KUBERNETES[pins.KUBERNETES_DEFAULT]:
            version += " (default)"
        if j.component == "kube-prometheus-stack" and (prom := lifecycle.prometheus_of(j.version)):
            version += f" (Prometheus {prom})"  # what its support is judged by
        rows.append([lifecycle.pin_label(j), version, j.verdict.ends, _status_cell(j)])
    return rows


def _status_cell(j: lifecycle.Judged) -> str:
    cell = _support_cell(j)
    if j.security:
        newest = j.security[-1]
        cell += (f"; OPEN SECURITY RELEASE {', '.join(r.version for r in j.security)} not pinned "
                 f"({', '.join(f for r in j.security for f in r.fixes)}): {newest.why_not_pinned}")  # fmt: skip
    return cell


def _support_cell(j: lifecycle.Judged) -> str:
    v = j.verdict
    if v.status == "past":
        return "PAST END OF SUPPORT" + (f" ({-v.days} days)" if v.days is not None else "")
    if v.status == "ending":
        if v.days is None and not v.estimated:  # deprecated upstream: critical fixes only, no date
            return f"DEPRECATED ({v.ends})"
        if v.days is not None and v.days < 0 and v.estimated:  # the expected date has passed: say so, not "due"
            return "ENDING (the expected date has passed: check upstream)"
        when = f"{v.days} days" if v.days is not None and v.days >= 0 else "due"
        return f"ENDING ({when}{', estimate' if v.estimated else ''})"
    if v.status == "unknown":
        return "no date published" if v.ends == "no end of support published" else v.ends
    return "supported" + (f" ({v.days} days)" if v.days is not None else "")


def report(cfg: Config | None = None, on: date | None = None) -> dict[str, object]:
    """What ``gpustack version`` and ``plan`` print, as data (also the JSON output)."""
    from gpustack.config.model import Config as _Config

    full = cfg or _Config(nodes=[])
    day = on or support.today()
    return {
        "today": day.isoformat(),
        "pins": [
            {**j.to_json(), "component": lifecycle.pin_label(j), "checksums": _checksum_source(j)}
            for j in lifecycle.pin_support(cfg, day)
        ],
        "matrix": [dict(zip(MATRIX_HEADERS, row, strict=True)) for row in matrix_rows(cfg)],
        "os": [j.to_json() for j in lifecycle.os_support(day)],
        "artifacts": [a.__dict__ for a in artifacts(full)],
        "rendered": [a.__dict__ for a in rendered(full)],
    }


def _checksum_source(j: lifecycle.Judged) -> str | None:
    """Where a pinned download's two checksums come from (None: not a checksummed download)."""
    return pins.CHECKSUM_SOURCES.get((j.component, j.version))


def version_tables(cfg: Config | None, on: date | None = None) -> list[tuple[str, list[str], list[list[str]]]]:
    """What `gpustack version` and `gpustack plan up` print: the pins with their end of support (judged on
    ``on``, default today), the matrix line(s), the host OS releases' support, the artifacts a run downloads and
    the manifests gpustack renders, as (title, columns, rows) tables."""
    arts = artifacts(cfg or Config(nodes=[]))
    day = on or support.today()
    return [
        (
            f"pins on {day.isoformat()} (end of upstream support; `gpustack version -o json` names each source)",
            ["component", "version", "support ends", "status"],
            pin_rows(cfg, day),
        ),
        ("compatibility matrix" + (" (the chosen Kubernetes minor)" if cfg else ""), MATRIX_HEADERS, matrix_rows(cfg)),
        (
            "host OS support",
            ["os", "support ends", "status"],
            [[j.version, j.verdict.ends, _status_cell(j)] for j in lifecycle.os_support(day)],
        ),
        (
            "artifacts (downloaded by a run, verified before use)",
            ["artifact", "version", "arch", "checksum", "url"],
            [[a.name, a.version, a.arch, a.checksum, a.url] for a in arts],
        ),
        (
            "rendered by gpustack (nothing downloaded)",
            ["manifest", "version", "checksum (of this rendering)", "source"],
            [[a.name, a.version, a.checksum, a.url] for a in rendered(cfg or Config(nodes=[]))],
        ),
    ]
