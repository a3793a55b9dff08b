"""The Prometheus source asks for gpustack's rule groups -- both rule files' -- and M05 judges exactly those.

Behind it: the Prometheus API double (tests/fakes/prometheus_api.py), answering ``/api/v1/rules`` as
Prometheus 3 does (``rule_group[]`` honoured) or as 2.42 does (ignored). The real releases are in
tests/prometheus (test_verify_cli.py, test_golden_paths.py). Here: the regression of issue 16 (only the alert
file's groups were asked for, so a 3.x Prometheus never returned ``gpustack-usage.rules`` and M05 failed on
every healthy cluster), and the double's version following the pins."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs

import pytest

from gpustack.config.model import Config
from gpustack.config.pins import CHARTS, KUBE_PROMETHEUS_STACK_PROMETHEUS, version_tuple
from gpustack.diagnose import checks_monitoring, registry
from gpustack.diagnose.collect import CollectContext
from gpustack.diagnose.collect_prometheus import collect_prometheus
from gpustack.diagnose.snapshot import Snapshot
from gpustack.monitoring.rules import load_rules, load_usage_rules, rule_group_names
from tests.fakes.prometheus_api import IMITATES_MAJOR, FakePrometheus

OTHER = {"name": "kubernetes-apps", "file": "/etc/prometheus/rules/kube.yaml", "interval": 30,
         "rules": [{"name": "KubePodCrashLooping", "type": "alerting", "health": "ok"}]}  # fmt: skip


def shipped_groups() -> list[dict[str, object]]:
    """gpustack's groups as Prometheus lists them once loaded (the operator writes each PrometheusRule to a file)."""
    out = []
    for data, file in ((load_rules(), "gpustack-gpu-alerts.yaml"), (load_usage_rules(), "gpustack-gpu-usage.yaml")):
        for g in data["groups"]:
            rules = [{"name": r.get("alert") or r.get("record"), "type": "alerting" if "alert" in r else "recording",
                      "health": "ok", "lastError": ""} for r in g["rules"]]  # fmt: skip
            out.append({"name": g["name"], "file": f"/etc/prometheus/rules/{file}", "interval": 60, "rules": rules})
    return out


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    fake = FakePrometheus(groups=[OTHER, *shipped_groups()]).start()
    try:
        yield fake
    finally:
        fake.stop()


def collected(fake: FakePrometheus) -> Snapshot:
    ctx = CollectContext(cfg=Config(), command="verify", kubeconfig=None, timeout=30, workload=False,
                         extra={"prometheus_url": fake.url, "exporter_url": "http://127.0.0.1:9"})  # fmt: skip
    snap = Snapshot()
    collect_prometheus(ctx, snap)
    return snap


def m05(snap: Snapshot) -> list[tuple[str, str]]:
    assert checks_monitoring.BOTH
    specs = [s for s in registry.REGISTRY.values() if s.id.startswith("M05-")]
    return [(f.status, f.summary) for f in registry.run(specs, snap)]


def test_the_rule_groups_are_both_files_groups() -> None:
    names = rule_group_names()
    assert names == [g["name"] for g in load_rules()["groups"]] + [g["name"] for g in load_usage_rules()["groups"]]
    assert "gpustack-usage.rules" in names and len(set(names)) == len(names) == 4


@pytest.mark.parametrize("filters", [True, False], ids=["3.x-filters", "2.42-ignores"])
def test_every_gpustack_group_is_asked_for_and_m05_passes(prom: FakePrometheus, filters: bool) -> None:
    prom.rule_filters = filters
    prom.version = KUBE_PROMETHEUS_STACK_PROMETHEUS[1] if filters else "2.42.0"
    snap = collected(prom)
    [rules_request] = [r for r in prom.requests if r.startswith("/api/v1/rules?")]
    asked = parse_qs(rules_request.split("?", 1)[1]).get("rule_group[]", [])
    assert asked == (rule_group_names() if filters else []), "2.42 ignores rule_group[]: it is not sent"
    assert [g["name"] for g in snap.prometheus.rule_groups] == rule_group_names(), "only gpustack's, both files"
    assert [status for status, _ in m05(snap)] == ["pass"]


def test_a_missing_usage_group_still_fails_m05(prom: FakePrometheus) -> None:
    prom.groups = [g for g in prom.groups if g["name"] != "gpustack-usage.rules"]
    [(status, summary)] = m05(collected(prom))
    assert status == "fail" and summary == "1 of 4 gpustack rule groups not loaded"


def test_the_double_answers_filters_as_prometheus_3(prom: FakePrometheus) -> None:
    """v3.14.0 web/api/v1/api.go: type=record drops alert-only groups; an unknown type is bad_data."""
    status, body = prom.rules({"type": ["record"]})
    assert status == 200 and [g["name"] for g in body["data"]["groups"]] == ["gpustack-usage.rules"]
    status, body = prom.rules({"type": ["bogus"]})
    assert status == 400 and body["errorType"] == "bad_data" and 'invalid parameter "type"' in body["error"]
    prom.rule_filters = False  # 2.42: every group, the alert-only ones with no rules left
    _, body = prom.rules({"type": ["record"], "rule_group[]": ["gpustack-usage.rules"]})
    assert len(body["data"]["groups"]) == 5 and sum(bool(g["rules"]) for g in body["data"]["groups"]) == 1


def test_the_double_follows_the_pinned_prometheus() -> None:
    """The double answers like the Prometheus the pinned kube-prometheus-stack deploys: moving the chart pin
    means re-reading its Prometheus version, and a new major means teaching the double its answers."""
    chart, prometheus = KUBE_PROMETHEUS_STACK_PROMETHEUS
    assert CHARTS["kube-prometheus-stack"].version == chart, (
        "the chart pin moved: set KUBE_PROMETHEUS_STACK_PROMETHEUS from its values.yaml "
        "(prometheus.prometheusSpec.image.tag)"
    )
    assert version_tuple(prometheus)[0] == IMITATES_MAJOR, (
        f"Prometheus {prometheus}: the double imitates {IMITATES_MAJOR}.x"
    )
    assert FakePrometheus().version == prometheus
