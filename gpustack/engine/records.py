"""A run's records in its run directory: ``run.json`` (what ran, when, how it ended: ``gpustack status``
reads it) and the JSON files the engine writes beside it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpustack.config.model import Config
    from gpustack.engine.options import RunOptions
    from gpustack.engine.plan import CommandPlan


#: version of a run directory's run.json
RUN_RECORD_FORMAT = 1


def _utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_record(plan: CommandPlan, cfg: Config, opts: RunOptions) -> dict[str, Any]:
    """What ``<run dir>/run.json`` says while a run goes on (``gpustack status`` reads it)."""
    return {
        "format": RUN_RECORD_FORMAT,
        "command": plan.command,
        "cluster": cfg.cluster.name,
        "nodes": sorted(set(opts.limit) | {n for ns in opts.stage_nodes.values() for n in ns}),
        "dry_run": opts.dry_run,
        "started": _utc(),
        "finished": None,
        "result": "running",
        "error": None,
    }


def finish_record(record: Mapping[str, Any], result: str, error: str | None = None) -> dict[str, Any]:
    """The record once the run ended: ``ok``, ``failed`` (with the error) or ``interrupted``."""
    return {**record, "finished": _utc(), "result": result, "error": error}
