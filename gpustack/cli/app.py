"""The root Typer app, the list of commands, and ``main()``: the one place errors become exit codes.

Each command lives in its own module (``gpustack/cli/<command>.py``) and knows nothing of ``app``;
it is registered here with one line. Shared option types and helpers are in ``gpustack.cli.options``.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Annotated

import typer

from gpustack import __version__
from gpustack.cli import (
    bundle,
    doctor,
    grafana_password,
    init,
    node,
    plan,
    render,
    reset,
    status,
    up,
    upgrade,
    verify,
    version,
)
from gpustack.cli import diag as diag_cmd
from gpustack.cli import health as health_cmd
from gpustack.cli import report as report_cmd
from gpustack.console import Console
from gpustack.errors import GpustackError, Interrupted

app = typer.Typer(
    name="gpustack",
    help="Fresh Ubuntu/Debian GPU servers -> a monitored Kubernetes GPU cluster, proven to work.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # --install-completion / --show-completion (bash, zsh, fish), for the `gpustack` executable
    add_completion=True,
    # click's plain help: it never cuts an option's name and wraps at any terminal width (rich's
    # help boxes cut `--accept-new-host…` at 80 columns)
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"gpustack {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="print gpustack's version and exit"),
    ] = False,
) -> None:
    """Fresh Ubuntu/Debian GPU servers -> a monitored Kubernetes GPU cluster, proven to work."""


# The commands, in the order `gpustack --help` lists them: one line each.
app.command("up")(up.up)
app.command("grafana-password")(grafana_password.grafana_password)
app.command("plan")(plan.plan)
app.command("render")(render.render)
app.command("init")(init.init)
app.command("version")(version.version)
app.command("verify")(verify.verify)
app.command("doctor")(doctor.doctor)
app.command("reset")(reset.reset)
app.command("upgrade")(upgrade.upgrade)
app.add_typer(bundle.bundle_app, name="bundle")
app.add_typer(node.node_app, name="node")
app.command("status")(status.status)
app.command("diag")(diag_cmd.diag)
app.add_typer(health_cmd.health_app, name="health")
app.command("report")(report_cmd.report)


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted("interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}")


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. Typer/click handle usage errors (exit 2) and --help; gpustack errors are
    mapped here, in one place, to their exit codes with a message and a hint, never a traceback.

    Ctrl-C and SIGTERM raise :class:`Interrupted` (click would turn a KeyboardInterrupt into
    "Aborted!" and exit 1): exit 130 with what was interrupted and how to resume."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _raise_interrupted)
    try:
        app(args=argv, prog_name="gpustack")
    except GpustackError as exc:
        Console().error(exc.message, exc.hint)
        sys.exit(exc.exit_code)
    except Interrupted as exc:
        Console().error(exc.message, exc.hint or "run the command again: every stage is idempotent and resumes safely")
        sys.exit(Interrupted.exit_code)
