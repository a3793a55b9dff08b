"""``gpustack report`` on a golden-path cluster: the CLI in its own process, through the API server's service proxy to
the real Prometheus (no ``--prometheus-url``: the path a user takes), its JSON read back. Shared by the golden paths
that check the report's figures (busy, all-MIG, the first minute)."""

from __future__ import annotations

import json
from typing import Any

from .cli_cluster import run_cli
from .test_golden_paths import Golden


def report_json(g: Golden, since: str = "1h") -> dict[str, Any]:
    """The report over the last ``since``, as JSON; asserts it exits 0."""
    proc = run_cli("report", g.kubeconfig, g.workdir, state=g.state, args=("--since", since, "--output", "json"))
    assert proc.returncode == 0, f"report: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def now_figures(report: dict[str, Any]) -> dict[str, Any]:
    """The report's figures at the end of its window: GPUs allocatable, allocated, starting, free, pending, and the
    pods waiting (``namespace/pod`` -> GPUs)."""
    now = report["now"]
    figures = {k: now[k] for k in ("allocatable_gpus", "allocated_gpus", "starting_gpus", "free_gpus", "pending_gpus")}
    figures["pending_pods"] = {f"{p['namespace']}/{p['pod']}": p["gpus"] for p in now["pending_pods"]}
    return figures
