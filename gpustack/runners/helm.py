"""Helm releases through pyhelm3: async inside, sync outside.

:class:`Helm` ensures releases idempotently. For each release it reads the current revision
(``helm status``), repairs a release stuck in ``pending-*``/``uninstalling`` (rollback or
uninstall, as pyhelm3's ``get_proceedable_revision`` does), compares the deployed chart version and
user values (``helm get values``) with the wanted ones and only then runs ``helm upgrade --install
--rollback-on-failure --wait`` (Helm 4) with a bounded timeout. The release that owns CRDs (kube-prometheus-stack) goes
first; the others run concurrently.

The chart reference is built locally from the pin table (name, repo URL, version), so a converged
run makes no network call to a chart repository and no mutating Helm call.

The ``helm`` executable is the seam: ``Helm(executable=...)`` runs a fake in tests. Every
invocation's argv is recorded in :attr:`Helm.calls`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pyhelm3 import Client, Command
from pyhelm3 import errors as helm_errors
from pyhelm3.models import Chart, ChartMetadata, ReleaseRevision, ReleaseRevisionStatus

from gpustack.errors import StageError

# pyhelm3 logs an expected "release: not found" as a warning; gpustack reports through its console.
logging.getLogger("pyhelm3").addHandler(logging.NullHandler())

STAGE = "helm"
MUTATING = frozenset({"upgrade", "install", "rollback", "uninstall"})
_RESOURCE = re.compile(r'\b([A-Z][A-Za-z]+(?:\.[a-z0-9.-]+)?) "([^"]+)"')
_ERROR_LINE = re.compile(r"^Error: (.*)$", re.M)

Action = Literal["installed", "upgraded", "unchanged"]


class HelmError(StageError):
    """A Helm release could not be brought to the wanted state (names the release and the resource)."""

    def __init__(self, message: str, *, release: str, resource: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, stage=STAGE, hint=hint)
        self.release = release
        self.resource = resource


@dataclass(frozen=True)
class ReleaseSpec:
    """One wanted release: chart ``name`` from ``repo`` at ``version``, with ``values``."""

    release: str
    chart: str
    repo: str
    version: str
    namespace: str
    values: dict[str, Any]
    timeout: str = "10m"
    #: install from this chart archive (a bundle's) instead of ``repo``
    archive: Path | None = None


@dataclass(frozen=True)
class ReleaseResult:
    release: str
    action: Action
    revision: int
    repaired: str | None
    seconds: float


@dataclass(frozen=True)
class HelmCall:
    """One ``helm`` invocation: argv (executable excluded) and whether it changes the cluster."""

    argv: tuple[str, ...]
    mutating: bool
    seconds: float


class _RecordingCommand(Command):  # type: ignore[misc]
    """pyhelm3's Command, recording every argv it runs."""

    def __init__(self, calls: list[HelmCall], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._calls = calls

    async def run(self, command: list[str], input: bytes | None = None) -> bytes:
        start = time.monotonic()
        try:
            out: bytes = await super().run(command, input)
            return out
        finally:
            argv = tuple(str(c) for c in command)
            self._calls.append(HelmCall(argv, bool(argv) and argv[0] in MUTATING, time.monotonic() - start))


def failing_resource(stderr: str) -> str | None:
    """The first ``Kind "name"`` helm names in its error output (e.g. ``DaemonSet.apps "nvidia-driver"``)."""
    match = _RESOURCE.search(stderr)
    return f"{match[1]} {match[2]!r}" if match else None


def error_summary(stderr: str) -> str:
    """Helm's ``Error: ...`` line (or the last non-empty line), without the ``Error:`` prefix."""
    lines = _ERROR_LINE.findall(stderr)
    if lines:
        return str(lines[-1]).strip()
    rest = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return rest[-1] if rest else "helm failed without a message"


def helm_error(release: str, exc: helm_errors.Error, doing: str) -> HelmError:
    """Turn a pyhelm3 error into a :class:`HelmError` naming the release and the failing resource."""
    stderr = exc.stderr.decode(errors="replace")
    resource = failing_resource(stderr)
    where = f" ({resource})" if resource else ""
    hint = f"helm status {release} -n <namespace>; helm history {release} -n <namespace>"
    if isinstance(exc, helm_errors.ConnectionError):
        hint = "the Kubernetes API is unreachable: check the control plane and the kubeconfig"
    return HelmError(
        f"helm {doing} of release {release!r} failed{where}: {error_summary(stderr)}",
        release=release,
        resource=resource,
        hint=hint,
    )


class Helm:
    """Synchronous facade over :class:`pyhelm3.Client` for gpustack's releases."""

    def __init__(
        self,
        kubeconfig: Path | None = None,
        *,
        executable: str = "helm",
        default_timeout: str = "10m",
        history_max_revisions: int = 5,
    ) -> None:
        self.calls: list[HelmCall] = []
        self._command = _RecordingCommand(
            self.calls,
            default_timeout=default_timeout,
            executable=executable,
            history_max_revisions=history_max_revisions,
            kubeconfig=kubeconfig,
        )
        self._client = Client(command=self._command, executable=executable)

    # -- sync API ---------------------------------------------------------------------------------

    def ensure_release(self, spec: ReleaseSpec) -> ReleaseResult:
        """Bring one release to ``spec`` (see the module docstring)."""
        return asyncio.run(self._ensure(spec))

    def ensure_releases(self, specs: Sequence[ReleaseSpec]) -> list[ReleaseResult]:
        """The first spec alone (it owns the CRDs the others need), then the rest concurrently."""
        return asyncio.run(self._ensure_all(specs))

    # -- async internals --------------------------------------------------------------------------

    async def _ensure_all(self, specs: Sequence[ReleaseSpec]) -> list[ReleaseResult]:
        if not specs:
            return []
        first = await self._ensure(specs[0])
        rest = await asyncio.gather(*(self._ensure(s) for s in specs[1:]), return_exceptions=True)
        failures = [r for r in rest if isinstance(r, BaseException)]
        if failures:
            errs = [f for f in failures if isinstance(f, HelmError)]
            if len(errs) != len(failures):
                raise next(f for f in failures if not isinstance(f, HelmError))
            if len(errs) == 1:
                raise errs[0]
            raise HelmError(
                "; ".join(e.message for e in errs), release=", ".join(e.release for e in errs), hint=errs[0].hint
            )
        return [first, *(r for r in rest if isinstance(r, ReleaseResult))]

    def _chart(self, spec: ReleaseSpec) -> Chart:
        metadata = ChartMetadata.model_validate({"apiVersion": "v2", "name": spec.chart, "version": spec.version})
        if spec.archive is not None:  # a bundle's chart archive (up --bundle): no repository
            return Chart(self._command, ref=spec.archive, repo=None, metadata=metadata)
        return Chart(self._command, ref=spec.chart, repo=spec.repo, metadata=metadata)

    async def _current(self, spec: ReleaseSpec) -> ReleaseRevision | None:
        try:
            return await self._client.get_current_revision(spec.release, namespace=spec.namespace)
        except helm_errors.ReleaseNotFoundError:
            return None

    async def _repair(self, spec: ReleaseSpec, current: ReleaseRevision) -> tuple[ReleaseRevision | None, str | None]:
        """Make a release stuck mid-operation proceedable again (pyhelm3's rules)."""
        status = current.status
        if status in (ReleaseRevisionStatus.PENDING_INSTALL, ReleaseRevisionStatus.UNINSTALLING):
            await current.release.uninstall(timeout=spec.timeout, wait=True)
            return None, f"uninstalled release stuck in {status.value}"
        if status in (ReleaseRevisionStatus.PENDING_UPGRADE, ReleaseRevisionStatus.PENDING_ROLLBACK):
            rolled = await current.release.rollback(cleanup_on_fail=True, timeout=spec.timeout, wait=True)
            return rolled, f"rolled back release stuck in {status.value}"
        return current, None

    async def _ensure(self, spec: ReleaseSpec) -> ReleaseResult:
        start = time.monotonic()
        doing = "status"
        try:
            current = await self._current(spec)
            repaired = None
            if current is not None:
                doing = "repair"
                current, repaired = await self._repair(spec, current)
            chart = self._chart(spec)
            doing = "comparison"
            needed = await self._client.should_install_or_upgrade_release(current, chart, spec.values)
            if not needed:
                assert current is not None
                return ReleaseResult(spec.release, "unchanged", current.revision, repaired, time.monotonic() - start)
            doing = "install" if current is None else "upgrade"
            revision = await self._client.install_or_upgrade_release(
                spec.release,
                chart,
                spec.values,
                rollback_on_failure=True,
                wait=True,
                timeout=spec.timeout,
                namespace=spec.namespace,
                create_namespace=True,
            )
        except helm_errors.Error as exc:
            raise helm_error(spec.release, exc, doing) from exc
        action: Action = "installed" if current is None else "upgraded"
        return ReleaseResult(spec.release, action, revision.revision, repaired, time.monotonic() - start)

    def pull_chart(self, spec: ReleaseSpec) -> Path:
        """Download and unpack the pinned chart of ``spec``; returns the directory holding it (the
        caller removes it)."""
        try:
            return Path(asyncio.run(self._command.pull(spec.chart, repo=spec.repo, version=spec.version)))
        except helm_errors.Error as exc:
            raise helm_error(spec.release, exc, "pull") from exc

    def pull_archive(self, chart: str, *, repo: str, version: str, destination: Path) -> Path:
        """``helm pull`` the chart archive (not unpacked) into ``destination``; returns its path."""
        before = set(destination.glob("*.tgz"))
        argv = ["pull", chart, "--repo", repo, "--version", version, "--destination", str(destination)]
        try:
            asyncio.run(self._command.run(argv))
        except helm_errors.Error as exc:
            raise helm_error(chart, exc, "pull") from exc
        new = sorted(set(destination.glob("*.tgz")) - before)
        if len(new) != 1:
            raise HelmError(f"helm pull {chart} {version} left {len(new)} archives", release=chart)
        return new[0]

    def template(
        self, release: str, chart: Path, values: dict[str, Any], *, namespace: str, kube_version: str
    ) -> list[dict[str, Any]]:
        """The objects ``helm template`` renders (hooks included, CRDs not) with ``values``."""

        async def render() -> list[dict[str, Any]]:
            argv = ["template", release, str(chart), "--skip-crds", "--values", "-", "--namespace", namespace]
            argv += ["--kube-version", kube_version]
            out = await self._command.run(argv, json.dumps(values).encode())
            return [d for d in yaml.safe_load_all(out) if isinstance(d, dict)]

        try:
            return asyncio.run(render())
        except helm_errors.Error as exc:
            raise helm_error(release, exc, "template") from exc

    # -- reporting ----------------------------------------------------------------------------------

    def call_counts(self) -> dict[str, int]:
        """``{"mutating": n, "read": m}`` over :attr:`calls`."""
        mutating = sum(1 for c in self.calls if c.mutating)
        return {"mutating": mutating, "read": len(self.calls) - mutating}


def release_specs(
    values: dict[str, dict[str, Any]],
    charts: dict[str, tuple[str, str]],
    versions: dict[str, str],
    namespaces: dict[str, str],
    timeouts: dict[str, str] | None = None,
) -> list[ReleaseSpec]:
    """Specs in the order of ``values`` (install order). ``charts``: release -> (chart name, repo URL)."""
    timeouts = timeouts or {}
    return [
        ReleaseSpec(
            release=name,
            chart=charts[name][0],
            repo=charts[name][1],
            version=versions[name],
            namespace=namespaces[name],
            values=vals,
            timeout=timeouts.get(name, "10m"),
        )
        for name, vals in values.items()
    ]


__all__ = [
    "HelmCall",
    "HelmError",
    "ReleaseResult",
    "ReleaseSpec",
    "failing_resource",
    "release_specs",
]
