"""A real Prometheus (a :class:`~.releases.Release`: 3.x from Debian sid by default, 2.42 from Debian 12 for the
oldest supported) scraping replayed exporters on loopback.

The scrape config reproduces what gpustack's ServiceMonitor turns into inside Kubernetes:

- job ``dcgm-exporter`` (the Service name), ``honor_labels: false``;
- the target labels prometheus-operator derives from endpoints discovery (namespace, service,
  pod, container, endpoint) and gpustack's relabelling of ``__meta_kubernetes_pod_node_name`` to
  ``node``. Static configs cannot discover, so each target carries the ``__meta_kubernetes_*``
  labels discovery would have set; Prometheus keeps ``__``-prefixed target labels available to
  relabelling and drops them afterwards, exactly as for discovered targets;
- because the target has ``pod``/``namespace``/``container`` labels, the exporter's labels of
  the same names (the workload holding the GPU) are renamed ``exported_pod`` etc. on ingestion.

kube-state-metrics is a third replay endpoint, scraped with ``honor_labels: true`` as
kube-prometheus-stack does, so its ``node`` label is kept. Every wait has a deadline; the server
is stopped with SIGTERM and killed only if it does not exit.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from gpustack.monitoring.rules import EXPORTER_JOB, load_usage_rules, rules_path

from .releases import Release, newest, unavailable
from .replay_exporter import LOOPBACK, NodeSpec, default_nodes, mig_instances, visible_gpus
from .replay_server import DcgmReplay, KsmReplay

SCRAPE_INTERVAL = "1s"
EXPORTER_NAMESPACE = "gpu-monitoring"
T = TypeVar("T")


class PrometheusError(RuntimeError):
    """Prometheus could not start, or answered an API call with an error."""


def binaries_missing(release: str = "newest") -> list[str]:
    """Why ``release``'s prometheus/promtool cannot run ([] when they can; the newest is fetched on first use)."""
    why = unavailable(release)
    return [why] if why else []


def free_port() -> int:
    """A currently free loopback TCP port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def wait_for(what: str, probe: Callable[[], T | None], *, timeout: float, interval: float = 0.25) -> T:
    """Call ``probe`` until it returns something truthy; raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last probe: {last!r})")


def exporter_pod(node: str) -> str:
    """The (simulated) dcgm-exporter pod name on ``node``."""
    return f"dcgm-exporter-{node[-1]}x7k2p"


def dcgm_target(address: str, node: str, namespace: str = EXPORTER_NAMESPACE) -> dict[str, Any]:
    """A static target labelled like endpoints discovery labels a dcgm-exporter pod in ``namespace``."""
    return {
        "targets": [address],
        "labels": {
            "__meta_kubernetes_namespace": namespace,
            "__meta_kubernetes_service_name": EXPORTER_JOB,
            "__meta_kubernetes_pod_name": exporter_pod(node),
            "__meta_kubernetes_pod_container_name": "exporter",
            "__meta_kubernetes_endpoint_port_name": "metrics",
            "__meta_kubernetes_pod_node_name": node,
        },
    }


def servicemonitor_relabelings() -> list[dict[str, Any]]:
    """The relabel rules prometheus-operator generates for the ServiceMonitor, plus gpustack's ``node``."""

    def copy(source: str, target: str) -> dict[str, Any]:
        return {"source_labels": [source], "target_label": target}

    return [
        copy("__meta_kubernetes_namespace", "namespace"),
        copy("__meta_kubernetes_service_name", "service"),
        copy("__meta_kubernetes_pod_name", "pod"),
        copy("__meta_kubernetes_pod_container_name", "container"),
        copy("__meta_kubernetes_service_name", "job"),
        copy("__meta_kubernetes_endpoint_port_name", "endpoint"),
        copy("__meta_kubernetes_pod_node_name", "node"),  # gpustack's ServiceMonitor relabeling
    ]


def prometheus_config(
    dcgm: Mapping[str, str],
    ksm: str,
    rule_file: Path,
    exporter_namespace: str = EXPORTER_NAMESPACE,
    extra_rule_files: Sequence[Path] = (),
) -> dict[str, Any]:
    """prometheus.yml for node name -> exporter address, the kube-state-metrics address and the rules."""
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "rule_files": [str(rule_file), *map(str, extra_rule_files)],
        "scrape_configs": [
            {
                "job_name": EXPORTER_JOB,
                "honor_labels": False,
                "static_configs": [dcgm_target(address, node, exporter_namespace) for node, address in dcgm.items()],
                "relabel_configs": servicemonitor_relabelings(),
            },
            {
                "job_name": "kube-state-metrics",
                "honor_labels": True,
                "static_configs": [{"targets": [ksm]}],
            },
        ],
    }


