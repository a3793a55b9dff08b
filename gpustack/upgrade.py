"""``gpustack upgrade --to 1.Y[.Z]``: Kubernetes one minor (or a patch) up, control plane first,
workers one at a time (playbooks/upgrade.yml, role upgrade), run by the one engine.

    target resolved and the matrix checked (no host contacted)
    -> preflight (read-only facts: each node's installed version from its marker)
    -> the skew policy (gpustack/skew.py): refused with exit 2 before anything changes
    -> <state>/clusters/<cluster>/upgrade.json written "running"
    -> repository, control-plane, workers (each node records its steps on the host and, when
       done, in upgrade.json) -> record: upgrade.json "done" (or "failed" with the reason)

A re-run of the same command after an interruption continues: nodes already at the target are
skipped, a node half-way through skips its recorded steps. The local record's format is in
docs/lifecycle.md (``gpustack status`` reads it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpustack import lifecycle, plan, skew
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.constants import GPU_NAMESPACE
from gpustack.errors import GpustackError, StageError
from gpustack.lifecycle import StageSummary, StepContext
from gpustack.paths import ensure_private_dir, kubeconfig_path

#: version of the upgrade.json format
PROGRESS_FORMAT = 1


@dataclass(frozen=True)
class UpgradeOptions:
    to: str
    dry_run: bool = False
    verbosity: int = 0
    accept_new_host_keys: bool = False
    ignore_preflight: tuple[str, ...] = ()


@dataclass
class UpgradeResult:
    run_dir: Path
    summaries: list[StageSummary]
    target: str
    progress: dict[str, Any]


def progress_path(cfg: Config) -> Path:
    """This machine's record of the cluster's upgrade: ``<state>/clusters/<name>/upgrade.json``."""
    return kubeconfig_path(cfg.cluster.name).parent / "upgrade.json"


def _now(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_progress(
    cfg: Config,
    current: skew.ClusterVersions,
    target: str,
    previous: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The record written before the first change (pure). A resumed upgrade (the previous record
    is for the same target and not done) keeps its start and its ``from``."""
    resumed = bool(previous and previous.get("to") == target and previous.get("status") != "done")
    nodes = {
        n.name: {
            "role": n.role,
            "version": current.nodes.get(n.name, ""),
            "status": "done" if current.nodes.get(n.name) == target else "pending",
        }
        for n in cfg.nodes
    }
    return {
        "format": PROGRESS_FORMAT,
        "cluster": cfg.cluster.name,
        "from": previous["from"] if resumed and previous else current.apiserver,
        "to": target,
        "status": "running",
        "started": previous["started"] if resumed and previous else _now(now),
        "updated": _now(now),
        "attempts": (int(previous.get("attempts", 1)) + 1) if resumed and previous else 1,
        "error": None,
        "nodes": nodes,
    }


def finish_progress(
    progress: Mapping[str, Any], *, status: str, error: str | None = None, now: datetime | None = None
) -> dict[str, Any]:
    """The record once the run ended (pure): ``done`` (every node at the target) or ``failed``."""
    out = dict(progress)
    out.update(status=status, error=error, updated=_now(now))
    if status == "done":
        out["nodes"] = {n: {**v, "status": "done", "version": progress["to"]} for n, v in progress["nodes"].items()}
    return out


