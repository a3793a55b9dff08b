"""A fleet of replayed GPU nodes behind ONE loopback server, scraped by a real Prometheus: a cluster of any
size (1,000 nodes x 8 GPUs) on a developer machine.

The server runs in its own process (``python -m tests.prometheus.fleet --nodes N``, as a fleet of exporters
would not share the test's interpreter): a test process busy serving 11,000 objects from the fake API server
must not make Prometheus' scrapes time out. :class:`FleetReplay` serves ``/metrics?node=NAME`` (that node's dcgm-exporter text, rendered once: the values
do not move, which is all a verdict needs) and ``/ksm`` (kube-state-metrics: 8 allocatable GPUs per node).
:func:`fleet_config` turns it into a Prometheus configuration with one ``dcgm-exporter`` target per node,
each labelled as Kubernetes endpoints discovery labels an exporter pod (the ``__meta_kubernetes_*`` labels a
real target carries, ~40 of them, so ``/api/v1/targets`` is as large as on a real cluster), its own
``instance`` (a pod IP) and ``__param_node`` (which node's text the one server returns). The relabelling is
the ServiceMonitor's (:func:`~.harness.servicemonitor_relabelings`).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

from gpustack.diagnose.collect_grafana import USAGE_PROBE_EXPR
from gpustack.monitoring.counters import load_counters
from gpustack.monitoring.rules import EXPORTER_JOB, load_usage_rules, rules_path

from .harness import PrometheusError, PrometheusServer, servicemonitor_relabelings, wait_for
from .loopback import LoopbackServer, MetricsHandler, Served
from .releases import Release, newest
from .replay_exporter import NodeSpec, PodRef, render_dcgm, render_ksm

REPO = Path(__file__).resolve().parents[2]
EXPORTER_NAMESPACE = "gpu-operator"  # where gpustack installs the exporter (the fake API server's scenario)
#: the discovery labels endpoints SD sets on a pod target beyond those the relabelling reads (names as in
#: Prometheus' kubernetes SD; values shaped like a real cluster's)
EXTRA_META = (
    "endpoint_address_target_kind", "endpoint_address_target_name", "endpoint_node_name", "endpoint_port_protocol",
    "endpoint_ready", "endpoints_label_app_kubernetes_io_component", "endpoints_label_app_kubernetes_io_instance",
    "endpoints_label_app_kubernetes_io_managed_by", "endpoints_label_app_kubernetes_io_name",
    "endpoints_label_app_kubernetes_io_version", "endpoints_label_helm_sh_chart", "endpoints_labelpresent_app",
    "endpoints_name", "pod_annotation_kubectl_kubernetes_io_default_container", "pod_controller_kind",
    "pod_controller_name", "pod_host_ip", "pod_ip", "pod_label_app_kubernetes_io_component",
    "pod_label_app_kubernetes_io_instance", "pod_label_app_kubernetes_io_name", "pod_label_controller_revision_hash",
    "pod_label_pod_template_generation", "pod_labelpresent_app_kubernetes_io_name", "pod_phase", "pod_ready",
    "pod_uid", "pod_container_image", "pod_container_init", "pod_container_port_name", "pod_container_port_number",
    "pod_container_port_protocol", "service_label_app_kubernetes_io_name", "service_labelpresent_app_kubernetes_io_name",
)  # fmt: skip
SCRAPE_INTERVAL = "5s"
RULE_INTERVAL = "60s"  # the alert rules need loading, not evaluating, for the checks: keep the CPU for the scrapes


class _Handler(MetricsHandler):
    server: _Server

    def do_GET(self) -> None:
        url = urlparse(self.path)
        fleet = self.server.fleet
        if url.path == "/metrics":  # no node: one of them (the API server's service proxy picks one endpoint)
            node = parse_qs(url.query).get("node", [fleet.nodes[0]])[0]
            body = fleet.bodies.get(node)
            self.reply(200 if body is not None else 404, body or b"unknown node\n")
        elif url.path == "/ksm":
            self.reply(200, fleet.ksm)
        elif url.path == "/node":
            self.reply(200, b"# TYPE node_boot_time_seconds gauge\nnode_boot_time_seconds 1.7e9\n")
        else:
            self.reply(404, b"not found\n")


class _Server(LoopbackServer):
    request_queue_size = 1024  # a thousand scrapes every few seconds

    def __init__(self, fleet: FleetReplay) -> None:
        super().__init__(_Handler)
        self.fleet = fleet


class FleetReplay(Served):
    """Every node's dcgm-exporter and kube-state-metrics, from one loopback server."""

    def __init__(self, nodes: list[str], gpus: int = 8) -> None:
        counters = load_counters()
        # one workload pod per node, on GPU 0: the per-pod panels have data, as on a cluster in use
        specs = [NodeSpec(node=n, pods={0: PodRef("ml-team", f"train-{i}", "trainer")}, gpus=gpus)
                 for i, n in enumerate(nodes)]  # fmt: skip
        self.nodes = nodes
        self.bodies = {s.node: render_dcgm(s, counters, 60.0).encode() for s in specs}
        self.ksm = render_ksm(specs).encode()
        super().__init__(_Server(self), "fleet-replay")


def pod_ip(i: int) -> str:
    return f"10.{244 + i // 65000}.{i // 250 % 256}.{i % 250 + 2}"


