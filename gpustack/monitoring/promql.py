"""Small, dependency-free PromQL helpers: which metric names an expression reads. Pure.

This is a lexical scan, not a parser: it is good enough for the expressions gpustack writes
(rules and dashboard panels) and is checked against them in the tests, with Prometheus itself
evaluating every expression in ``tests/prometheus``.
"""

from __future__ import annotations

import re

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:.$])([A-Za-z_:][A-Za-z0-9_:]*)(?![\w:])(?!\s*\()")
KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "offset",
        "bool",
        "inf",
        "nan",
        "atan2",
        "start",
        "end",
    }
)


def _strip(expr: str) -> str:
    """Remove strings, label matchers, ranges and grouping label lists (none of them name metrics)."""
    out = _STRINGS.sub('""', expr)
    out = _MATCHERS.sub(" ", out)
    out = _RANGES.sub(" ", out)
    return _GROUPING.sub(" ", out)


def metric_names(expr: str) -> set[str]:
    """Metric names read by ``expr`` (functions, keywords, label names and numbers excluded).

    >>> sorted(metric_names('sum by (node) (rate(foo_total{a="b"}[5m])) / on (node) bar'))
    ['bar', 'foo_total']
    """
    names = {m.group(1) for m in _IDENT.finditer(_strip(expr))}
    return {n for n in names if n.lower() not in KEYWORDS}


def selector_metric(selector: str) -> str | None:
    """The metric name of a plain series selector such as ``up{job="x"}`` (``None`` if it has none)."""
    match = re.match(r"\s*([A-Za-z_:][A-Za-z0-9_:]*)", selector)
    return match.group(1) if match else None
