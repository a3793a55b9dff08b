"""doctor on a healthy cluster gives the same verdict at 1 node and at 1,000 nodes, as a user runs it on a
cluster not built from this machine: the CLI in its own process, the kubeconfig from ``$KUBECONFIG`` only
(no gpustack state), the Kubernetes objects from the fake API server (``scenarios.healthy(N)``: 8 GPUs per
node, ~10 pods per node), a REAL Prometheus scraping every node's replayed dcgm-exporter (one target per
node, labelled as discovery labels a real one) through the API server's service proxy, and the fake Grafana
(panel queries on that Prometheus) whose admin password is only in the cluster's Secret.

At 1,000 nodes Prometheus' whole ``/api/v1/targets`` is larger than the 4 MiB body cap (what made doctor
say "Prometheus could not be reached"); doctor must never ask for it on a healthy cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gpustack.constants import (
    GRAFANA_PORT,
    GRAFANA_SERVICE,
    MONITORING_NAMESPACE,
    PROMETHEUS_PORT,
    PROMETHEUS_SERVICE,
)
from gpustack.monitoring.dashboard import load_capacity_dashboard, load_dashboard
from gpustack.render.manifests import EXPORTER_TARGETS
from gpustack.runners.http import DEFAULT_LIMIT
from tests.fakes import scenarios as sc
from tests.fakes.grafana_api import FakeGrafana
from tests.fakes.kube_api import FakeKubeAPI

from .expected import expected_warns
from .fleet import Fleet, running_fleet
from .releases import Release

REPO = Path(__file__).resolve().parents[2]
LAYERS = "kubernetes,gpu-operator,monitoring,grafana"
PROM_PROXY = f"/services/{PROMETHEUS_SERVICE}:{PROMETHEUS_PORT}/proxy/api/v1/"


def doctor_at(nodes: int, fleet: Fleet, workdir: Path) -> tuple[dict[str, Any], list[str], float, int]:
    """(json report, proxied Prometheus API paths, doctor's wall time, size of the whole target list)."""
    with (
        FakeKubeAPI.running() as api,
        FakeGrafana.running(fleet.prometheus.url, password=sc.GRAFANA_PASSWORD) as grafana,
    ):
        sc.healthy(nodes).load(api)
        grafana.add_dashboard(load_dashboard())
        grafana.add_dashboard(load_capacity_dashboard())
        exporter = EXPORTER_TARGETS["standalone"]
        api.proxy_upstreams[(MONITORING_NAMESPACE, PROMETHEUS_SERVICE, PROMETHEUS_PORT)] = fleet.prometheus.url
        api.proxy_upstreams[(MONITORING_NAMESPACE, GRAFANA_SERVICE, GRAFANA_PORT)] = grafana.url
        api.proxy_upstreams[(exporter.namespace, exporter.service, exporter.port)] = f"http://{fleet.address}"
        kubeconfig = api.write_kubeconfig(workdir / "someone-elses.conf")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir), "KUBECONFIG": str(kubeconfig),
               "GPUSTACK_STATE_DIR": str(workdir / "state"), "NO_COLOR": "1", "GPUSTACK_TODAY": os.environ["GPUSTACK_TODAY"],
               # Grafana's ~30 panel queries over 8,000 GPUs took longer than the default 30 s per source on the
               # 2-core machine with CI's other lanes beside them (R04 "the Grafana source ran out of time",
               # 2026-11-29): a user's knob for very large clusters (docs/configuration.md), not a change of verdict
               "GPUSTACK_SOURCE_TIMEOUT": "120",
               "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}  # fmt: skip
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "gpustack", "doctor", "--layer", LAYERS, "--output", "json"],
                              cwd=workdir, env=env, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        elapsed = time.monotonic() - started
        with urllib.request.urlopen(f"{fleet.prometheus.url}/api/v1/targets", timeout=60) as resp:
            whole = len(resp.read())
        proxied = [p.split(PROM_PROXY, 1)[1] for _, p, _ in api.requests if PROM_PROXY in p]
    assert not (workdir / "state").exists(), "a cluster not built from this machine: no state read or written"
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"{nodes} nodes: no JSON report (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return report, proxied, elapsed, whole


def verdict(report: dict[str, Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for c in report["checks"]:
        out.setdefault(c["id"], set()).add(c["status"])
    return out


def test_the_verdict_on_a_healthy_cluster_is_the_same_at_1_and_1000_nodes(
    tmp_path: Path, prometheus_release: Release
) -> None:
    started = time.monotonic()
    with (
        running_fleet(tmp_path / "one", 1, wait=False, release=prometheus_release) as small,
        # both scrape; 1,000 replayed targets scraped twice took over 180 s with the other CI lanes beside them
        # (2026-11-29: "timed out after 180s waiting for 8000 GPUs scraped twice"): a bound, not a figure
        running_fleet(tmp_path / "thousand", 1000, timeout=600, release=prometheus_release) as large,
    ):
        small.wait_until_scraped(60)
        print(f"\nfleets of 1 and 1000 nodes scraped twice after {time.monotonic() - started:.1f} s")
        one, one_paths, one_s, _ = doctor_at(1, small, tmp_path / "one")
        thousand, paths, thousand_s, whole = doctor_at(1000, large, tmp_path / "thousand")
    print(f"doctor --layer {LAYERS}: 1 node {one_s:.1f} s, 1000 nodes {thousand_s:.1f} s; "
          f"whole /api/v1/targets at 1000 nodes: {whole / 2**20:.1f} MiB")  # fmt: skip
    # no host facts without SSH: G05 (driver preinstalled?) cannot run here; K11: a token kubeconfig, no certificate;
    # M12: the replayed fleet has no etcd target
    skipped = {"G05-driver-preinstalled", "K11-admin-kubeconfig-certificate", "M12-etcd-leader-changes"}
    # and the warnings a new cluster may show (docs/checks.md "Expected on a new cluster": K10's open security release)
    listed = expected_warns()
    failing = {c["id"]: c["status"] for c in thousand["checks"]
               if c["status"] != "pass" and c["id"] not in skipped
               and not (c["status"] == "warn" and (c["id"], c["summary"]) in listed)}  # fmt: skip
    assert not failing, json.dumps([c for c in thousand["checks"] if c["status"] != "pass"], indent=1)
    assert all(verdict(thousand)[k] == {"skip"} for k in skipped)
    assert verdict(one) == verdict(thousand), "the same checks, the same statuses"
    assert thousand["cluster"]["source"] == "$KUBECONFIG" and not thousand["cluster"]["gpustack_cluster"]
    # the regression: the whole target list no longer fits the cap; doctor never asked for it
    assert whole > DEFAULT_LIMIT
    assert not [p for p in paths + one_paths if p.startswith("targets")], paths
    assert sorted(set(paths)) == sorted(set(one_paths)), "the same requests whatever the size"
