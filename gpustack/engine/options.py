"""How a command tells the engine what to run: :class:`RunOptions`, built one way from the
:class:`RunFlags` every host-changing command takes on its command line, and :class:`LateVars`, the
command's playbook variables that only the preflight's facts decide."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from gpustack.engine.plan import Stage

F = TypeVar("F", bound="RunFlags")


@dataclass(frozen=True, kw_only=True)
class RunFlags:
    """What every host-changing command takes from its command line, the same way (cli/options.py
    ``run_flags``); a command's own options extend it, and :meth:`run_options` hands it to the engine."""

    dry_run: bool = False
    verbosity: int = 0
    accept_new_host_keys: bool = False
    ignore_preflight: tuple[str, ...] = ()

    @classmethod
    def from_flags(cls: type[F], flags: RunFlags, **own: Any) -> F:
        """A command's options: the shared flags, plus its own."""
        return cls(**{f.name: getattr(flags, f.name) for f in fields(RunFlags)}, **own)

    def run_options(self, stages: Sequence[Stage], **more: Any) -> RunOptions:
        """The engine's options: these flags, the stages and what the command adds (``limit``,
        ``extravars``, ``stage_nodes``, ``facts``, ``full``)."""
        shared = {f.name: getattr(self, f.name) for f in fields(RunFlags)}
        return RunOptions(stages=tuple(stages), **{**shared, **more})


@dataclass(frozen=True)
class RunOptions(RunFlags):
    stages: Sequence[Stage]
    #: node names the playbook runs on (``--limit``); empty: every node in the config
    limit: Sequence[str] = ()
    #: host facts already known (node -> gpustack_facts output), for a run without preflight
    facts: Mapping[str, Any] | None = None
    #: visit every host in every stage, even where the preflight found the stage converged
    full: bool = False
    #: the command's own playbook variables (on top of the config's); names from its plan's ``extravars``
    extravars: Mapping[str, Any] = field(default_factory=dict)
    #: stage id -> the only nodes its play may visit (``node add``: the new nodes); stages not
    #: named here visit their whole group (less the converged hosts)
    stage_nodes: Mapping[str, Sequence[str]] = field(default_factory=dict)


class LateVars(Mapping[str, Any]):
    """A command's playbook variables known only once the preflight read the facts: the command's
    guard fills them in (:meth:`update`), the engine reads them when the playbook starts."""

    def __init__(self, initial: Mapping[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = dict(initial or {})

    def update(self, values: Mapping[str, Any]) -> None:
        self._values.update(values)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)
