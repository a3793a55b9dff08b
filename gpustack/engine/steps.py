"""What the engine and a command's Python steps exchange: the :class:`StepContext` a step gets, the
:class:`StageSummary` rows it returns (one per stage, printed and kept in the run directory), a
command's :data:`Guard` over the preflight facts, and the :class:`RunResult` of a whole run."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpustack.checks.model import Finding
    from gpustack.config.model import Config
    from gpustack.console import Console
    from gpustack.engine.options import RunOptions


@dataclass
class StageSummary:
    stage: str
    status: str
    elapsed: float
    changed: int = 0
    hosts: list[str] = field(default_factory=list)
    note: str = ""
    #: host -> tasks that changed something there (Ansible stages)
    changed_by_host: dict[str, int] = field(default_factory=dict)


@dataclass
class RunResult:
    run_dir: Path
    summaries: list[StageSummary]
    findings: list[Finding]
    facts: dict[str, Any]


@dataclass
class StepContext:
    """What a Python step gets: the config, the options, the console, the run directory and the
    hosts' facts (from this run's preflight, or given in the options)."""

    cfg: Config
    opts: RunOptions
    console: Console
    run_dir: Path
    facts: dict[str, Any]


#: a Python stage: returns its summary rows (the first one is the stage's own)
StepFn = Callable[[StepContext], list[StageSummary]]
#: a command's own check of the preflight facts before anything changes (raises to refuse the run)
Guard = Callable[["Config", Mapping[str, Any]], None]
