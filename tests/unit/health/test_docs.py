"""docs/ says what the code does: the policy tables (generated from the data), every diag/quarantine check id,
every remediation field, the breaker's guarantees."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from gpustack.config.monitoring import Remediation
from gpustack.diag.findings import CHECK_IDS as DIAG_IDS
from gpustack.health.findings import CHECK_IDS as QUARANTINE_IDS
from gpustack.health.xids import xid_policy

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_health_policy", ROOT / "scripts" / "gen_health_policy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_operations_shows_the_policy_as_the_data_says() -> None:
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    assert _generator().render(text) == text, "stale policy tables: python scripts/gen_health_policy.py"
    pol = xid_policy()
    assert f"### Policy version {pol.version}" in text
    for rule in pol.signals:
        assert f"| `{rule.id}` |" in text, rule.id
    for check in [*DIAG_IDS, *QUARANTINE_IDS]:
        assert f"`{check}`" in text, check


def test_operations_states_the_breakers_guarantees() -> None:
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    section = text.split("### The circuit breaker", 1)[1].split("\n### ", 1)[0]
    for words in ("One clock", "`Date` header", "retention independent of the run", "Fail closed", "ledger.json"):
        assert words in section, words


def test_configuration_lists_every_remediation_field() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    for name in Remediation.model_fields:
        assert f"`remediation.{name}`" in text, name
