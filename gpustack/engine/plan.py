"""What a host-changing command runs, as plain data: a :class:`CommandPlan` (a named sequence of
:class:`Stage` objects and the playbook its Ansible stages are plays of) and stage selection.

Each command module in :mod:`gpustack.commands` defines its ``PLAN``; :mod:`gpustack.commands`
collects them (``gpustack plan <command>`` prints one) and :mod:`gpustack.engine.run` runs any of them
the same way. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from gpustack.errors import UsageError

if TYPE_CHECKING:
    from gpustack.config.model import Config

#: how the engine runs a stage: ``preflight`` (read-only facts + checks), ``ansible`` (a play of the
#: command's playbook, selected by tag) or ``python`` (a step function the command registers by id)
Runner = Literal["preflight", "ansible", "python"]
#: the hosts a stage touches: every node, the control plane, the workers, the nodes the command
#: names (``reset --node w3``, ``node add w3``: the run's host limit), or only this machine
Hosts = Literal["all", "control-plane", "workers", "targets", "local"]
#: a table `gpustack plan` prints: (title, column names, rows)
Table = tuple[str, list[str], list[list[str]]]
#: what `gpustack plan COMMAND` shows after the stage table (pure): tables from the config and ``--to``
Details = Callable[["Config", "str | None"], list[Table]]


@dataclass(frozen=True)
class Stage:
    id: str
    title: str
    runner: Runner
    hosts: Hosts  # which hosts it touches
    changes: str  # what it changes, for `gpustack plan`


@dataclass(frozen=True)
class CommandPlan:
    """One command's stages, in order, and the playbook its Ansible stages are plays of."""

    command: str
    summary: str  # one line for `gpustack plan`
    playbook: str  # under playbooks/; play names == stage ids, each play tagged with its id
    stages: tuple[Stage, ...]
    #: the playbook's stages record stamps (playbooks/module_utils/gpustack_stage.py): hosts the
    #: preflight finds converged are left out of a stage's play (see gpustack/render/converge.py)
    converges: bool = False
    #: the command's own playbook variables, beyond the config's (gpustack/render/ansible.py): the
    #: engine refuses any other, and the playbooks must read each (tests/unit/test_layout.py)
    extravars: tuple[str, ...] = ()
    #: how `gpustack plan` names a kind of hosts where this command differs from the usual wording
    host_notes: Mapping[str, str] = field(default_factory=dict)
    #: what `gpustack plan` adds after the stage table
    details: Details | None = None

    @property
    def stage_ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self.stages)

    def _check(self, ids: Sequence[str], flag: str) -> None:
        unknown = [i for i in ids if i not in self.stage_ids]
        if unknown:
            raise UsageError(
                f"{flag}: unknown stage {', '.join(unknown)}; `gpustack {self.command}` stages are: "
                f"{', '.join(self.stage_ids)}"
            )

    def select(self, *, only: Sequence[str] = (), from_: str | None = None, skip: Sequence[str] = ()) -> list[Stage]:
        """Resolve --only/--from/--skip into the ordered stages to run.

        Preflight runs before any selection that changes hosts, unless it is skipped explicitly.
        Contradictions are usage errors, never "run nothing" or "run everything": a stage named by
        both --only and --skip, --from a stage that --skip names, --only with --from.
        """
        self._check(only, "--only")
        self._check(skip, "--skip")
        if from_ is not None:
            self._check([from_], "--from")
        if only and from_:
            raise UsageError("--only and --from cannot be combined")
        both = [s for s in self.stage_ids if s in only and s in skip]
        if both:
            raise UsageError(f"--only and --skip both name {', '.join(both)}: say which one you mean")
        if from_ is not None and from_ in skip:
            after = self.stage_ids[self.stage_ids.index(from_) + 1 :]
            hint = f" (to start after it: --from {after[0]})" if after else ""
            raise UsageError(f"--from {from_} and --skip {from_} contradict each other{hint}")
        stages = list(self.stages)
        if from_:
            stages = stages[self.stage_ids.index(from_) :]
        if only:
            stages = [s for s in stages if s.id in only]
        # every stage that changes something needs the hosts' facts (the cluster stage sizes values from them)
        first = self.stages[0]
        if (
            first.runner == "preflight"
            and stages
            and stages[0] != first
            and any(s.runner != "preflight" for s in stages)
        ):
            stages.insert(0, first)
        stages = [s for s in stages if s.id not in skip]
        if not stages:
            raise UsageError("nothing to run: the selection leaves no stage")
        return stages


#: read-only: every command that changes hosts starts with it
PREFLIGHT = Stage(
    "preflight",
    "Preflight checks",
    "preflight",
    "all",
    "nothing: reads OS, CPU, memory, disk, swap, ports, GPUs, Secure Boot, existing Kubernetes, sudo, time sync, "
    "reachability, cgroup v2, containerd version, GPU Operator support (driver container, kernel headers); tries "
    "the package sources and image registries the selected stages need, through the proxy",
)


def targets(cfg: Config, limit: Sequence[str]) -> list[str]:
    """The node names a run touches: the limit (checked against the config), else every node."""
    names = [n.name for n in cfg.nodes]
    unknown = [n for n in limit if n not in names]
    if unknown:
        raise UsageError(f"unknown node(s) {', '.join(unknown)}; the config has: {', '.join(names)}")
    return [n for n in names if n in limit] if limit else names