def read_progress(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_progress(path: Path, data: Mapping[str, Any]) -> None:
    ensure_private_dir(path.parent)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.chmod(0o600)
    tmp.replace(path)


def gpu_nodes(facts: Mapping[str, Any]) -> list[str]:
    """Nodes with NVIDIA GPUs in their facts: their GPU Operator validator must pass again."""
    return sorted(n for n, f in facts.items() if (f or {}).get("nvidia_pci_devices"))


def upgrade_extravars(cfg: Config, facts: Mapping[str, Any]) -> dict[str, Any]:
    """What playbooks/upgrade.yml reads beyond the (target) config's variables (pure)."""
    return {
        "gpustack_upgrade_gpu_nodes": gpu_nodes(facts),
        "gpustack_gpu_namespace": GPU_NAMESPACE,
        "gpustack_upgrade_progress_file": str(progress_path(cfg)),
    }


def current_versions(cfg: Config, facts: Mapping[str, Any]) -> skew.ClusterVersions:
    """Each node's installed version from the facts; SkewError for a node gpustack did not install."""
    installed = skew.installed_versions(facts)
    missing = [n.name for n in cfg.nodes if n.name in facts and n.name not in installed]
    if missing:
        raise skew.SkewError(
            f"no Kubernetes installed by gpustack on {', '.join(missing)} (no /etc/gpustack/installed.json)",
            hint="`gpustack up` builds the cluster; upgrade moves a running one",
        )
    return skew.ClusterVersions(installed, tuple(n.name for n in cfg.nodes if n.role == "control-plane"))


def upgrade(cfg: Config, opts: UpgradeOptions, console: Console) -> UpgradeResult:
    """Check, then run the `upgrade` sequence at ``opts.to`` with the one engine."""
    target = skew.resolve_target(opts.to)
    problems = skew.matrix_problems(cfg, target)
    if problems:  # before any host is contacted
        raise skew.SkewError(f"upgrade to {target} refused: " + "; ".join(problems))
    moved = skew.with_version(cfg, target)
    seq = plan.sequence("upgrade")
    path = progress_path(cfg)
    state: dict[str, Any] = {}

    def guard(_cfg: Config, facts: Mapping[str, Any]) -> None:
        current = current_versions(cfg, facts)
        skew.check_upgrade(cfg, current, target)
        console.print(
            f"upgrade {current.apiserver} -> {target}: "
            + ", ".join(f"{n} {v}" for n, v in sorted(current.nodes.items())),
            markup=False,
        )
        state["extravars"] = upgrade_extravars(cfg, facts)
        if opts.dry_run:
            return
        state["progress"] = new_progress(cfg, current, target, read_progress(path))
        write_progress(path, state["progress"])

    def record(ctx: StepContext) -> list[StageSummary]:
        t0 = time.monotonic()
        if ctx.opts.dry_run or "progress" not in state:
            return [StageSummary("record", "not run", 0.0, note="dry run")]
        # the playbook added each finished node; keep those entries
        state["progress"] = finish_progress(read_progress(path) or state["progress"], status="done")
        write_progress(path, state["progress"])
        return [StageSummary("record", "changed", time.monotonic() - t0, 1, note=str(path))]

    run_opts = lifecycle.RunOptions(
        stages=seq.stages,
        dry_run=opts.dry_run,
        verbosity=opts.verbosity,
        assume_yes=True,
        accept_new_host_keys=opts.accept_new_host_keys,
        ignore_preflight=opts.ignore_preflight,
        extravars=_LazyExtravars(state),
    )
    try:
        result = lifecycle.run(seq, moved, run_opts, console, steps={"record": record}, after_preflight=guard)
    except GpustackError as exc:
        if "progress" in state:
            failed = finish_progress(
                read_progress(path) or state["progress"],
                status="failed",
                error=exc.message + (f" (stage {exc.stage})" if isinstance(exc, StageError) else ""),
            )
            write_progress(path, failed)
            exc.hint = resume_hint(target, exc.hint)
        raise
    if not opts.dry_run:
        console.print(
            f'[ok]upgraded to {target}[/ok]: set versions.kubernetes: "{skew.minor_str(target)}" in your '
            "gpustack.yaml (up refuses a config that differs from the cluster)"
        )
    return UpgradeResult(result.run_dir, result.summaries, target, state.get("progress", {}))


def resume_hint(target: str, hint: str | None) -> str:
    """How to continue after a failure, keeping the runner's pointer to the full log (pure)."""
    log = hint.split("full log:", 1)[1].strip() if hint and "full log:" in hint else None
    resume = f"fix the cause, then run `gpustack upgrade --to {target}` again: it continues where it stopped"
    if log:
        return f"{resume}; full log: {log}"
    return f"{resume}; {hint}" if hint else resume


class _LazyExtravars(Mapping[str, Any]):
    """The upgrade's extra vars, known only once preflight read the facts (the guard fills them in)."""

    def __init__(self, state: Mapping[str, Any]) -> None:
        self._state = state

    def _vars(self) -> Mapping[str, Any]:
        ev = self._state.get("extravars")
        return ev if isinstance(ev, Mapping) else {}

    def __getitem__(self, key: str) -> Any:
        return self._vars()[key]

    def __iter__(self) -> Any:
        return iter(self._vars())

    def __len__(self) -> int:
        return len(self._vars())
