"""``gpustack bundle create``: fetch everything a run of the config needs into one directory, on
a connected machine.

Order: the files (verified against their pinned sha256 as they arrive), the charts (``helm
pull`` at the pinned versions), the apt packages (:mod:`gpustack.bundle.apt`: resolved by apt
for each OS release and architecture, published as signed flat repositories), then the images:
those the pins name (Flannel's among them: gpustack renders its manifest) and those the fetched
artifacts name (``helm template`` of each chart with gpustack's values, ``kubeadm config images list`` from the fetched kubeadm), each
an OCI archive (:mod:`gpustack.bundle.registry`).

Resumable: ``bundle.json`` is rewritten (atomically) after every artifact, and an artifact whose
file is present with its recorded sha256 (and still agrees with the pins) is kept, not fetched
again. Every file is written under a temporary name and renamed when complete and verified. At the
end of a complete run, artifacts the config no longer needs are removed.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import requests
import yaml

from gpustack.bundle import apt, fetch, want
from gpustack.bundle.manifest import Artifact, Manifest, intact, load, save, sha256_file
from gpustack.bundle.registry import Registry
from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.console import Console, literal
from gpustack.constants import BUNDLE_MANIFEST, NAMESPACES
from gpustack.errors import GpustackError, UsageError

ARCH_OF_MACHINE = {"x86_64": "amd64", "aarch64": "arm64"}


class BundleError(GpustackError):
    """A bundle could not be made (names the artifact)."""

    exit_code = 1


@dataclass(frozen=True)
class CreateOptions:
    out: Path
    releases: tuple[pins.OsRelease, ...]
    arches: tuple[str, ...] = ("amd64",)
    #: helm to pull and template charts with (default: gpustack's own, then PATH)
    helm: str | None = None
    #: kubeadm for `config images list` (default: the bundle's own kubeadm package, for this machine)
    kubeadm: str | None = None


@dataclass
class CreateResult:
    manifest: Manifest
    fetched: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0


class _Bundle:
    """The bundle directory and its manifest, saved after every artifact."""

    def __init__(self, out: Path, manifest: Manifest, console: Console, result: CreateResult) -> None:
        self.out, self.manifest, self.console, self.result = out, manifest, console, result
        self.touched: set[str] = set()

    def ensure(
        self,
        key: tuple[str, str, str, str, str],
        label: str,
        make: Callable[[], Artifact],
        *,
        valid: Callable[[Artifact], bool] = lambda a: True,
    ) -> Artifact:
        kind, name, version, arch, repo = key
        found = self.manifest.find(kind, name, version=version, arch=arch, repo=repo)
        if found is not None and valid(found) and intact(self.out, found):
            self.result.kept.append(label)
            self.console.debug(f"kept {label} (present, sha256 verified)")
        else:
            found = make()
            self.manifest.put(found)
            save(self.out, self.manifest)
            self.result.fetched.append(label)
            self.console.print(f"  fetched {literal(label)} [dim]{_size(found.size)}[/dim]")
        self.touched.add(found.path)
        return found

    def record(self, artifact: Artifact) -> None:
        self.manifest.put(artifact)
        self.touched.add(artifact.path)
        save(self.out, self.manifest)

    def prune(self) -> None:
        """Drop artifacts this run did not need (a previous config's), with their files."""
        for a in list(self.manifest.artifacts):
            if a.path not in self.touched:
                self.manifest.artifacts.remove(a)
                (self.out / a.path).unlink(missing_ok=True)
                self.result.removed.append(a.path)
        save(self.out, self.manifest)


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _clean_leftovers(out: Path) -> None:
    """Temporary files of an interrupted run (never under a final name, see fetch.atomic_writer)."""
    for path in out.rglob(".*.partial"):
        path.unlink(missing_ok=True)
    for path in out.glob(".tmp-*"):
        shutil.rmtree(path, ignore_errors=True)


def find_helm(explicit: str | None) -> str:
    from gpustack.paths import state_dir

    candidates = [explicit] if explicit else [str(state_dir() / "bin" / "helm"), shutil.which("helm")]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    raise UsageError(
        "bundle create needs helm to pull and render the charts: none found"
        + (f" at {explicit}" if explicit else " (gpustack's own, or on PATH)"),
        hint=f"install Helm {pins.HELM_VERSION}, or pass --helm PATH",
    )


def chart_metadata(archive: Path) -> tuple[str, str]:
    """(name, version) from a chart archive's top-level Chart.yaml."""
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if len(parts) == 2 and parts[1] == "Chart.yaml" and member.isfile():
                handle = tar.extractfile(member)
                data = yaml.safe_load(handle.read()) if handle else {}
                return str(data.get("name", "")), str(data.get("version", ""))
    raise BundleError(f"{archive.name} has no Chart.yaml: not a chart archive")


def create(
    cfg: Config,
    opts: CreateOptions,
    console: Console,
    *,
    playbooks: Path,
    http: requests.Session | None = None,
) -> CreateResult:
    """Make (or complete, or update) the bundle ``opts.out`` for ``cfg``; see the module docstring."""
    t0 = time.monotonic()
    out = opts.out
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: not a directory")
    out.mkdir(parents=True, exist_ok=True)
    _clean_leftovers(out)
    v = cfg.versions
    manifest = (
        load(out)
        if (out / BUNDLE_MANIFEST).is_file()
        else Manifest(kubernetes=v.kubernetes, arches=list(opts.arches), os=[])
    )
    manifest.kubernetes, manifest.arches = v.kubernetes, list(opts.arches)
    manifest.os = [want.release_id(r) for r in opts.releases]
    manifest.created = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = CreateResult(manifest)
    bundle = _Bundle(out, manifest, console, result)
    http = http or fetch.session()
    helm_path = find_helm(opts.helm)

    console.print("[stage]▶ files[/stage]")
    _files(cfg, opts, bundle, http)
    console.print("[stage]▶ charts[/stage]")
    charts = _charts(cfg, bundle, helm_path)
    console.print("[stage]▶ apt packages[/stage]")
    _apt(cfg, opts, bundle, http, playbooks)
    console.print("[stage]▶ images[/stage]")
    resolved = _resolve_images(cfg, opts, bundle, charts, helm_path)
    manifest.resolved_images = {k: sorted(set(refs)) for k, refs in resolved.items()}
    save(out, manifest)
    _images(cfg, opts, bundle, http, resolved)
    bundle.prune()
    unpinned = [w.ref for w in want.image_wants(cfg, resolved) if not w.digest]
    if unpinned:
        result.warnings.append(
            f"{len(unpinned)} image(s) are pinned by tag only; the bundle records the digest each had when fetched"
        )
    result.seconds = time.monotonic() - t0
    return result


# --- the steps --------------------------------------------------------------------------------------


def _files(cfg: Config, opts: CreateOptions, bundle: _Bundle, http: requests.Session) -> None:
    for f in want.files(cfg, opts.arches):
        label = f"{f.name} {f.version}" + ("" if f.arch == "all" else f" ({f.arch})")
        if f.sha256 is None:
            bundle.result.warnings.append(
                f"{label} has no pinned sha256: the bundle records the one fetched; set its sha256 in "
                "versions: after checking it once"
            )

        def make(f: want.FileWant = f, label: str = label) -> Artifact:
            got = fetch.download(http, f.url, bundle.out / f.path, what=label, sha256=f.sha256)
            return Artifact("file", f.name, f.path, got.sha256, got.size, version=f.version, arch=f.arch, source=f.url)

        bundle.ensure(
            ("file", f.name, f.version, f.arch, ""),
            label,
            make,
            valid=lambda a, f=f: f.sha256 is None or a.sha256 == f.sha256,  # type: ignore[misc]
        )


def _charts(cfg: Config, bundle: _Bundle, helm_path: str) -> dict[str, Path]:
    from gpustack.runners.helm import Helm

    helm = Helm(executable=helm_path)
    out: dict[str, Path] = {}
    for c in want.charts(cfg):
        label = f"chart {c.name} {c.version}"

        def make(c: want.ChartWant = c, label: str = label) -> Artifact:
            with tempfile.TemporaryDirectory(dir=bundle.out, prefix=".tmp-") as tmp:
                archive = helm.pull_archive(c.name, repo=c.repo, version=c.version, destination=Path(tmp))
                name, version = chart_metadata(archive)
                if (name, version) != (c.name, c.version):
                    raise BundleError(f"{label}: {c.repo} served {name} {version}")
                dest = bundle.out / c.path
                dest.parent.mkdir(parents=True, exist_ok=True)
                sha, size = sha256_file(archive), archive.stat().st_size
                os.replace(archive, dest)
            return Artifact("chart", c.name, c.path, sha, size, version=c.version, source=c.repo)

        got = bundle.ensure(("chart", c.name, c.version, "", ""), label, make)
        out[c.name] = bundle.out / got.path
    return out


def _kubernetes_key(cfg: Config, bundle: _Bundle, http: requests.Session) -> Path:
    """The Kubernetes repository's key, trusted only with its pinned fingerprint."""
    minor = cfg.versions.kubernetes_minor
    url = cfg.sources.kubernetes_apt_key_url.format(minor=minor)
    key = bundle.out / ".work" / "keys" / f"kubernetes-v{minor}.asc"
    fetch.download(http, url, key, what=f"Kubernetes {minor} apt key")
    fingerprints = apt.key_fingerprints(key)
    expected = cfg.sources.kubernetes_apt_key_fingerprint
    if expected not in fingerprints:
        key.unlink()
        raise BundleError(
            f"the key at {url} has fingerprint(s) {', '.join(fingerprints) or 'none'}, not the pinned {expected}",
            hint="a mirror with its own key: set sources.kubernetes_apt_key_fingerprint",
        )
    return key


def _apt(cfg: Config, opts: CreateOptions, bundle: _Bundle, http: requests.Session, playbooks: Path) -> None:
    k8s = want.kubernetes_apt_want(cfg)
    k8s_url = cfg.sources.kubernetes_apt_url.format(minor=cfg.versions.kubernetes_minor)
    key = _kubernetes_key(cfg, bundle, http)
    repos: dict[str, set[str]] = {}
    for release in opts.releases:
        os_want = want.os_apt_want(cfg, playbooks, release)
        lines, keyring = want.apt_sources(cfg, release)
        if not Path(keyring).is_file():
            raise UsageError(
                f"the {release.name} archive keyring {keyring} does not exist on this machine",
                hint=f"install the distribution's archive keyring, or set sources.os_apt_keyring.{release.id}",
            )
        sources = [apt.Source(line, keyring) for line in lines] + [apt.Source(k8s_url, str(key))]
        for arch in opts.arches:
            root = apt.AptRoot(bundle.out / ".work" / "apt" / f"{os_want.repo}-{arch}", arch)
            what = f"apt packages for {release.name} ({arch})"
            bundle.console.info(f"  resolving {what}")
            debs = root.resolve(sources, [*os_want.packages, *k8s.packages], what=what)
            for deb in debs:
                repo = k8s.repo if deb.url.startswith(k8s_url.rstrip("/")) else os_want.repo
                _deb(bundle, deb, repo)
                repos.setdefault(repo, set()).add(deb.arch)
    for repo, arches in sorted(repos.items()):
        _index(bundle, repo, sorted(arches | set(opts.arches)))


def _deb(bundle: _Bundle, deb: apt.Deb, repo: str) -> None:
    # the archive's pool name: <name>_<version without epoch>_<arch>.deb
    path = f"apt/{repo}/{deb.name}_{deb.version.split(':', 1)[-1]}_{deb.arch}.deb"

    def make() -> Artifact:
        target = bundle.out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.partial")
        tmp.unlink(missing_ok=True)
        try:  # a hard link to apt's verified download: no second copy on disk
            os.link(deb.path, tmp)
            os.replace(tmp, target)
        except OSError:
            with fetch.atomic_writer(target) as fh, deb.path.open("rb") as src:
                shutil.copyfileobj(src, fh)
        return Artifact(
            "deb", deb.name, path, sha256_file(target), target.stat().st_size,
            version=deb.version, arch=deb.arch, repo=repo, source=deb.url,
        )  # fmt: skip

    label = f"package {deb.name} {deb.version} ({deb.arch}) -> {repo}"
    bundle.ensure(("deb", deb.name, deb.version, deb.arch, repo), label, make)


def _index(bundle: _Bundle, repo: str, arches: Sequence[str]) -> None:
    """Packages/Release of one repository, signed again only when its packages changed."""
    directory = bundle.out / "apt" / repo
    debs = sorted(
        (a for a in bundle.manifest.artifacts if a.kind == "deb" and a.repo == repo and a.path in bundle.touched),
        key=lambda a: a.path,
    )
    for stale in directory.glob("*.deb"):
        if f"apt/{repo}/{stale.name}" not in {a.path for a in debs}:
            stale.unlink()
    stanzas = "\n".join(apt.control_stanza(bundle.out / a.path, Path(a.path).name) for a in debs).encode()
    current = bundle.manifest.find("apt-index", "Packages", repo=repo)
    parts = ("Packages", "Packages.gz", "Release", "InRelease", "Release.gpg")
    unchanged = (
        current is not None
        and current.sha256 == hashlib.sha256(stanzas).hexdigest()
        and all(intact(bundle.out, bundle.manifest.find("apt-index", p, repo=repo)) for p in parts)
        and intact(bundle.out, bundle.manifest.find("apt-key", "Release.key", repo=repo))
    )
    if unchanged:
        for p in parts:
            bundle.touched.add(f"apt/{repo}/{p}")
        bundle.touched.add(f"apt/{repo}/Release.key")
        bundle.result.kept.append(f"repository {repo} (index)")
        return
    apt.write_index(directory, [bundle.out / a.path for a in debs], label=repo, arches=arches)
    fingerprint = apt.sign(directory, label=repo)
    for p in parts:
        path = directory / p
        bundle.record(Artifact("apt-index", p, f"apt/{repo}/{p}", sha256_file(path), path.stat().st_size, repo=repo))
    key = directory / "Release.key"
    bundle.record(
        Artifact(
            "apt-key", "Release.key", f"apt/{repo}/Release.key", sha256_file(key), key.stat().st_size,
            repo=repo, fingerprint=fingerprint,
        )
    )  # fmt: skip
    bundle.result.fetched.append(f"repository {repo} (index signed by {fingerprint})")
    bundle.console.info(f"  indexed repository {repo}: {len(debs)} packages, signed by {fingerprint}")


def _machine_kubeadm(bundle: _Bundle, explicit: str | None) -> tuple[str, Callable[[], None]]:
    """A kubeadm this machine can run: ``--kubeadm``, else the one in the bundle's kubeadm package."""
    if explicit:
        return explicit, lambda: None
    arch = ARCH_OF_MACHINE.get(platform.machine(), platform.machine())
    deb = next(
        (a for a in bundle.manifest.artifacts if a.kind == "deb" and a.name == "kubeadm" and a.arch == arch), None
    )
    if deb is None:
        raise UsageError(
            f"no kubeadm package for this machine's architecture ({arch}) in the bundle to list kubeadm's images",
            hint="pass --kubeadm PATH (a kubeadm of the pinned version), or include --arch " + arch,
        )
    tmp = Path(tempfile.mkdtemp(dir=bundle.out, prefix=".tmp-"))
    apt._run(["dpkg-deb", "-x", str(bundle.out / deb.path), str(tmp)], what="unpacking kubeadm")
    return str(tmp / "usr" / "bin" / "kubeadm"), lambda: shutil.rmtree(tmp, ignore_errors=True)


def _resolve_images(
    cfg: Config, opts: CreateOptions, bundle: _Bundle, charts: dict[str, Path], helm_path: str
) -> dict[str, list[str]]:
    """The images only fetched artifacts name: ``{source: [ref, ...]}``."""
    from gpustack.render.values import FactsSummary, render_values
    from gpustack.runners.helm import Helm

    resolved: dict[str, list[str]] = {}
    v = cfg.versions
    kubeadm, cleanup = _machine_kubeadm(bundle, opts.kubeadm)
    try:
        listing = apt._run(
            [kubeadm, "config", "images", "list", "--kubernetes-version", f"v{v.kubernetes}"],
            what="kubeadm config images list",
            timeout=120,
        )
    finally:
        cleanup()
    resolved["kubeadm"] = want.kubeadm_images(listing)
    # every optional component on (no driver or toolkit preinstalled, NFD deployed): the bundle
    # must hold whatever the hosts' facts may switch on
    values = render_values(cfg, FactsSummary())
    helm = Helm(executable=helm_path)
    for release, vals in values.items():
        docs = helm.template(
            release, charts[release], vals, namespace=NAMESPACES[release], kube_version=f"v{v.kubernetes}"
        )
        refs: list[str] = []
        for found in want.images_in_documents(docs):
            refs += want.driver_refs(found, opts.releases) if found.driver else [found.ref]
        resolved[f"chart {release}"] = refs
    return resolved


def _images(
    cfg: Config, opts: CreateOptions, bundle: _Bundle, http: requests.Session, resolved: dict[str, list[str]]
) -> None:
    registry = Registry(http, cfg.sources.registry_mirrors)
    for w in want.image_wants(cfg, resolved):
        for arch in opts.arches:
            path = want.archive_name(w.ref, arch)
            label = f"image {w.ref} ({arch})"

            def make(w: want.ImageWant = w, arch: str = arch, path: str = path) -> Artifact:
                pulled = registry.pull(w.ref, arch, bundle.out / path, digest=w.digest)
                source = registry.base_url(want.parse_ref(w.ref).registry)
                return Artifact(
                    "image", w.ref, path, pulled.sha256, pulled.size,
                    arch=arch, digest=pulled.digest, nodes=w.nodes, source=source,
                )  # fmt: skip

            bundle.ensure(
                ("image", w.ref, "", arch, ""),
                label,
                make,
                valid=lambda a, w=w: not w.digest or a.digest == w.digest,  # type: ignore[misc]
            )


def summary_rows(manifest: Manifest) -> list[list[str]]:
    """kind -> count and size, for the CLI's table."""
    rows: dict[str, list[int]] = {}
    for a in manifest.artifacts:
        r = rows.setdefault(a.kind, [0, 0])
        r[0] += 1
        r[1] += a.size
    return [[kind, str(n), _size(size)] for kind, (n, size) in sorted(rows.items())]
