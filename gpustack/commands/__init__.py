"""The host-changing commands, one module each (``up``, ``reset``, ``upgrade``, ``components``,
``node_add``, ``node_remove``): its ``PLAN`` (a :class:`~gpustack.engine.plan.CommandPlan`: stages,
playbook, its own playbook variables), its guard and extra vars as pure functions, and the function
that hands them to the engine (:mod:`gpustack.engine.run`).

This package collects the plans as :mod:`gpustack.diagnose.registry` collects checks: every module
here is imported and its ``PLAN`` registered under ``PLAN.command``. A new command is a new module;
nothing else in this package changes. The modules import only light modules at the top (the CLI
reads the plans for its help text): the engine and the runners are imported where they run.
"""

from __future__ import annotations

import importlib
import pkgutil

from gpustack.engine.plan import CommandPlan
from gpustack.errors import UsageError


def _collect() -> dict[str, CommandPlan]:
    plans: dict[str, CommandPlan] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        plan = getattr(importlib.import_module(f"{__name__}.{info.name}"), "PLAN", None)
        if not isinstance(plan, CommandPlan):
            raise TypeError(f"{__name__}.{info.name} defines no PLAN")
        if plan.command in plans:
            raise ValueError(f"two commands named {plan.command}")
        plans[plan.command] = plan
    return plans


#: every host-changing command's plan, by command name (``gpustack plan COMMAND``)
SEQUENCES: dict[str, CommandPlan] = _collect()


def sequence(command: str) -> CommandPlan:
    """The plan of one command; UsageError for a command that has none."""
    try:
        return SEQUENCES[command]
    except KeyError:
        raise UsageError(f"no plan for {command!r}: commands with a plan are {', '.join(SEQUENCES)}") from None
