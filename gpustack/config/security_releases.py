"""Security releases gpustack knows of and does not pin, and what they mean for a pin or a running version.

A security release newer than what a cluster runs (or what gpustack pins), on the same branch, is an *open
security release*: ``gpustack version`` names it beside the pin, ``gpustack status`` and ``doctor``
(K10-support-horizons) warn about every node that runs an older patch of the branch, naming the CVEs, why gpustack
does not pin it, and how to install it anyway (``versions.containerd`` plus ``versions.containerd_sha256`` from the
release's own ``.sha256sum`` files, then ``gpustack up --only containerd``). Pure data and pure functions; no
network. When a release gets its second checksum source, pin it in gpustack/config/pins.py and drop it here
(docs/maintaining.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpustack.config.pins import version_tuple


@dataclass(frozen=True)
class SecurityRelease:
    """A release that fixes vulnerabilities in its branch, with the public sources that say so."""

    component: str
    version: str
    released: str  # YYYY-MM-DD
    fixes: tuple[str, ...]  # CVE / GHSA ids
    sources: tuple[str, ...]  # public URLs
    why_not_pinned: str
    #: the files whose sha256 the user checks before setting it (one per arch, {arch})
    checksum_url: str = ""

    @property
    def branch(self) -> str:
        return ".".join(str(p) for p in version_tuple(self.version)[:2])

    def to_json(self) -> dict[str, object]:
        return {"version": self.version, "released": self.released, "fixes": list(self.fixes),
                "sources": list(self.sources), "pinned": False, "why_not_pinned": self.why_not_pinned}  # fmt: skip


_CTD_SHA = (
    "https://github.com/containerd/containerd/releases/download/v{v}/containerd-{v}-linux-{{arch}}.tar.gz.sha256sum"
)

#: containerd 2.3.5 and 2.3.6, the two security releases after the pinned 2.3.4 (release notes:
#: https://github.com/containerd/containerd/releases/tag/v2.3.5 and .../v2.3.6). Their checksums: the project's
#: rule is two independent public sources per pinned checksum (docs/decisions.md). Kubespray's table
#: (roles/kubespray_defaults/vars/main/checksums.yml) ends at 2.3.4 in the newest copy readable here (46dbdd39,
#: 2026-08-21); 2.3.5's both arches are pinned by one public project (jptrs93/opsagent
#: backend/lib/runtimebin/runtimebin.go at 73812c67), its amd64 one also by an unnamed lab script; 2.3.6's by one
#: public provisioner script only.
SECURITY_RELEASES: tuple[SecurityRelease, ...] = (
    SecurityRelease(
        "containerd",
        "2.3.5",
        "2026-09-04",
        ("CVE-2026-53495 (GHSA-7jxh-36q5-gcqv)", "GHSA-rp3h-jf77-q9p4"),
        (
            "https://github.com/containerd/containerd/releases/tag/v2.3.5",
            "https://github.com/containerd/containerd/security/advisories/GHSA-7jxh-36q5-gcqv",
            "https://github.com/containerd/containerd/security/advisories/GHSA-rp3h-jf77-q9p4",
            "https://github.com/moby/moby/pull/53589",
        ),
        "its arm64 sha256 has one public source only (gpustack pins a checksum from two)",
        _CTD_SHA.format(v="2.3.5"),
    ),
    SecurityRelease(
        "containerd",
        "2.3.6",
        "2026-09-24",
        ("CVE-2026-53493 (GHSA-pg57-6jwg-q645)",),
        (
            "https://github.com/containerd/containerd/releases/tag/v2.3.6",
            "https://github.com/containerd/containerd/security/advisories/GHSA-pg57-6jwg-q645",
        ),
        "its sha256 has one public source only (gpustack pins a checksum from two)",
        _CTD_SHA.format(v="2.3.6"),
    ),
)


def open_releases(component: str, version: str) -> list[SecurityRelease]:
    """The known security releases of ``version``'s branch newer than ``version`` (oldest first)."""
    have = version_tuple(version)
    if len(have) < 2:
        return []
    return sorted(
        (s for s in SECURITY_RELEASES
         if s.component == component and version_tuple(s.version)[:2] == have[:2] and version_tuple(s.version) > have),
        key=lambda s: version_tuple(s.version),
    )  # fmt: skip


def summary(releases: list[SecurityRelease]) -> str:
    """ "containerd 2.3.5 (2026-09-04: CVE-..., GHSA-...), 2.3.6 (...)": what is open, for one line."""
    return ", ".join(f"{s.version} ({s.released}: {', '.join(s.fixes)})" for s in releases)


def install_hint(releases: list[SecurityRelease]) -> str:
    """How to install the newest of ``releases`` although gpustack does not pin it (containerd only has one)."""
    if not releases:
        return ""
    newest = releases[-1]
    if newest.component != "containerd":  # pragma: no cover - only containerd's are listed
        return f"install {newest.component} {newest.version}"
    return (f"set versions.containerd: {newest.version} and versions.containerd_sha256 {{amd64: ..., arm64: ...}} "
            f"from {newest.checksum_url} (check it against a second source), then `gpustack up --only containerd`")  # fmt: skip
