"""Failure scenarios on a live Prometheus: switch one replayed exporter and watch the alerts and
the problem panels react. (Hold durations of minutes are exercised in ``rules_tests``; here an
alert with ``for:`` is expected to turn pending, one without to fire.)"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gpustack.monitoring.dashboard import concretize, load_dashboard, panel_queries

from .harness import Stack, wait_for

TIMEOUT = 30.0


@contextmanager
def scenario(stack: Stack, node: str, name: str) -> Iterator[None]:
    """Run the block with ``node`` in scenario ``name``; always return it to healthy."""
    stack.set_scenario(node, name)
    try:
        yield
    finally:
        stack.set_scenario(node, "healthy")


def wait_alert(stack: Stack, alertname: str, state: str, **labels: str) -> dict[str, Any]:
    """Wait for an alert in ``state`` whose labels include ``labels``; return it."""

    def probe() -> dict[str, Any] | None:
        for alert in stack.prometheus.alerts():
            got = alert["labels"]
            if got["alertname"] == alertname and alert["state"] == state and labels.items() <= got.items():
                return alert
        return None

    return wait_for(f"{alertname} {state} {labels}", probe, timeout=TIMEOUT)


def panel_rows(stack: Stack, title: str) -> list[dict[str, Any]]:
    [expr] = [e for t, e in panel_queries(load_dashboard()) if t == title]
    return stack.prometheus.query(concretize(expr))


def test_xid79_fires_critical_and_fills_the_xid_table(scenario_stack: Stack) -> None:
    with scenario(scenario_stack, "node-a", "xid79"):
        alert = wait_alert(scenario_stack, "GPUXidCritical", "firing", node="node-a", gpu="3", err_code="79")
        assert alert["labels"]["severity"] == "critical" and alert["labels"]["action"] == "reboot"
        assert (
            alert["annotations"]["summary"]
            == "node-a GPU 3: critical XID 79 (GPU has fallen off the bus), needs reboot"
        )
        rows = wait_for(
            "XID table row", lambda: panel_rows(scenario_stack, "XID Errors (last XID per GPU)"), timeout=TIMEOUT
        )
        assert [(r["metric"]["node"], r["metric"]["gpu"], r["value"][1]) for r in rows] == [("node-a", "3", "79")]


def test_overheating_gpu_turns_temperature_alerts_pending(scenario_stack: Stack) -> None:
    with scenario(scenario_stack, "node-a", "overheat"):
        wait_alert(scenario_stack, "GPUTemperatureCritical", "pending", node="node-a", gpu="5")
        wait_alert(scenario_stack, "GPUMemoryTemperatureCritical", "pending", node="node-a", gpu="5")
        wait_alert(scenario_stack, "GPUClockThrottledUnderLoad", "pending", node="node-a", gpu="5")


def test_row_remap_failure_fires(scenario_stack: Stack) -> None:
    with scenario(scenario_stack, "node-b", "row_remap_failure"):
        wait_alert(scenario_stack, "GPURowRemapFailure", "firing", node="node-b", gpu="1")
        wait_alert(scenario_stack, "GPUUncorrectableRemappedRowsIncreased", "firing", node="node-b", gpu="1")
        wait_alert(scenario_stack, "GPURowRemapPending", "pending", node="node-b", gpu="1")


def test_full_framebuffer_turns_pending(scenario_stack: Stack) -> None:
    with scenario(scenario_stack, "node-b", "fb_full"):
        alert = wait_alert(scenario_stack, "GPUFramebufferNearlyFull", "pending", node="node-b", gpu="0")
        assert alert["labels"]["exported_pod"] == "train-mixtral-0"
        assert float(alert["value"]) > 0.95


def test_missing_gpu_is_noticed_against_allocatable(scenario_stack: Stack) -> None:
    with scenario(scenario_stack, "node-b", "gpu_missing"):
        alert = wait_alert(scenario_stack, "GPUsMissingFromMetrics", "pending", node="node-b")
        assert float(alert["value"]) == 1.0
