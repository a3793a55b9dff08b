"""What verify and doctor do the same way once their options are parsed (no command lives here)."""

from __future__ import annotations

from typing import Any

import typer

from gpustack.cli.options import CheckArgs, console_for, load_config


def run_diagnose(command: str, args: CheckArgs, **own: Any) -> None:
    from gpustack.diagnose.engine import DiagnoseOptions, diagnose

    console = console_for(args.verbose)
    cfg = load_config(args.config).config
    opts = DiagnoseOptions(command=command, **args.selection(), **own)
    code, _, _ = diagnose(cfg, opts, console)
    raise typer.Exit(code)


def list_checks(command: str) -> None:
    from gpustack.diagnose import registry

    console = console_for()
    rows = [[s.id, s.layer, s.title, s.reads] for s in registry.select(command)]
    console.table(f"gpustack {command} checks", ["id", "layer", "checks", "reads"], rows)
