"""``gpustack init``: write a commented example gpustack.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpustack.cli.options import console_for, examples

#: the examples at the end of its help page
EXAMPLES = examples(
    "gpustack init                  # ./gpustack.yaml: list your nodes in it",
    "gpustack init site.yaml --force",
)


def init(
    path: Annotated[Path, typer.Argument(metavar="FILE", help="where to write the example")] = Path("gpustack.yaml"),
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing file")] = False,
) -> None:
    """Write a commented example gpustack.yaml."""
    from gpustack.config.example import write_example

    write_example(path, force=force)
    console_for().print(f"wrote {path}: edit the nodes, then run `gpustack plan -c {path}`", markup=False)
