"""The GPU alert rules gpustack ships (``gpustack/templates/monitoring/gpu-alerts.rules.yaml``).

The file is a plain Prometheus rule file (``groups:``), usable as-is by ``promtool`` and wrapped
into a ``PrometheusRule`` object for kube-prometheus-stack. The dcgm-exporter job is matched as
``job="dcgm-exporter"`` (the standalone chart's Service name, which the ServiceMonitor uses as the
job); change the rule file if the exporter runs under another Service name.

The file is not a Jinja template: its annotations use Prometheus' own ``{{ $labels.node }}``
templating, which Jinja cannot parse. Read it with :func:`load_rules` / :func:`rules_path` (or
:func:`prometheus_rule` for kube-prometheus-stack), never through ``render_template``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import yaml

from gpustack.paths import resource_file

RULES_FILE = resource_file("templates", "monitoring", "gpu-alerts.rules.yaml")
#: the recording rules `gpustack report` and the capacity dashboard read (group ``gpustack-usage.rules``)
USAGE_RULES_FILE = resource_file("templates", "monitoring", "gpu-usage.rules.yaml")
SEVERITIES = ("critical", "warning", "info")
EXPORTER_JOB = "dcgm-exporter"

Rule = dict[str, Any]


def rules_path() -> Path:
    """Where the rule file lives (inside the package, so it ships with the wheel)."""
    return RULES_FILE


def load_rules(path: Path | None = None) -> dict[str, Any]:
    """The rule file as a dict (``{"groups": [...]}``)."""
    data = yaml.safe_load((path or RULES_FILE).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("groups"), list):
        raise ValueError(f"{path or RULES_FILE}: not a Prometheus rule file (no top-level 'groups' list)")
    return cast(dict[str, Any], data)


def iter_rules(rules: dict[str, Any] | None = None) -> list[tuple[str, Rule]]:
    """``(group name, rule)`` for every rule, alerting and recording, in file order."""
    data = rules if rules is not None else load_rules()
    return [(str(g["name"]), cast(Rule, r)) for g in data["groups"] for r in g.get("rules", [])]


def alert_rules(rules: dict[str, Any] | None = None) -> list[Rule]:
    """The alerting rules only."""
    return [r for _, r in iter_rules(rules) if "alert" in r]


def alert_names(rules: dict[str, Any] | None = None) -> list[str]:
    """Alert names in file order (unique)."""
    seen: dict[str, None] = {}
    for rule in alert_rules(rules):
        seen.setdefault(str(rule["alert"]), None)
    return list(seen)


def alert_expressions(rules: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """``(alert name, expr)`` pairs, for evaluation and metric checks."""
    return [(str(r["alert"]), str(r["expr"])) for r in alert_rules(rules)]


def prometheus_rule(
    name: str = "gpustack-gpu-alerts",
    namespace: str = "monitoring",
    labels: dict[str, str] | None = None,
    rules: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The rules as a ``monitoring.coreos.com/v1`` PrometheusRule.

    kube-prometheus-stack only loads PrometheusRules matching its ``ruleSelector``: by default the
    label ``release: <release name>`` (unless ``ruleSelectorNilUsesHelmValues=false``); pass it in
    ``labels``.
    """
    data = rules if rules is not None else load_rules()
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "gpustack", **(labels or {})},
        },
        "spec": {"groups": data["groups"]},
    }


def severities(rules: dict[str, Any] | None = None) -> dict[str, str]:
    """Alert name -> ``severity`` label."""
    return {str(r["alert"]): str(r.get("labels", {}).get("severity", "")) for r in alert_rules(rules)}


# --- the usage recording rules (gpu-usage.rules.yaml) ---------------------------------------------


def usage_rules_path() -> Path:
    """Where the usage recording rules live (inside the package, beside the alert rules)."""
    return USAGE_RULES_FILE


def load_usage_rules(path: Path | None = None) -> dict[str, Any]:
    """The usage recording rule file as a dict (``{"groups": [...]}``)."""
    return load_rules(path or USAGE_RULES_FILE)


def rule_group_names() -> list[str]:
    """Every rule group gpustack ships, alert rules first, then the usage recording rules: the one list of
    "gpustack's rule groups" that doctor/verify ask Prometheus for (``/api/v1/rules?rule_group[]=``) and that
    M05 expects loaded."""
    return [str(g["name"]) for data in (load_rules(), load_usage_rules()) for g in data["groups"]]


def record_rules(rules: dict[str, Any] | None = None) -> list[Rule]:
    """The recording rules only (``record:``), in file order."""
    data = rules if rules is not None else load_usage_rules()
    return [r for _, r in iter_rules(data) if "record" in r]


#: Prometheus duration units the rule files use for a group's ``interval``
_INTERVAL_UNITS = {"s": 1, "m": 60, "h": 3600}


def usage_rules_interval_s(rules: dict[str, Any] | None = None) -> int:
    """How often Prometheus evaluates the usage recording rules, in seconds (the group's ``interval``: 1m)."""
    data = rules if rules is not None else load_usage_rules()
    [text] = {str(g.get("interval", "")) for g in data["groups"]}
    if not text or text[-1] not in _INTERVAL_UNITS or not text[:-1].isdigit():
        raise ValueError(f"usage rules: group interval {text!r} is not <n>s, <n>m or <n>h")
    return int(text[:-1]) * _INTERVAL_UNITS[text[-1]]
