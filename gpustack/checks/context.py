"""What every preflight check shares: the per-node :class:`Context`, the registry the ``@check``
decorator fills, and :func:`host_finding` (a host-layer finding about the context's node).

The check modules (:mod:`~gpustack.checks.preflight`, :mod:`~gpustack.checks.compat`,
:mod:`~gpustack.checks.sources`) import this module; nothing here imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpustack.checks.model import Finding, Status

if TYPE_CHECKING:
    from gpustack.config.model import Config, Node

Facts = Mapping[str, Any]


@dataclass(frozen=True)
class Context:
    node: Node
    cfg: Config
    facts: Facts


Check = Callable[[Context], Finding]
#: every registered check, in registration order (the order of the preflight table)
CHECKS: list[Check] = []


def check(fn: Check) -> Check:
    CHECKS.append(fn)
    return fn


def host_finding(ctx: Context, id_: str, status: Status, summary: str, evidence: str = "", fix: str = "") -> Finding:
    return Finding(
        id=id_,
        layer="host",
        status=status,
        summary=summary,
        host=ctx.node.name,
        evidence=evidence,
        fix=fix,
    )
