"""``gpustack plan [COMMAND]``: the ordered stages a command would run and what each changes; touches nothing."""

from __future__ import annotations

from typing import Annotated

import typer

from gpustack import commands
from gpustack.cli.options import ConfigOpt, FromOpt, complete_stages, console_for, examples, load_config, split_csv
from gpustack.console import literal

#: the examples at the end of its help page
EXAMPLES = examples(
    "gpustack plan                  # what `up` would do, on which hosts",
    "gpustack plan node-add w3",
    "gpustack plan upgrade --to 1.36",
)

_EVERY = "; ".join(f"{c}: {', '.join(s.stage_ids)}" for c, s in commands.SEQUENCES.items())
PlanStagesOpt = Annotated[
    list[str] | None,
    typer.Option(
        metavar="STAGE,...",
        help=f"stage id(s) of COMMAND, comma-separated or repeated ({_EVERY})",
        autocompletion=complete_stages,
    ),
]


def _complete_command(incomplete: str) -> list[str]:
    """`gpustack plan <TAB>`: the commands that have a plan (the registry in gpustack/commands/)."""
    return [c for c in commands.SEQUENCES if c.startswith(incomplete)]


def plan(
    command: Annotated[
        str,
        typer.Argument(
            metavar="COMMAND",
            help=f"the command whose stages to show: {', '.join(commands.SEQUENCES)}",
            autocompletion=_complete_command,
        ),
    ] = "up",
    names: Annotated[
        list[str] | None,
        typer.Argument(metavar="NODE", help="node-add, node-remove, node-patch, reset: the nodes the command names"),
    ] = None,
    config: ConfigOpt = None,
    only: PlanStagesOpt = None,
    from_: FromOpt = None,
    skip: PlanStagesOpt = None,
    to: Annotated[
        str | None, typer.Option("--to", metavar="VERSION", help="upgrade: the target version (shows each node's turn)")
    ] = None,
) -> None:
    """Print the ordered stages a command (default: up) would run and what each changes; touches nothing."""
    from gpustack.config import target
    from gpustack.engine.plan import targets

    console = console_for()
    seq = commands.sequence(command)
    stages = seq.select(only=split_csv(only, "--only"), from_=from_, skip=split_csv(skip, "--skip"))
    loaded = load_config(config)
    cfg = loaded.config
    where = {
        "all": ", ".join(n.name for n in cfg.nodes),
        "control-plane": cfg.control_plane.name,
        "workers": ", ".join(n.name for n in cfg.workers) or "(none)",
        "targets": "the nodes named on the command line",
        "local": "this machine",
        **seq.host_notes,
    }
    if names:
        where["targets"] = ", ".join(targets(cfg, split_csv(names, "NODE")))
    rows = [[str(i), literal(s.id), literal(where[s.hosts]), literal(s.changes)] for i, s in enumerate(stages, 1)]
    # everything is worked out before the first line is printed: a bad --to is an error alone
    details = list(seq.details(cfg, to)) if seq.details else []
    console.print(target.announcement(loaded), markup=False)
    console.table(f"gpustack {seq.command} would run", ["#", "stage", "hosts", "changes"], rows)
    for title, columns, table in details:
        console.table(title, columns, [[literal(c) for c in r] for r in table])
