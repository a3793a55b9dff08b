"""The XID policy data (gpustack/templates/health/xid-policy.yaml): complete, every XID issue 17 names decided with a reason,
the facts as NVIDIA's catalogue and the legacy CSV write them, and the same XID lists in the alert rule."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from gpustack.errors import GpustackError
from gpustack.health.xids import POLICY_FILE, parse, ranges, xid_policy
from gpustack.monitoring.counters import parse_counters
from gpustack.render.values import render_values
from tests.unit.render.test_values import VARIANTS

RULES = Path(__file__).resolve().parents[3] / "gpustack" / "templates" / "monitoring" / "gpu-alerts.rules.yaml"
#: every XID issue 17 names, and the action gpustack chose (144-150 as issue 29 corrected them)
NAMED = {95: "reset", 140: "reset", 46: "reset", 62: "reset", 109: "reset", 110: "reset", 136: "reset", 143: "reset",
         **dict.fromkeys((144, 145, 146, 149, 150), "reset"), 147: "alert", 148: "alert", 155: "reset", 156: "reset", 158: "reset", 160: "alert",
         162: "alert", 63: "alert", 92: "alert", 94: "alert", 48: "reset", 64: "rma", 74: "reset", 79: "reboot",
         119: "reset", 120: "reset"}  # fmt: skip


def test_every_named_xid_is_decided_with_a_reason() -> None:
    pol = xid_policy()
    for code, action in NAMED.items():
        row = pol.row(code)
        assert row.decided and row.action == action and len(row.reason) > 30, code
    # where the legacy CSV and the current catalogue disagree, the reason says which was followed
    for code in (109, 160, 162):
        assert "legacy CSV" in pol.row(code).reason and "catalogue" in pol.row(code).reason


@pytest.mark.parametrize(
    ("code", "mnemonic", "bucket", "legacy"),
    [(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", "WORKFLOW_XID_48 FATAL"),
     (160, "CHANNEL_RETIREMENT_EVENT", "IGNORE", "RESTART_BM FATAL"),
     (162, "PSHC_REENGAGED", "", "RESET_GPU FATAL"),
     (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU", "RESET_GPU NONFATAL (FATAL at 6f8b0fcf)"),
     (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP", "RESTART_APP NONFATAL"),
     (172, "UNCORRECTABLE_SRAM_ERROR", "", "")],
)  # fmt: skip
def test_facts_as_the_sources_write_them(code: int, mnemonic: str, bucket: str, legacy: str) -> None:
    row = xid_policy().row(code)
    assert (row.mnemonic, row.bucket, row.legacy) == (mnemonic, bucket, legacy)


def test_complete_and_ordered() -> None:
    pol = xid_policy()
    assert sorted(pol.rows) == list(range(1, 173))  # the catalogue lists 1-172
    assert pol.row(500).action == "rma" and pol.row(500).bucket == "?"  # an XID of a newer driver
    assert [a.id for a in sorted(pol.actions.values(), key=lambda a: a.rank)] == ["alert", "reset", "reboot", "rma"]
    assert [a.quarantine for a in sorted(pol.actions.values(), key=lambda a: a.rank)] == [False, True, True, True]
    assert pol.device_plugin_ignores == {13, 31, 43, 45, 68, 109}
    assert {s.id for s in pol.signals} >= {"xid", "xid-last", "row-remap-failure", "row-remap-pending",
                                           "uncorrectable-remapped-rows-growth", "gpu-allocatable-below-capacity"}  # fmt: skip
    assert all(v.get("repo") and v.get("path") and v.get("commit") for v in pol.sources.values())


def _data() -> dict:
    return yaml.safe_load(POLICY_FILE.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["decisions"].append({"xids": [95], "action": "reset", "reason": "again"}), "decided twice"),
        (lambda d: d["decisions"].append({"xids": [500], "action": "reboot", "reason": "x"}), "not listed"),
        (lambda d: d["decisions"][0].update(action="panic"), "unknown action"),
        (lambda d: d["xids"].update({173: ["X", "y", "NEW_BUCKET", ""]}), "has no action under buckets"),
        (lambda d: d["actions"].reverse(), "in that order"),
    ],
)
def test_bad_data_is_refused_with_the_entry(change, message: str) -> None:  # type: ignore[no-untyped-def]
    data = copy.deepcopy(_data())
    change(data)
    with pytest.raises(GpustackError, match=message):
        parse(data)


def test_ranges() -> None:
    assert ranges([5, 1, 2, 3, 9, 10]) == "1-3, 5, 9-10" and ranges([]) == ""


def test_the_critical_xid_alert_lists_what_the_policy_quarantines() -> None:
    pol = xid_policy()
    rule = next(r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
                if r.get("alert") == "GPUXidCritical")  # fmt: skip
    branches = re.findall(r'err_code=~"([0-9|]+)"\}\s*(or DCGM_FI_DEV_XID_ERRORS > (\d+)\s*)?\), "action", "(\w+)"',
                          rule["expr"])  # fmt: skip
    got = {action: sorted(int(c) for c in codes.split("|")) for codes, _, _, action in branches}
    assert got == {a: pol.xids_for(a) for a in ("reset", "reboot", "rma")}
    [(_, _, above, _)] = [b for b in branches if b[2]]
    assert int(above) == max(pol.rows) and pol.unknown[0] == "rma"


@pytest.mark.parametrize("variant", ["default", "operator-exporter"])
def test_the_rendered_exporter_config_emits_what_the_policy_reads(variant: str) -> None:
    raw, facts = VARIANTS[variant]
    from gpustack.config.model import Config

    values = render_values(Config.model_validate(raw), facts)
    csv = (values["dcgm-exporter"]["customMetrics"] if "dcgm-exporter" in values
           else values["gpu-operator"]["dcgmExporter"]["config"]["data"])  # fmt: skip
    names = {c.name for c in parse_counters(csv).counters}
    assert {"DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
            "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"} <= names  # fmt: skip
