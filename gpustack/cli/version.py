"""``gpustack version``: gpustack's version, the pinned components, the compatibility matrix and
every artifact a run downloads with its checksum (logic: gpustack/config/compat.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gpustack import __version__
from gpustack.cli.options import console_for, examples, load_config
from gpustack.console import Console, literal
from gpustack.errors import UsageError

#: the examples at the end of its help page
EXAMPLES = examples(
    "gpustack version",
    "gpustack version -c site.yaml -o json",
)


def print_versions(console: Console, cfg: object | None) -> None:
    """The pins, the matrix line(s) and the artifacts as tables (``plan`` prints them too)."""
    from gpustack.config import compat
    from gpustack.config.model import Config

    for title, columns, rows in compat.version_tables(cfg if isinstance(cfg, Config) else None):
        console.table(title, columns, [[literal(c) for c in r] for r in rows])


def version(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            metavar="FILE",
            help="show the versions this gpustack.yaml chooses (default: the pin table)",
        ),
    ] = None,
    output: Annotated[str, typer.Option("--output", "-o", metavar="FORMAT", help="table or json")] = "table",
) -> None:
    """Print gpustack's version, the pinned components, the compatibility matrix and every
    artifact with its checksum."""
    from gpustack.config import compat

    if output not in ("table", "json"):
        raise UsageError(f"--output {output}: use table or json")
    cfg = load_config(config).config if config is not None else None
    console = console_for()
    if output == "json":
        typer.echo(json.dumps({"gpustack": __version__, **compat.report(cfg)}, indent=2))
        return
    console.print(f"gpustack {__version__}")
    print_versions(console, cfg)
