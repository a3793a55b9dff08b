"""M05 covers gpustack's usage recording rules (what `gpustack report` and the capacity dashboard read)."""

from __future__ import annotations

from gpustack.diagnose import checks_monitoring, registry
from gpustack.diagnose.snapshot import Snapshot
from gpustack.monitoring.rules import load_rules, load_usage_rules


def m05(groups: list[dict[str, object]]) -> list[tuple[str, str, str]]:
    assert checks_monitoring.BOTH
    s = Snapshot()
    s.prometheus.reachable = True
    s.prometheus.rule_groups = groups
    specs = [spec for spec in registry.REGISTRY.values() if spec.id.startswith("M05-")]
    return [(f.status, f.summary, f.evidence) for f in registry.run(specs, s)]


def test_usage_group_missing_or_failing_is_a_failure() -> None:
    alerts = [{"name": g["name"], "rules": []} for g in load_rules()["groups"]]
    usage = [{"name": g["name"], "rules": [{"name": "gpustack:gpu_activity:ratio", "health": "ok"}]}
             for g in load_usage_rules()["groups"]]  # fmt: skip
    assert [s for s, _, _ in m05(alerts + usage)] == ["pass"]
    [(status, summary, evidence)] = m05(alerts)
    assert status == "fail" and "1 of 4 gpustack rule groups not loaded" in summary
    assert "missing: gpustack-usage.rules" in evidence
    usage[0]["rules"] = [{"name": "gpustack:gpu_activity:ratio", "health": "err", "lastError": "bad"}]
    [(status, summary, evidence)] = m05(alerts + usage)
    assert status == "fail" and "gpustack:gpu_activity:ratio: bad" in evidence
