"""docs/ says what the code does: every policy rule, every diag/quarantine check id, every remediation field."""

from __future__ import annotations

from pathlib import Path

from gpustack.config.monitoring import Remediation
from gpustack.diag.findings import CHECK_IDS as DIAG_IDS
from gpustack.health.policy import FATAL_XIDS, POLICY_VERSION, RULES
from gpustack.health.runner import CHECK_IDS as QUARANTINE_IDS

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_operations_lists_the_policy_and_every_check_id() -> None:
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    assert f"### Policy version {POLICY_VERSION}" in text
    for rule in RULES:
        assert f"| `{rule.id}` |" in text, rule.id
    for code in FATAL_XIDS:
        assert f"XID {code} (" in text
    for check in [*DIAG_IDS, *QUARANTINE_IDS]:
        assert f"`{check}`" in text, check


def test_configuration_lists_every_remediation_field() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    for name in Remediation.model_fields:
        assert f"`remediation.{name}`" in text, name
