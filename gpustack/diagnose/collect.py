"""Collection: run every source concurrently with its own timeout; a source that fails or times
out is recorded in ``snapshot.errors`` (checks report it), never raised.

A source is ``fn(ctx, snap) -> None`` filling its part of the snapshot. Sources register with
:func:`source`; the collect_* modules define them.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack.config.model import Config
from gpustack.diagnose.snapshot import Snapshot
from gpustack.runners.kube_proof import Proof

if TYPE_CHECKING:
    from gpustack.runners.kube import Kube
    from gpustack.runners.kubeconfig import KubeTarget


@dataclass
class CollectContext:
    cfg: Config
    command: str  # "verify" | "doctor"
    kubeconfig: Path | None
    timeout: float = 30.0  # per source
    workload: bool = True  # verify: run the CUDA test pod
    load: bool = False  # verify --load: dcgmproftester
    layers: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)  # injected clients in tests
    #: the resolved cluster (:func:`gpustack.runners.kubeconfig.resolve_kubeconfig`); None: ``kubeconfig`` (a
    #: file) is resolved on first use, or there is no cluster (``no_cluster`` says why)
    target: KubeTarget | None = None
    no_cluster: str = ""
    #: the verdict on the cluster's server, shared by every client :meth:`kube` makes (asked once per run)
    proof: Proof = field(default_factory=Proof)

    def kube(self, request_timeout: float | None = None) -> Kube | None:
        """A client for the cluster: ``extra["kube"]`` (tests), else one connected to :attr:`target` (or to the
        ``kubeconfig`` file); None when there is no cluster to talk to."""
        given = self.extra.get("kube")
        if given is not None:
            return given  # type: ignore[no-any-return]
        from gpustack.runners.kubeconfig import connect, resolve_kubeconfig

        if self.target is None and self.kubeconfig is not None:
            self.target = resolve_kubeconfig(kubeconfig=self.kubeconfig)
        if self.target is None:
            return None
        kube = connect(self.target, request_timeout=request_timeout)
        kube.proof = self.proof
        return kube


SourceFn = Callable[[CollectContext, Snapshot], None]


@dataclass(frozen=True)
class Source:
    name: str
    layers: tuple[str, ...]  # layers whose checks need it
    fn: SourceFn
    after: tuple[str, ...] = ()  # sources that must finish first (e.g. prometheus after kube)
    timeout: float | None = None  # its own deadline (the CUDA pod pulls an image); default ctx.timeout


SOURCES: dict[str, Source] = {}


def source(
    name: str, *, layers: Iterable[str], after: Iterable[str] = (), timeout: float | None = None
) -> Callable[[SourceFn], SourceFn]:
    def deco(fn: SourceFn) -> SourceFn:
        SOURCES[name] = Source(name, tuple(layers), fn, tuple(after), timeout)
        return fn

    return deco


def load_sources() -> dict[str, Source]:
    from gpustack.diagnose import import_all

    import_all("collect_")
    return SOURCES


def _run_one(src: Source, ctx: CollectContext, snap: Snapshot) -> None:
    try:
        src.fn(ctx, snap)
    except Exception as exc:  # any failure of a source is data for the checks, not a crash
        snap.errors[src.name] = f"{type(exc).__name__}: {exc}"


def collect(ctx: CollectContext, *, sources: Iterable[str] | None = None) -> Snapshot:
    """Run the selected sources in dependency waves, each wave concurrently, each with a deadline."""
    load_sources()
    wanted = [s for s in SOURCES.values() if (sources is None or s.name in set(sources))]
    if ctx.layers:
        wanted = [s for s in wanted if set(s.layers) & set(ctx.layers)]
    certs = ctx.cfg.certificates
    snap = Snapshot(cluster=ctx.cfg.cluster.name, collected_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    settings={"certificates": {"warn_days": certs.warn_days, "fail_days": certs.fail_days},
                              "etcd": {"snapshot_interval_seconds": ctx.cfg.etcd.snapshots.interval_seconds,
                                       "scheduled": ctx.cfg.etcd.snapshots.scheduled},
                              # the security layer: a setting changed from its default relaxes its CIS checks
                              "security": ctx.cfg.security.model_dump(mode="json")})  # fmt: skip
    done: set[str] = set()
    pending = list(wanted)
    while pending:
        wave = [s for s in pending if all(a in done or a not in {w.name for w in wanted} for a in s.after)]
        if not wave:  # a cycle: run the rest anyway
            wave = pending
        # no `with`: its exit would wait for a hung source; sources set their own request timeouts
        # and this deadline is the safety net
        pool = cf.ThreadPoolExecutor(max_workers=max(1, len(wave)))
        try:
            futures = {pool.submit(_run_one, s, ctx, snap): s for s in wave}
            deadline = max(s.timeout or ctx.timeout for s in wave)
            _finished, late = cf.wait(futures, timeout=deadline)
            for fut in late:
                snap.errors[futures[fut].name] = f"timed out after {deadline:.0f}s"
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        done |= {s.name for s in wave}
        pending = [s for s in pending if s.name not in done]
    return snap
