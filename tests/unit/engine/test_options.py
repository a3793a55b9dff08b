"""RunFlags -> RunOptions: the one way a command builds the engine's options; LateVars."""

from __future__ import annotations

from dataclasses import dataclass, fields

from gpustack.commands.up import PLAN as UP
from gpustack.engine.options import LateVars, RunFlags, RunOptions


@dataclass(frozen=True)
class DemoOptions(RunFlags):
    node: str
    purge: bool = False


def test_a_commands_options_carry_the_flags_to_the_engine() -> None:
    flags = RunFlags(dry_run=True, verbosity=2, accept_new_host_keys=True, ignore_preflight=("P01",))
    own = DemoOptions.from_flags(flags, node="w1", purge=True)
    assert (own.node, own.purge, own.dry_run, own.ignore_preflight) == ("w1", True, True, ("P01",))
    opts = own.run_options(UP.select(only=["os"]), limit=["w1"], extravars={"gpustack_x": 1})
    assert isinstance(opts, RunOptions)
    assert {f.name: getattr(opts, f.name) for f in fields(RunFlags)} == {
        f.name: getattr(flags, f.name) for f in fields(RunFlags)
    }
    assert [s.id for s in opts.stages] == ["preflight", "os"] and opts.limit == ["w1"]
    assert not hasattr(opts, "node"), "a command's own options stay with the command"


def test_late_vars_are_read_when_the_playbook_starts() -> None:
    late = LateVars({"a": 1})
    seen = late  # what the engine holds from the start
    late.update({"b": 2})
    assert dict(seen) == {"a": 1, "b": 2} and len(seen) == 2
