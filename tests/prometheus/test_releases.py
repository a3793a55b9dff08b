"""The real-Prometheus tests run the releases production runs and the oldest gpustack supports.

- newest: exactly the release the pinned kube-prometheus-stack deploys (``pins.KUBE_PROMETHEUS_STACK_PROMETHEUS``,
  from the chart's values.yaml), built from its Go module (tests/realbin/prometheus/go.mod). When the chart pin
  moves, this fails until the tools module requires the Prometheus the new chart deploys; a new major also needs
  the docs to say it is supported.
- oldest: the oldest release doctor/verify/report support (``collect_prometheus.OLDEST_PROMETHEUS``,
  docs/operations.md "Prometheus versions"), which the ``both_prometheus`` tests run as well.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpustack.config.pins import CHARTS, KUBE_PROMETHEUS_STACK_PROMETHEUS, version_tuple
from gpustack.diagnose.collect_prometheus import NEWEST_PROMETHEUS_MAJOR, OLDEST_PROMETHEUS
from tests.realbin import gobuild

from .releases import OLDEST, newest, unavailable

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def runnable(name: str) -> None:
    why = unavailable(name)
    if why:
        pytest.skip(f"Prometheus {name}: {why}")


def test_the_chart_pin_and_its_prometheus_move_together() -> None:
    chart, _ = KUBE_PROMETHEUS_STACK_PROMETHEUS
    assert CHARTS["kube-prometheus-stack"].version == chart, (
        "the kube-prometheus-stack pin moved: set pins.KUBE_PROMETHEUS_STACK_PROMETHEUS from that chart's "
        "values.yaml (prometheus.prometheusSpec.image.tag)"
    )


def test_the_tests_run_the_major_the_pinned_chart_deploys() -> None:
    runnable("newest")
    deployed = version_tuple(KUBE_PROMETHEUS_STACK_PROMETHEUS[1])
    assert deployed[0] == NEWEST_PROMETHEUS_MAJOR, (
        f"kube-prometheus-stack deploys Prometheus {KUBE_PROMETHEUS_STACK_PROMETHEUS[1]}: gpustack supports "
        f"up to {NEWEST_PROMETHEUS_MAJOR}.x (docs/operations.md)"
    )
    assert newest().version == KUBE_PROMETHEUS_STACK_PROMETHEUS[1], (
        f"the real-Prometheus tests run {newest()}, production runs {KUBE_PROMETHEUS_STACK_PROMETHEUS[1]}"
    )


def test_the_tools_module_requires_the_deployed_prometheus() -> None:
    """Checked without building: the version tests/realbin/prometheus/go.mod requires is the deployed one."""
    module = gobuild.MODULES["prometheus"]
    assert gobuild.prometheus_release(module.version) == KUBE_PROMETHEUS_STACK_PROMETHEUS[1], (
        f"{module.dir / 'go.mod'} requires {module.upstream} {module.version}; kube-prometheus-stack "
        f"{KUBE_PROMETHEUS_STACK_PROMETHEUS[0]} deploys Prometheus {KUBE_PROMETHEUS_STACK_PROMETHEUS[1]} "
        f"(module v0.{''.join(KUBE_PROMETHEUS_STACK_PROMETHEUS[1].split('.')[:1])}"
        f"{int(KUBE_PROMETHEUS_STACK_PROMETHEUS[1].split('.')[1]):02d}.{KUBE_PROMETHEUS_STACK_PROMETHEUS[1].split('.')[2]})"
    )


def test_the_oldest_release_tested_is_the_oldest_supported() -> None:
    runnable("oldest")
    assert OLDEST.version_tuple[:2] == OLDEST_PROMETHEUS, f"{OLDEST} is not {OLDEST_PROMETHEUS}"
    assert newest().version_tuple > OLDEST.version_tuple


def test_the_docs_state_the_supported_range() -> None:
    text = DOCS.read_text(encoding="utf-8")
    section = re.search(r"^## Prometheus versions\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, "docs/operations.md has a '## Prometheus versions' section"
    oldest = ".".join(map(str, OLDEST_PROMETHEUS))
    assert f"{oldest} to {NEWEST_PROMETHEUS_MAJOR}.x" in section.group(1)
    assert KUBE_PROMETHEUS_STACK_PROMETHEUS[1] in section.group(1)


CLASSIC_METRIC = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
CLASSIC_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def test_every_name_gpustack_writes_or_reads_is_a_classic_name() -> None:
    """Prometheus 3 also accepts UTF-8 names (quoted); gpustack needs none, so every release reads its rules,
    recorded series and panels alike (docs/operations.md)."""
    from gpustack.monitoring.dashboard import load_capacity_dashboard, load_dashboard, panel_queries
    from gpustack.monitoring.promql import metric_names
    from gpustack.monitoring.rules import iter_rules, load_rules, load_usage_rules

    rules = [r for data in (load_rules(), load_usage_rules()) for _, r in iter_rules(data)]
    exprs = [str(r["expr"]) for r in rules] + [e for d in (load_dashboard(), load_capacity_dashboard())
                                               for _, e in panel_queries(d)]  # fmt: skip
    metrics = {str(r["record"]) for r in rules if "record" in r} | {m for e in exprs for m in metric_names(e)}
    labels = {str(k) for r in rules for k in (r.get("labels") or {})}
    assert metrics and labels
    assert [m for m in sorted(metrics) if not CLASSIC_METRIC.match(m)] == []
    assert [k for k in sorted(labels) if not CLASSIC_LABEL.match(k)] == []
