"""The online half of scripts/pins_report.py: what upstream has released now, read-only, for a maintainer's machine.

For every pinned component with a public release list, the stable releases newer than the pin (patches of the pinned
branch and newer branches), and for the newest patch of the pinned branch of each checksummed download (containerd,
runc, Helm, the CNI plugins, crictl) the sha256 its release publishes, as *one* source: gpustack pins a checksum only from two
(docs/maintaining.md). Kubernetes: dl.k8s.io's ``stable-<minor>.txt`` for every pinned minor and the next one.

Nothing is written and nothing is trusted: the answers are printed for a person to act on. ``fetch`` is a parameter
(tests pass recorded answers, tests/fixtures/pins-online/); :func:`http_get` is the real one (urllib, 20 s timeout,
``GITHUB_TOKEN`` sent when set, for GitHub's rate limit).
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable
from typing import Any

from gpustack.config import pins
from gpustack.config.support import version_tuple

Fetch = Callable[[str], str]

GITHUB = "https://api.github.com/repos/{repo}/releases?per_page=100"
#: component -> its GitHub repository (release list: tag_name, published_at, draft, prerelease)
REPOS: dict[str, str] = {
    "containerd": "containerd/containerd",
    "runc": "opencontainers/runc",
    "helm": "helm/helm",
    "flannel": "flannel-io/flannel",
    "gpu-operator": "NVIDIA/gpu-operator",
    "prometheus": "prometheus/prometheus",
    "cni-plugins": "containernetworking/plugins",
    "crictl": "kubernetes-sigs/cri-tools",
}
KUBERNETES_STABLE = "https://dl.k8s.io/release/stable-{minor}.txt"
#: the sha256 files each release publishes (one per arch, or one for all: runc's, PGP-signed)
CHECKSUM_FILES: dict[str, str] = {
    "containerd": pins.CONTAINERD_URL + ".sha256sum",
    "runc": "https://github.com/opencontainers/runc/releases/download/v{version}/runc.sha256sum",
    "helm": pins.HELM_URL + ".sha256sum",
    "cni-plugins": pins.CNI_PLUGINS_URL + ".sha256",
    "crictl": pins.CRICTL_URL + ".sha256",
}
ARCHES = ("amd64", "arm64")


def http_get(url: str) -> str:  # pragma: no cover - the network; tests pass recorded answers
    headers = {"User-Agent": "gpustack-pins-report", "Accept": "application/vnd.github+json"}
    token = os.environ.get("GITHUB_TOKEN", "")
    if token and url.startswith("https://api.github.com/"):
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=20) as resp:
        return str(resp.read().decode("utf-8"))


def recorded(directory: str) -> Fetch:
    """A fetch that answers from recorded files: ``index.json`` in ``directory`` maps each URL to its file; a URL
    not recorded raises OSError (as an unreachable host would)."""
    from pathlib import Path

    root = Path(directory)
    index = json.loads((root / "index.json").read_text(encoding="utf-8"))

    def fetch(url: str) -> str:
        if url not in index:
            raise OSError(f"not recorded: {url}")
        name = str(index[url])
        return (root / name).read_text(encoding="utf-8")

    return fetch


def pinned() -> dict[str, str]:
    """component -> the version gpustack pins (the GPU Operator's chart tag; Prometheus: what the chart deploys)."""
    return {
        "containerd": pins.CONTAINERD_VERSION,
        "runc": pins.RUNC_VERSION,
        "helm": pins.HELM_VERSION,
        "flannel": pins.FLANNEL_VERSION,
        "gpu-operator": pins.CHARTS["gpu-operator"].version,
        "prometheus": pins.KUBE_PROMETHEUS_STACK_PROMETHEUS[1],
        "cni-plugins": pins.CNI_PLUGINS_VERSION,
        "crictl": pins.CRICTL_VERSION,
    }


def stable_releases(raw: str) -> list[tuple[str, str]]:
    """(version without the v, published day) of the stable releases in a GitHub release list, newest first."""
    out = []
    for rel in json.loads(raw):
        if not isinstance(rel, dict) or rel.get("draft") or rel.get("prerelease"):
            continue
        tag = str(rel.get("tag_name") or "").lstrip("v")
        if not tag or "-" in tag or len(version_tuple(tag)) < 3:
            continue
        out.append((tag, str(rel.get("published_at") or "")[:10]))
    return sorted(out, key=lambda r: version_tuple(r[0]), reverse=True)


def sha256_of(raw: str, filename: str) -> str:
    """The hash for ``filename`` in a sha256sum file ("<hex>  <name>" lines, or one bare hash)."""
    for line in raw.splitlines():
        parts = line.split()
        if len(parts) == 1 and len(parts[0]) == 64:
            return parts[0]
        if len(parts) >= 2 and parts[-1].lstrip("*").endswith(filename):
            return parts[0]
    return ""


def _checksums(component: str, version: str, fetch: Fetch) -> dict[str, str]:
    out = {}
    for arch in ARCHES:
        url = CHECKSUM_FILES[component].format(version=version, arch=arch)
        name = url.rsplit("/", 1)[1]
        filename = f"runc.{arch}" if component == "runc" else name.removesuffix(".sha256sum").removesuffix(".sha256")
        try:
            out[arch] = sha256_of(fetch(url), filename)
        except OSError as exc:
            out[arch] = f"unreadable: {exc}"
    return out


def discover(fetch: Fetch = http_get) -> list[dict[str, Any]]:
    """One row per component: the pin, the newer stable releases upstream lists, the newest patch of the pinned
    branch and (for downloads gpustack checksums) the sha256 that patch's release publishes; ``error`` when the list
    could not be read."""
    rows: list[dict[str, Any]] = []
    for component, have in pinned().items():
        row: dict[str, Any] = {"component": component, "pinned": have, "newer": [], "branch_newest": have}
        try:
            releases = stable_releases(fetch(GITHUB.format(repo=REPOS[component])))
        except (OSError, ValueError) as exc:
            rows.append({**row, "error": str(exc)})
            continue
        pin = version_tuple(have)
        newer = [(v, day) for v, day in releases if version_tuple(v) > pin]
        row["newer"] = [{"version": v, "published": day} for v, day in newer]
        same = [v for v, _ in newer if version_tuple(v)[:2] == pin[:2]]
        if same:
            row["branch_newest"] = same[0]
            if component in CHECKSUM_FILES:
                row["sha256"] = _checksums(component, same[0], fetch)
                row["sha256_note"] = "one source (the release's own file): pin only with a second independent source"
        rows.append(row)
    minors = sorted(pins.KUBERNETES, key=version_tuple)
    newest = version_tuple(minors[-1])
    for minor in [*minors, f"{newest[0]}.{newest[1] + 1}"]:
        row = {"component": f"kubernetes {minor}", "pinned": pins.KUBERNETES.get(minor, "-")}
        try:
            row["upstream"] = fetch(KUBERNETES_STABLE.format(minor=minor)).strip().lstrip("v")
        except OSError as exc:
            row["error"] = str(exc)
        rows.append(row)
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    out = ["Upstream now (read-only; GitHub release lists, dl.k8s.io stable-<minor>.txt, release sha256 files):"]
    for r in rows:
        if "error" in r:
            pinned_text = f" {r['pinned']}" if r["pinned"] != "-" else ""
            out.append(f"  {r['component']}{pinned_text}: could not read upstream ({r['error']})")
        elif r["component"].startswith("kubernetes "):
            behind = r["upstream"] != r["pinned"]
            out.append(f"  {r['component']}: pinned {r['pinned']}, upstream stable {r['upstream']}"
                       + (" <- newer" if behind and r["pinned"] != "-" else " (not pinned)" if r["pinned"] == "-"
                          else ""))  # fmt: skip
        else:
            newer = ", ".join(f"{n['version']} ({n['published']})" for n in r["newer"][:6]) or "none"
            out.append(f"  {r['component']} {r['pinned']}: newer upstream: {newer}")
            if "sha256" in r:
                sums = ", ".join(f"{arch} {h}" for arch, h in r["sha256"].items())
                out.append(f"    {r['branch_newest']} sha256 from its release: {sums} ({r['sha256_note']})")
    return "\n".join(out)
