"""``gpustack render --out DIR``: write every generated file (logic: gpustack.render.files)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpustack.cli.options import ConfigOpt, console_for, examples, load_config
from gpustack.errors import ConfigError, UsageError

#: the examples at the end of its help page
EXAMPLES = examples(
    "gpustack render --out rendered",
    "gpustack render --out rendered --facts RUN/facts",
    "gpustack render --out rendered --force   # over files you edited there",
)


def render(
    out: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="directory to write into (-o is --output elsewhere: a format)")
    ],
    config: ConfigOpt = None,
    facts: Annotated[
        Path | None,
        typer.Option(metavar="DIR", help="a run's facts/ directory (preflight output): values then follow those hosts"),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="overwrite files in DIR that gpustack did not write there (or that were edited)"),
    ] = False,
) -> None:
    """Write every generated file (inventory, extravars, kubeadm config, Helm values, manifests) to DIR."""
    from gpustack.render.files import load_facts, read_facts, render_to

    cfg = load_config(config).config
    console = console_for()
    if facts is not None and not facts.is_dir():
        raise UsageError(f"--facts {facts}: not a directory (use <state>/runs/<run>/facts)")
    if facts is not None:
        from gpustack.checks import preflight  # noqa: F401  (registers every check, P26 among them)
        from gpustack.checks.sharing import refusals

        refused = refusals(cfg, read_facts(facts))
        if refused:
            raise ConfigError("gpu_sharing does not fit the GPUs these hosts have (--facts: P26-gpu-sharing): "
                              + "; ".join(refused))  # fmt: skip
    result = render_to(cfg, out, facts=load_facts(facts), force=force)
    for path, size in result.written:
        console.print(f"{path}  ({size:,} bytes)", markup=False)
    for path in result.removed:
        console.print(f"{path}  (removed: no longer generated)", markup=False)
    for path, why in result.replaced:
        console.warn(f"overwrote {path} (--force): {why}")
    for path, why in result.kept:
        console.warn(f"kept {path}: an earlier render listed it, but {why}")
