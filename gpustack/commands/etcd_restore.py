"""``gpustack etcd restore [SNAPSHOT]``: every control plane's etcd restored from one verified snapshot
(playbooks/etcd-restore.yml, role etcd_restore), then the API confirmed: the `etcd-restore` sequence run by the
one engine.

    prepare (this machine, before any question): the snapshot chosen (an unfinished restore's; the one named; else
        the newest local copy that verifies), its sha256 and etcd's appended hash checked -> what will be lost
    -> check: verified again, <state>/clusters/<cluster>/etcd-restore.json written "running" (id, token, snapshot)
    -> stop -> restore -> start (every control plane, each phase on all before the next; recorded on each host)
    -> confirm: the nodes read through the API server; the record "done"

An interrupted or failed restore is continued by the next run with the same snapshot, id and token; another
snapshot is refused until it is done (gpustack/cluster/etcd_restore.py). See docs/lifecycle.md, "Restoring etcd".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack.cluster import etcd_restore as rules
from gpustack.engine.options import RunFlags
from gpustack.engine.plan import CommandPlan, Stage
from gpustack.engine.steps import StageSummary, StepContext
from gpustack.errors import ConfigError, StageError
from gpustack.paths import ensure_private_dir, write_json

if TYPE_CHECKING:
    from gpustack.config.model import Config
    from gpustack.console import Console
    from gpustack.runners.kube import Kube

STAGES: tuple[Stage, ...] = (
    Stage(
        "check",
        "Check the snapshot",
        "python",
        "local",
        "the snapshot's sha256 and the hash etcd appends checked again on this machine; "
        "<state>/clusters/<cluster>/etcd-restore.json written running (the restore's id, new cluster token, snapshot)",
    ),
    Stage(
        "stop",
        "Stop etcd and the API server",
        "ansible",
        "control-plane",
        "every control plane: an etcdutl found (else etcd's pinned release archive downloaded, its sha256 checked, "
        "etcdutl unpacked into /var/lib/gpustack/etcd-release); the snapshot copied to /var/lib/gpustack/etcd-restore "
        "(0600) and checked; etcd.yaml and "
        "kube-apiserver.yaml moved from /etc/kubernetes/manifests to /var/lib/gpustack/etcd-restore/manifests; wait "
        "until their containers are gone (the API is down from here until start)",
    ),
    Stage(
        "restore",
        "Restore every member's data",
        "ansible",
        "control-plane",
        "every control plane: etcd's data directory moved aside to <data dir>.before-restore-<id> (kept, never "
        "deleted); etcdutl snapshot restore with the member's name and peer URL from kubeadm's manifest, every member "
        "in --initial-cluster, a new cluster token, the revision bumped; 0700",
    ),
    Stage(
        "start",
        "Start etcd and the API server",
        "ansible",
        "control-plane",
        "every control plane: the manifests moved back; wait until etcd is healthy and the API server ready; the "
        "host's record closed and the snapshot's copy there removed",
    ),
    Stage(
        "confirm",
        "Confirm through the API",
        "python",
        "local",
        "the nodes read through the API server; <state>/clusters/<cluster>/etcd-restore.json: done",
    ),
)

PLAN = CommandPlan(
    "etcd-restore",
    "restore every control plane's etcd from one verified snapshot (kubeadm's procedure: API servers and etcd "
    "stopped, every member restored with a new cluster token, started, checked); asks first, resumable",
    "etcd-restore.yml",
    STAGES,
    extravars=rules.EXTRAVARS,
    host_notes={"control-plane": "every control-plane node"},
)


@dataclass(frozen=True)
class RestoreOptions(RunFlags):
    snapshot: Path | None = None


@dataclass
class RestoreResult:
    run_dir: Path
    summaries: list[StageSummary]
    record: dict[str, Any]
    nodes: int


def prepare(cfg: Config, opts: RestoreOptions, now: datetime | None = None) -> dict[str, Any]:
    """The restore about to run, changing nothing: an unfinished one continued, else a new one (its snapshot
    verified). ConfigError (exit 2) without a control plane or a snapshot that verifies."""
    if not cfg.control_planes:
        raise ConfigError("the config has no control-plane node: there is no etcd to restore")
    previous = rules.read_record(rules.record_path(cfg))
    path, facts = rules.choose(cfg, opts.snapshot, previous)
    if rules.unfinished(previous):
        assert previous is not None
        return {**previous, "resumed": True}
    members = [n.name for n in cfg.control_planes]
    return rules.new_record(path, facts, now or datetime.now(timezone.utc), members)


def restore(
    cfg: Config,
    opts: RestoreOptions,
    console: Console,
    record: dict[str, Any],
    *,
    kube: Callable[[], Kube] | None = None,
) -> RestoreResult:
    """Run the `etcd-restore` sequence for ``record`` (from :func:`prepare`) with the one engine."""
    from gpustack.engine.run import run

    path = rules.record_path(cfg)
    state: dict[str, Any] = {"record": {k: v for k, v in record.items() if k != "resumed"}}

    def check(ctx: StepContext) -> list[StageSummary]:
        t0 = time.monotonic()
        facts = rules.verify(Path(state["record"]["snapshot"]))
        if facts["sha256"] != state["record"]["sha256"]:
            raise rules.SnapshotRefused(f"{state['record']['snapshot']} changed since it was checked")
        if ctx.opts.dry_run:
            return [StageSummary("check", "ok", time.monotonic() - t0, note="verified (dry run: no record)")]
        state["record"] = rules.with_status(state["record"], "running", datetime.now(timezone.utc))
        ensure_private_dir(path.parent)
        write_json(path, state["record"])
        state["written"] = True
        return [StageSummary("check", "changed", time.monotonic() - t0, 1, note=f"verified; {path}")]

    def confirm(ctx: StepContext) -> list[StageSummary]:
        t0 = time.monotonic()
        if ctx.opts.dry_run:
            return [StageSummary("confirm", "not run", 0.0, note="dry run")]
        from gpustack.runners.kubeconfig import cluster_client

        client = kube() if kube is not None else cluster_client(cfg.cluster.name, own_only=True)
        nodes = client.list_all("/api/v1/nodes")
        state["nodes"] = len(nodes)
        state["record"] = rules.with_status(state["record"], "done", datetime.now(timezone.utc))
        write_json(path, state["record"])
        note = f"{len(nodes)} node(s) read through the API server; {path}"
        return [StageSummary("confirm", "changed", time.monotonic() - t0, 1, note=note)]

    from gpustack.render.ansible import etcdutl_vars

    extra = {**rules.extravars(state["record"]), **etcdutl_vars(cfg)}
    run_opts = opts.run_options(PLAN.stages, limit=[n.name for n in cfg.control_planes], extravars=extra)
    try:
        result = run(PLAN, cfg, run_opts, console, steps={"check": check, "confirm": confirm})
    except StageError as exc:
        if state.get("written"):
            write_json(path, rules.with_status(state["record"], "failed", datetime.now(timezone.utc), exc.message))
            exc.hint = (
                f"fix the cause, then run `gpustack etcd restore` again: it finishes restore {state['record']['id']} "
                "with the same snapshot (each control plane skips what it already did); " + (exc.hint or "")
            ).rstrip("; ")
        raise
    return RestoreResult(result.run_dir, result.summaries, dict(state["record"]), int(state.get("nodes", 0)))
