"""Option types and helpers every command module shares (no command lives here).

The host-changing commands take the same run flags (:func:`run_flags` builds the engine's
:class:`~gpustack.engine.options.RunFlags` from them), ask the same way before a change
(:func:`confirm_or_refuse`) and prove the result the same way (:func:`verify_after`). verify and doctor
take the same check-selection and report options; they are declared once, in :func:`check_options`,
and reach the command as one :class:`CheckArgs`.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any

import typer

from gpustack import commands
from gpustack.console import Console
from gpustack.diagnose.registry import LAYERS
from gpustack.engine.options import RunFlags
from gpustack.errors import UsageError

if typing.TYPE_CHECKING:
    from gpustack.config.model import Config


def input_file_callback(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> Path | None:
    """A file to read, checked before the command starts (missing, a directory, unreadable: exit 2)."""
    from gpustack.paths import check_input_file

    if value is not None and not ctx.resilient_parsing:
        check_input_file(value, param.opts[0])
    return value


def output_file_callback(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> Path | None:
    """A file to write, checked before the command starts: its directory exists and is writable
    (exit 2 naming the flag, rather than a traceback after minutes of collecting)."""
    from gpustack.paths import check_output_path

    if value is not None and not ctx.resilient_parsing:
        check_output_path(value, param.opts[0])
    return value


#: where the config comes from, in the order gpustack looks (gpustack/config/load.py find_config_file)
CONFIG_LOOKUP = "default: $GPUSTACK_CONFIG, else ./gpustack.yaml, else this machine as a single node"
ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", metavar="FILE", help=f"gpustack.yaml ({CONFIG_LOOKUP})"),
]
#: -v where Ansible runs (up, upgrade, reset, node add/remove, doctor --fix): -vv and more reach it
VerboseOpt = Annotated[
    int, typer.Option("--verbose", "-v", count=True, show_default=False, help="more output (-vv: Ansible -v)")
]
#: -v where no Ansible runs
DetailOpt = Annotated[
    int, typer.Option("--verbose", "-v", count=True, show_default=False, help="more output (every step and request)")
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")]
#: the commands that run Ansible stages: their check mode, and the preflight checks they may downgrade
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Ansible check mode: change nothing")]
IgnorePreflightOpt = Annotated[
    list[str] | None, typer.Option(metavar="ID,...", help="preflight check ids/names to downgrade to warnings")
]
AcceptKeysOpt = Annotated[
    bool, typer.Option("--accept-new-host-keys", help="trust and record SSH host keys seen for the first time")
]


def complete_stages(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of a stage id: `up`'s; for `gpustack plan`, every command's (click has not
    parsed plan's COMMAND argument yet when an option's value is completed)."""
    if ctx.info_name in commands.SEQUENCES:
        ids: tuple[str, ...] = commands.SEQUENCES[ctx.info_name].stage_ids
    else:
        ids = tuple(dict.fromkeys(s for seq in commands.SEQUENCES.values() for s in seq.stage_ids))
    done, _, last = incomplete.rpartition(",")
    return [f"{done}," * bool(done) + s for s in ids if s.startswith(last)]


def _complete_layers(incomplete: str) -> list[str]:
    return [layer for layer in LAYERS if layer.startswith(incomplete)]


_UP_STAGES = ", ".join(commands.sequence("up").stage_ids)
StagesOpt = Annotated[
    list[str] | None,
    typer.Option(
        metavar="STAGE,...",
        help=f"stage id(s), comma-separated or repeated: {_UP_STAGES}",
        autocompletion=complete_stages,
    ),
]
FromOpt = Annotated[
    str | None,
    typer.Option(
        "--from", metavar="STAGE", help="start at this stage (one of --only's)", autocompletion=complete_stages
    ),
]


def examples(*lines: str) -> str:
    """A help page's examples, as its epilog (click keeps a paragraph that starts with \\b as written)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


def split_csv(values: list[str] | None, flag: str = "") -> list[str]:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]``. A value that names nothing (``--only ,``,
    ``--skip ''``) is a usage error: it would otherwise select everything or nothing."""
    out: list[str] = []
    for v in values or []:
        items = [x.strip() for x in v.split(",") if x.strip()]
        if not items:
            raise UsageError(f"{flag or 'option'} {v!r}: names nothing (give one or more names, comma-separated)")
        out += items
    return out


def load_config(path: Path | None, flags: dict[str, Any] | None = None) -> Any:
    from gpustack.config.load import load

    return load(path, flags=flags or None)


def console_for(verbose: int = 0) -> Console:
    return Console(verbosity=verbose)


# --- the host-changing commands: one way to take the run flags, ask, and verify -------------------


def run_flags(
    *,
    dry_run: bool = False,
    verbose: int = 0,
    accept_new_host_keys: bool = False,
    ignore_preflight: list[str] | None = None,
) -> RunFlags:
    """The engine's flags from the options every host-changing command takes (``-v`` is gpustack's
    own output; ``-vv`` and more reach Ansible)."""
    return RunFlags(
        dry_run=dry_run,
        verbosity=max(0, verbose - 1),
        accept_new_host_keys=accept_new_host_keys,
        ignore_preflight=tuple(split_csv(ignore_preflight, "--ignore-preflight")),
    )


