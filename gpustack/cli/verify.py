"""``gpustack verify``: prove every layer works end to end (the logic is gpustack.diagnose)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpustack.cli.diagnose import list_checks, run_diagnose
from gpustack.cli.options import CheckArgs, check_options, examples

#: the examples at the end of its help page
EXAMPLES = examples(
    "gpustack verify",
    "gpustack verify --layer gpu-operator,monitoring -o junit --save verify.xml",
)


@check_options()
def verify(
    args: CheckArgs,
    load: Annotated[
        bool, typer.Option("--load", help="also run dcgmproftester on one GPU and check the metrics move")
    ] = False,
    no_workload: Annotated[
        bool, typer.Option("--no-workload", help="start no test pod (pod-network probe, CUDA pod)")
    ] = False,
) -> None:
    """Prove every layer works end to end. Exit 0 all pass, 1 failures, 2 usage, 3 cluster unreachable."""
    if args.list_:
        return list_checks("verify", args)
    run_diagnose("verify", args, load=load, workload=not no_workload)
