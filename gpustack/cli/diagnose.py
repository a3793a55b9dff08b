"""What verify and doctor do the same way once their options are parsed (no command lives here)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import typer

from gpustack.cli.options import CheckArgs, console_for, load_config
from gpustack.console import literal


def run_diagnose(command: str, args: CheckArgs, **own: Any) -> None:
    from gpustack.diagnose.engine import DiagnoseOptions, diagnose

    console = console_for(args.verbose)
    cfg = load_config(args.config).config
    opts = DiagnoseOptions(command=command, **args.selection(), **own)
    if opts.fix:
        from gpustack.commands.up import run_stage

        opts = replace(opts, run_stage=run_stage)
    code, _, _ = diagnose(cfg, opts, console)
    raise typer.Exit(code)


def list_checks(command: str, args: CheckArgs) -> None:
    """``--list``: the checks the same selection (--layer, --check, --ignore) would run, as a
    table or (``-o json``) as ``{"command", "checks": [{"id", "layer", "title", "reads", "fixable"}]}``."""
    import json

    from gpustack.diagnose import registry
    from gpustack.diagnose.engine import DiagnoseOptions, validate
    from gpustack.errors import UsageError

    opts = DiagnoseOptions(command=command, **args.selection())
    validate(opts)
    if opts.output not in ("table", "json"):
        raise UsageError(f"--list --output {opts.output}: the list is a table or json")
    specs = registry.select(command, layers=opts.layers, checks=opts.checks, ignore=opts.ignore)
    if opts.output == "json":
        checks = [
            {"id": s.id, "layer": s.layer, "title": s.title, "reads": s.reads, "fixable": s.fixable} for s in specs
        ]
        typer.echo(json.dumps({"command": command, "checks": checks}, indent=2))
        return
    rows = [[literal(c) for c in (s.id, s.layer, s.title, s.reads)] for s in specs]
    console_for().table(f"gpustack {command} checks", ["id", "layer", "checks", "reads"], rows)
