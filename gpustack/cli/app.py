"""The root Typer app and ``main()``: the one place errors become exit codes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpustack.console import Console
from gpustack.errors import GpustackError

app = typer.Typer(
    name="gpustack",
    help="Fresh Ubuntu/Debian GPU servers -> a monitored Kubernetes GPU cluster, proven to work.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="gpustack.yaml (default: ./gpustack.yaml, $GPUSTACK_CONFIG, else this machine as a single node)",
    ),
]
VerboseOpt = Annotated[int, typer.Option("--verbose", "-v", count=True, help="more output (-vv: Ansible -v)")]


def split_csv(values: list[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out += [x.strip() for x in v.split(",") if x.strip()]
    return out


def load_config(path: Path | None, flags: dict[str, Any] | None = None) -> Any:
    from gpustack.config.load import load

    return load(path, flags=flags or None)


def console_for(verbose: int = 0) -> Console:
    return Console(verbosity=verbose)


# Commands register themselves on `app` when imported.
from gpustack.cli import bundle as _bundle  # noqa: E402,F401
from gpustack.cli import commands as _commands  # noqa: E402,F401
from gpustack.cli import reset as _reset  # noqa: E402,F401
from gpustack.cli import version as _version  # noqa: E402,F401


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. Typer/click handle usage errors (exit 2) and --help; gpustack errors are
    mapped here, in one place, to their exit codes with a message and a hint, never a traceback."""
    console = Console()
    try:
        app(args=argv)
    except GpustackError as exc:
        console.error(exc.message, exc.hint)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        console.error("interrupted", "the next `gpustack up` resumes safely: every stage is idempotent")
        sys.exit(130)