@dataclass
class PrometheusServer:
    """One Prometheus process on a loopback port, with a tiny HTTP API client."""

    config: Path
    data_dir: Path
    log: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    retention: str = "1h"  # backfilled history (tests/prometheus/history.py) needs longer
    query_timeout: str | None = None  # --query.timeout (Prometheus' default: 2m)
    release: Release = field(default_factory=newest)  # whose binary runs

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self, timeout: float = 30.0, attempts: int = 3) -> PrometheusServer:
        """Start and wait until ``/-/ready``; retry on another port if the chosen one was taken meanwhile."""
        for attempt in range(1, attempts + 1):
            try:
                self._spawn()
                wait_for("Prometheus to become ready", self._ready, timeout=timeout)
                return self
            except PrometheusError:
                if attempt == attempts or "address already in use" not in self.log.read_text():
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        cmd = [
            self.release.prometheus,
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            f"--storage.tsdb.retention.time={self.retention}",
            *([f"--query.timeout={self.query_timeout}"] if self.query_timeout else []),
        ]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise PrometheusError(f"prometheus exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)

    def api(self, path: str, params: Mapping[str, str | list[str]] | None = None, timeout: float = 10.0) -> Any:
        """GET ``/api/v1/<path>`` and return ``data``; raise :class:`PrometheusError` on an API error."""
        query = urllib.parse.urlencode(params or {}, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=timeout) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {dict(params or {})}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the result vector (or ``[]``)."""
        data = self.api("query", {"query": expr})
        return list(data["result"]) if data["resultType"] in ("vector", "matrix") else [data]

    def query_range(self, expr: str, seconds: float = 30.0, step: str = "2s") -> list[dict[str, Any]]:
        """Range query over the last ``seconds``, as a timeseries panel issues it."""
        end = time.time()
        params = {"query": expr, "start": f"{end - seconds:.3f}", "end": f"{end:.3f}", "step": step}
        return list(self.api("query_range", params)["result"])

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        """``/api/v1/label/<label>/values`` (what Grafana's label_values() variable query calls)."""
        params: dict[str, str | list[str]] = {"match[]": [match]} if match else {}
        return list(self.api(f"label/{label}/values", params))

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts."""
        return list(self.api("alerts")["alerts"])

    def rule_groups(self) -> list[dict[str, Any]]:
        return list(self.api("rules")["groups"])


@dataclass
class Stack:
    """Two replayed GPU nodes, a replayed kube-state-metrics and the Prometheus scraping them."""

    prometheus: PrometheusServer
    exporters: dict[str, DcgmReplay]
    ksm: KsmReplay

    def set_scenario(self, node: str, scenario: str) -> None:
        """Switch one node's exporter to a scenario (through its HTTP control endpoint, as a user would)."""
        url = f"http://{self.exporters[node].address}/-/scenario?name={urllib.parse.quote(scenario)}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            if resp.status != 200:
                raise RuntimeError(f"could not switch {node} to {scenario}: HTTP {resp.status}")

    def wait_until_scraped(self, samples: int = 5, timeout: float = 60.0) -> None:
        """Wait until every GPU series has ``samples`` samples and the rules have been evaluated."""
        # one series per GPU, or per GPU instance on a MIG node
        gpus = sum(len(visible_gpus(e.spec)) * (len(mig_instances(e.spec)) if e.spec.mig else 1)
                   for e in self.exporters.values())  # fmt: skip
        expr = f"count(count_over_time(DCGM_FI_DEV_GPU_TEMP[1m]) >= {samples})"
        wait_for(f"{gpus} GPU series with {samples} samples", lambda: self._value(expr) == gpus, timeout=timeout)
        wait_for(
            "kube-state-metrics",
            lambda: self._value('count(kube_node_status_allocatable{resource="nvidia_com_gpu"})'),
            timeout=timeout,
        )
        wait_for("rule evaluation", self._rules_evaluated, timeout=timeout)

    def _value(self, expr: str) -> float | None:
        result = self.prometheus.query(expr)
        return float(result[0]["value"][1]) if result else None

    def _rules_evaluated(self) -> bool:
        rules = [r for g in self.prometheus.rule_groups() for r in g["rules"]]
        return bool(rules) and all(r.get("lastEvaluation", "").startswith("20") for r in rules)


def usage_rules_every_scrape(path: Path, interval: str = SCRAPE_INTERVAL) -> Path:
    """gpustack's usage recording rules, evaluated every scrape interval instead of every minute, so a live
    stack has recorded series (the capacity dashboard's) within seconds; ``interval``: another (production's 1m)."""
    data = load_usage_rules()
    for group in data["groups"]:
        group["interval"] = interval
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def write_prometheus_config(
    path: Path, stack_exporters: Mapping[str, DcgmReplay], ksm: KsmReplay, exporter_namespace: str = EXPORTER_NAMESPACE,
    rule_interval: str = SCRAPE_INTERVAL,
) -> Path:  # fmt: skip
    """Write prometheus.yml for the replay endpoints and gpustack's rule files (alerts, usage)."""
    exporters = {n: e.address for n, e in stack_exporters.items()}
    usage = usage_rules_every_scrape(path.parent / "gpu-usage.rules.yaml", rule_interval)
    config = prometheus_config(exporters, ksm.address, rules_path(), exporter_namespace, [usage])
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


@contextlib.contextmanager
def running_stack(
    workdir: Path,
    nodes: list[NodeSpec] | None = None,
    *,
    exporter_namespace: str = EXPORTER_NAMESPACE,
    release: Release | None = None,
    rule_interval: str = SCRAPE_INTERVAL,
) -> Iterator[Stack]:
    """Start replays and Prometheus under ``workdir``; stop everything on exit, whatever happened.
    ``exporter_namespace``: the namespace endpoints discovery reports for the exporter pods (gpustack
    installs the exporter in ``gpu-operator``; the default is what test_queries.py and rules_tests/ expect).
    ``release``: which Prometheus (default: the newest, :func:`.releases.newest`); ``rule_interval``: the usage
    rules' evaluation interval (default: every scrape)."""
    specs = nodes or default_nodes()
    exporters = {spec.node: DcgmReplay(spec).start() for spec in specs}
    ksm = KsmReplay(specs).start()
    server = PrometheusServer(
        config=write_prometheus_config(workdir / "prometheus.yml", exporters, ksm, exporter_namespace, rule_interval),
        data_dir=workdir / "tsdb",
        log=workdir / "prometheus.log",
        release=release or newest(),
    )
    try:
        yield Stack(server.start(), exporters, ksm)
    finally:
        server.stop()
        for replay in [*exporters.values(), ksm]:
            replay.stop()