def confirm_or_refuse(console: Console, question: str, *, yes: bool, verb: str = "run") -> None:
    """Ask before a change. ``--yes`` skips the question; without a terminal to ask on, the command is
    refused (exit 2) rather than run unasked; "no" aborts (exit 1)."""
    if yes:
        return
    if not console.interactive:
        raise UsageError(f"no terminal to confirm on: pass --yes to {verb} non-interactively (or --dry-run)")
    if not console.confirm(question, assume_yes=False):
        raise typer.Abort()


def verify_after(cfg: Config, console: Console, done: str) -> None:
    """``gpustack verify`` after a change; its exit code when it finds problems (``done``: what the
    change achieved, e.g. "the stack is up")."""
    from gpustack.diagnose.engine import DiagnoseOptions, diagnose

    console.print("[stage]▶ verify[/stage]")
    code, _, _ = diagnose(cfg, DiagnoseOptions(command="verify"), console)
    if code:
        console.error(f"{done}, but verify found problems", "run `gpustack doctor` for causes and fixes")
        raise typer.Exit(code)


# --- verify / doctor: one definition of the options they share ------------------------------------

LayerOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--layer",
        metavar="LAYER,...",
        help=f"only these layers (comma-separated or repeated): {', '.join(LAYERS)}",
        autocompletion=_complete_layers,
    ),
]
CheckOpt = Annotated[
    list[str] | None,
    typer.Option("--check", metavar="ID,...", help="only these check ids (or id prefixes like K02; see --list)"),
]
IgnoreOpt = Annotated[list[str] | None, typer.Option("--ignore", metavar="ID,...", help="check ids to leave out")]
#: -o is always --output, the report's format (as in kubectl); never a path
OutputOpt = Annotated[str, typer.Option("--output", "-o", metavar="FORMAT", help="table, json or junit")]
SaveOpt = Annotated[
    Path | None,
    typer.Option(
        "--save",
        metavar="FILE",
        callback=output_file_callback,
        help="also write the report to FILE (.xml: JUnit, else JSON)",
    ),
]
ListOpt = Annotated[bool, typer.Option("--list", help="list the checks (id, layer, what they read) and exit")]
SnapInOpt = Annotated[
    Path | None,
    typer.Option(
        "--from-snapshot",
        metavar="FILE",
        callback=input_file_callback,
        help="analyse a saved snapshot (--save-snapshot) instead of the cluster",
    ),
]
SnapOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--save-snapshot",
        metavar="FILE",
        callback=output_file_callback,
        help="write what was collected to FILE (JSON, 0600)",
    ),
]
KubeconfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        metavar="FILE",
        callback=input_file_callback,
        help="kubeconfig of the cluster (default: $KUBECONFIG, else the admin.conf `gpustack up` fetched, "
        "else ~/.kube/config)",
    ),
]
ContextOpt = Annotated[
    str | None,
    typer.Option("--context", metavar="NAME", help="kubeconfig context to use (default: its current-context)"),
]


@dataclass(frozen=True)
class CheckArgs:
    """The options verify and doctor share, as parsed (field names are the CLI parameter names)."""

    config: ConfigOpt = None
    layer: LayerOpt = None
    check: CheckOpt = None
    ignore: IgnoreOpt = None
    output: OutputOpt = "table"
    save: SaveOpt = None
    list_: ListOpt = False
    from_snapshot: SnapInOpt = None
    save_snapshot: SnapOutOpt = None
    kubeconfig: KubeconfigOpt = None
    context: ContextOpt = None
    verbose: DetailOpt = 0  # doctor's: VerboseOpt (check_options(runs_ansible=True))

    def selection(self) -> dict[str, Any]:
        """The DiagnoseOptions fields these options set."""
        return {
            "layers": tuple(split_csv(self.layer, "--layer")),
            "checks": tuple(split_csv(self.check, "--check")),
            "ignore": tuple(split_csv(self.ignore, "--ignore")),
            "output": self.output,
            "save": self.save,
            "snapshot_in": self.from_snapshot,
            "snapshot_out": self.save_snapshot,
            "kubeconfig": self.kubeconfig,
            "context": self.context,
        }


def check_options(*, runs_ansible: bool = False) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command the :class:`CheckArgs` options: ``fn(args: CheckArgs, **its_own_options)``.

    Typer reads a command's options from its signature, so the wrapper's signature is the command's
    shared options, its own, then --verbose (declared once, on :class:`CheckArgs`; where the command can
    run Ansible, ``runs_ansible``, its help says that -vv reaches it)."""

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        hints = typing.get_type_hints(CheckArgs, include_extras=True)
        if runs_ansible:
            hints["verbose"] = VerboseOpt
        shared = [
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name])
            for f in fields(CheckArgs)
        ]
        own_hints = typing.get_type_hints(fn, include_extras=True)
        own = [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=own_hints[p.name])
            for p in inspect.signature(fn).parameters.values()
            if p.name != "args"
        ]
        names = {f.name for f in fields(CheckArgs)}

        def command(**kwargs: Any) -> None:
            args = CheckArgs(**{k: kwargs.pop(k) for k in list(kwargs) if k in names})
            fn(args, **kwargs)

        params = [p for p in shared if p.name != "verbose"] + own + [p for p in shared if p.name == "verbose"]
        command.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        command.__name__ = fn.__name__
        command.__qualname__ = fn.__qualname__
        command.__doc__ = fn.__doc__
        command.__module__ = fn.__module__
        return command

    return decorate