def fleet_target(address: str, node: str, i: int) -> dict[str, Any]:
    """One node's exporter target, labelled as endpoints discovery labels the exporter pod on ``node``."""
    pod = f"dcgm-exporter-{i:05x}"
    meta = {f"__meta_kubernetes_{name}": f"{name.rsplit('_', 1)[-1]}-{i}" for name in EXTRA_META}
    return {
        "targets": [address],
        "labels": {
            **meta,
            "__meta_kubernetes_namespace": EXPORTER_NAMESPACE,
            "__meta_kubernetes_service_name": EXPORTER_JOB,
            "__meta_kubernetes_pod_name": pod,
            "__meta_kubernetes_pod_container_name": "exporter",
            "__meta_kubernetes_endpoint_port_name": "metrics",
            "__meta_kubernetes_pod_node_name": node,
            "__param_node": node,
            "instance": f"{pod_ip(i)}:9400",
        },
    }


def usage_rules(path: Path) -> Path:
    """gpustack's usage recording rules (the capacity dashboard's series), evaluated every scrape interval, so
    they have data before doctor runs."""
    data = load_usage_rules()
    for group in data["groups"]:
        group["interval"] = SCRAPE_INTERVAL
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def fleet_config(nodes: list[str], address: str, rule_files: list[Path]) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": RULE_INTERVAL},
        "rule_files": [str(f) for f in rule_files],
        "scrape_configs": [
            {
                "job_name": EXPORTER_JOB,
                "honor_labels": False,
                "static_configs": [fleet_target(address, n, i) for i, n in enumerate(nodes)],
                "relabel_configs": servicemonitor_relabelings(),
            },
            {"job_name": "kube-state-metrics", "honor_labels": True, "metrics_path": "/ksm",
             "static_configs": [{"targets": [address]}]},
            # every node also has a node-exporter target, as with kube-prometheus-stack: the whole target list of
            # a 1,000-node cluster is then well over the 4 MiB body cap, as the issue saw
            {"job_name": "node-exporter", "metrics_path": "/node", "scrape_interval": "60s",
             "static_configs": [{"targets": [address],
                                 "labels": {**fleet_target(address, n, i)["labels"], "job": "node-exporter",
                                            "instance": f"{pod_ip(i)}:9100"}} for i, n in enumerate(nodes)]},
        ],
    }  # fmt: skip


@dataclass
class Fleet:
    nodes: list[str]
    address: str  # the replay server, host:port
    prometheus: PrometheusServer

    def wait_until_scraped(self, timeout: float) -> None:
        """Every node's GPUs have two samples (rate() and increase() panels need two) and the rules are loaded."""
        gpus = 8 * len(self.nodes)

        def counted() -> bool:
            # While a thousand targets' first series are being created, Prometheus 3.5 once answered this query
            # "execution: vector cannot contain metrics with the same labelset" (CI, 2026-11-27; the same fleet
            # counts 8,000 distinct GPUs a moment later): a not-yet-ready answer, asked again until the timeout
            # Under CI's full load (the cold Go build beside it), the query itself once took longer than the client's
            # 10 s (2026-11-29): also not-ready, asked again until the timeout
            try:
                rows = self.prometheus.query("count(count_over_time(DCGM_FI_DEV_GPU_UTIL[1m]) >= 2)")
            except PrometheusError as exc:
                if "same labelset" not in str(exc):
                    raise
                return False
            except (TimeoutError, urllib.error.URLError) as exc:
                if not isinstance(exc, TimeoutError) and not isinstance(exc.reason, TimeoutError):
                    raise
                return False
            return bool(rows) and int(float(rows[0]["value"][1])) == gpus

        wait_for(f"{gpus} GPUs scraped twice", counted, timeout=timeout, interval=1.0)
        wait_for("kube-state-metrics", lambda: self.prometheus.query("count(kube_node_status_allocatable)"),
                 timeout=timeout)  # fmt: skip
        wait_for("the rules", self.prometheus.rule_groups, timeout=timeout)
        wait_for("the usage rules' first series", lambda: self.prometheus.query(USAGE_PROBE_EXPR), timeout=timeout)


@contextlib.contextmanager
def replay_process(nodes: int) -> Iterator[tuple[list[str], str]]:
    """The fleet server of ``scenarios.healthy(nodes)``'s node names, in a child process: (names, address)."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.prometheus.fleet", "--nodes", str(nodes)], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "ready":
            raise RuntimeError(f"the fleet replay did not start: {line}")
        yield fleet_nodes(nodes), line[1]
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def running_fleet(
    workdir: Path, nodes: int, *, timeout: float = 120.0, wait: bool = True, release: Release | None = None
) -> Iterator[Fleet]:
    """A fleet of ``nodes`` and the Prometheus (``release``, default the newest) scraping it (``wait``: every node
    scraped twice); stopped on exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    with replay_process(nodes) as (names, address):
        config = workdir / "prometheus.yml"
        rules = [rules_path(), usage_rules(workdir / "gpu-usage.rules.yaml")]
        config.write_text(yaml.safe_dump(fleet_config(names, address, rules), sort_keys=False), encoding="utf-8")
        server = PrometheusServer(config=config, data_dir=workdir / "tsdb", log=workdir / "prometheus.log",
                                  release=release or newest())  # fmt: skip
        try:
            fleet = Fleet(names, address, server.start())
            if wait:
                fleet.wait_until_scraped(timeout)
            yield fleet
        finally:
            server.stop()


def fleet_nodes(nodes: int) -> list[str]:
    """The node names of ``scenarios.healthy(nodes)``."""
    from tests.fakes.scenarios import node_name

    return [node_name(i, nodes) for i in range(nodes)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, required=True)
    args = ap.parse_args()
    replay = FleetReplay(fleet_nodes(args.nodes)).start()
    print(f"ready {replay.address}", flush=True)
    sys.stdin.read()  # serve until the parent closes stdin
    replay.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
