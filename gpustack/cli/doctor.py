"""``gpustack doctor``: find known failures, say how to fix them, apply the safe fixes on request."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpustack.cli.diagnose import list_checks, run_diagnose
from gpustack.cli.options import CheckArgs, check_options, examples, output_file_callback
from gpustack.errors import UsageError

#: the examples at the end of its help page
EXAMPLES = examples(
    "gpustack doctor",
    "gpustack doctor --fix",
    "gpustack doctor --bundle support.tar.gz   # for a bug report",
)


@check_options(runs_ansible=True)
def doctor(
    args: CheckArgs,
    fix: Annotated[
        bool, typer.Option("--fix", help="apply the safe fixes for the failures found (shown first), then check again")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="with --fix: apply without asking")] = False,
    bundle: Annotated[
        Path | None,
        typer.Option(
            "--bundle",
            metavar="FILE",
            callback=output_file_callback,
            help="write a support bundle (.tar.gz, secrets redacted, 0600) to FILE",
        ),
    ] = None,
) -> None:
    """Find known failures and say exactly how to fix them. Exit codes as for verify.

    --fix applies only the safe fixes (single-node control-plane taint, host firewall rules, CoreDNS
    restart, ServiceMonitor release label, node-exporter port) after showing them; without a terminal
    it needs --yes. Everything else prints its fix."""
    if args.list_:
        return list_checks("doctor", args)
    if yes and not fix:
        raise UsageError("--yes only applies to --fix")
    run_diagnose("doctor", args, workload=False, fix=fix, assume_yes=yes, bundle=bundle)
