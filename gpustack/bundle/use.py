"""``gpustack up --bundle DIR``: check the bundle against the config, serve it, and point the run
at it.

Before anything else (no host contacted): bundle.json must list everything the config needs, and
agree with the pins (files by sha256, charts by version, images by digest where pinned, the
Kubernetes packages at their version, the os stage's packages in each OS repository); then every
listed file is read and hashed. Any mismatch stops the run with exit 2, naming the artifact.
After the read-only preflight, each node's OS release and architecture must be in the bundle.

Then the run's config points every download at the server (``sources:`` URL templates to the
bundle's layout, the Kubernetes repository to the bundle's, with the bundle's key fingerprint),
and the playbooks get the OS repository per release and the image archives to import
(``gpustack_bundle_*``); the cluster stage installs the charts from their archives.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gpustack.bundle import want
from gpustack.bundle.manifest import (
    Manifest,
    ManifestError,
    Problem,
    check_config,
    check_files,
    check_hosts,
    load,
    repo_packages,
    served_paths,
)
from gpustack.bundle.serve import BundleServer, listen_address
from gpustack.config.model import Config
from gpustack.console import Console, literal
from gpustack.errors import ConfigError

SHOWN = 20


class BundleMismatch(ConfigError):
    """The bundle does not hold what the config needs, or a file differs from its manifest (exit 2)."""


def _raise(directory: Path, problems: list[Problem], what: str) -> None:
    lines = [f"  {p}" for p in problems[:SHOWN]]
    if len(problems) > SHOWN:
        lines.append(f"  ... and {len(problems) - SHOWN} more")
    raise BundleMismatch(
        f"the bundle {directory} {what}: {len(problems)} problem(s); nothing was changed\n" + "\n".join(lines),
        hint=_hint(directory),
    )


def _hint(directory: Path) -> str:
    return (
        f"run `gpustack bundle create --out {directory}` again with this config on the connected machine "
        "(it fetches what is missing or damaged), then copy the bundle over again"
    )


def verify(cfg: Config, directory: Path, *, playbooks: Path) -> Manifest:
    """The bundle holds what ``cfg`` needs and every file matches its manifest; else BundleMismatch."""
    try:
        manifest = load(directory)
    except ManifestError as exc:
        raise BundleMismatch(f"{exc}; nothing was changed", hint=_hint(directory)) from None
    problems = check_config(cfg, manifest)
    for rid in manifest.os:
        try:
            release = want.parse_release(rid)
        except ValueError as exc:
            problems.append(Problem("bundle", str(exc)))
            continue
        have = repo_packages(manifest, rid)
        problems += [
            Problem(f"package {p}", f"not in the bundle's {rid} repository")
            for p in want.os_apt_want(cfg, playbooks, release).packages
            if p not in have
        ]
    if problems:
        _raise(directory, problems, "does not hold what this config needs")
    damaged = check_files(directory, manifest)
    if damaged:
        _raise(directory, damaged, "has files that differ from its manifest")
    return manifest


def bundle_config(cfg: Config, url: str, manifest: Manifest, address: str) -> Config:
    """``cfg`` with every download pointed at the bundle server."""
    minor_repo = want.KUBERNETES_REPO
    key = manifest.find("apt-key", "Release.key", repo=minor_repo.format(minor=cfg.versions.kubernetes_minor))
    assert key is not None  # verify() checked it
    sources = {field: f"{url}/{want.FILE_LAYOUT[name]}" for name, field in want.SOURCE_FIELD.items()}
    sources.update(
        kubernetes_apt_url=f"{url}/apt/{minor_repo}/",
        kubernetes_apt_key_url=f"{url}/apt/{minor_repo}/Release.key",
        kubernetes_apt_key_fingerprint=key.fingerprint,
    )
    proxy = cfg.proxy.model_copy(update={"no_proxy": [*cfg.proxy.no_proxy, address]})
    return cfg.model_copy(
        update={
            "sources": cfg.sources.model_copy(update=sources),
            "proxy": proxy,
        }
    )


def bundle_extravars(url: str, manifest: Manifest, address: str) -> dict[str, Any]:
    """The playbooks' view of the bundle: its OS repositories and the image archives to import."""
    repos = {}
    for rid in manifest.os:
        key = manifest.find("apt-key", "Release.key", repo=rid)
        if key is not None:
            repos[rid] = {"url": f"{url}/apt/{rid}/", "key_url": f"{url}/{quote(key.path)}", "key_sha256": key.sha256}
    images = [
        {
            "ref": a.name,
            "digest": a.digest,
            "key": f"{a.name}@{a.digest}",  # how `ctr images list` shows it (name, digest)
            "arch": a.arch,
            "nodes": a.nodes or "all",
            "url": f"{url}/{quote(a.path)}",
            "sha256": a.sha256,
            "file": Path(a.path).name,
        }
        for a in sorted(manifest.artifacts, key=lambda a: (a.name, a.arch))
        if a.kind == "image"
    ]
    return {
        "gpustack_bundle_os_repos": repos,
        "gpustack_bundle_images": images,
        "gpustack_bundle_host": address,
        # nodes without a route out still list their usual sources; python-apt (the apt module) fails
        # a refresh when one is unreachable, apt-get only warns: the roles refresh with apt-get
        "gpustack_apt_update_cache": False,
    }


def chart_archives(directory: Path, manifest: Manifest, cfg: Config) -> dict[str, Path]:
    out = {}
    for c in want.charts(cfg):
        artifact = manifest.find("chart", c.name, version=c.version)
        if artifact is not None:
            out[c.name] = (directory / artifact.path).resolve()
    return out


@dataclass
class Session:
    """A verified bundle being served: the run's config, playbook variables and chart archives."""

    directory: Path
    manifest: Manifest
    server: BundleServer
    config: Config
    extravars: dict[str, Any]
    charts: dict[str, Path] = field(default_factory=dict)

    def check_hosts(self, facts: Mapping[str, Mapping[str, Any]]) -> None:
        problems = check_hosts(self.manifest, facts)
        if problems:
            _raise(self.directory, problems, "does not fit the nodes")

    def summary(self) -> str:
        ok = [r for r in self.server.requests if r.status == 200]
        clients = sorted({r.client for r in ok})
        size = sum(r.size for r in ok) / (1 << 20)
        missing = sorted({r.path for r in self.server.requests if r.status != 200})
        return (
            f"bundle: served {len(ok)} file(s), {size:.1f} MiB, to {len(clients)} host(s)"
            + (f" ({', '.join(clients)})" if clients else "")
            + (f"; refused {len(missing)} path(s) not in the bundle: {', '.join(missing[:5])}" if missing else "")
        )


@contextmanager
def session(
    cfg: Config, directory: Path, console: Console, *, playbooks: Path, listen: str | None = None
) -> Iterator[Session]:
    """Verify the bundle, then serve it for the duration of the block."""
    directory = directory.expanduser().resolve()
    console.print(f"bundle: checking {literal(directory)} against the config (every file's sha256)")
    manifest = verify(cfg, directory, playbooks=playbooks)
    address, port = listen_address(cfg, listen)
    with BundleServer(directory, served_paths(manifest), address, port) as server:
        url = server.url
        console.print(
            f"bundle: {len(manifest.artifacts)} artifacts verified; serving them on {literal(url)} for this run"
        )
        run_cfg = bundle_config(cfg, url, manifest, address)
        s = Session(
            directory,
            manifest,
            server,
            run_cfg,
            bundle_extravars(url, manifest, address),
            chart_archives(directory, manifest, cfg),
        )
        try:
            yield s
        finally:
            console.info(s.summary())
