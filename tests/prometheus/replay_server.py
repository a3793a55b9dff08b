"""The replayed exporters served over HTTP: :class:`DcgmReplay` (dcgm-exporter for one node) and
:class:`KsmReplay` (kube-state-metrics for all of them), each a loopback server on a free port whose /metrics body
is rendered at every scrape by tests/prometheus/replay_exporter.py (what the exporters print lives there; how it
reaches Prometheus here). ``GET /-/scenario?name=...`` switches a node's scenario while it runs.

Run by hand: ``python -m tests.prometheus.replay_server --node node-a --scenario xid79`` (prints the address).
Only ever binds to loopback.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from urllib.parse import parse_qs, urlparse

from gpustack.monitoring.counters import CounterFile, load_counters

from .ksm_pods import merged
from .loopback import LoopbackServer, MetricsHandler, Served
from .replay_exporter import SCENARIOS, NodeSpec, PodRef, default_nodes, render_dcgm, render_ksm


class _Handler(MetricsHandler):
    server: _Server

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/metrics":
            self.reply(200, self.server.render().encode())
        elif url.path == "/-/scenario":
            name = parse_qs(url.query).get("name", [""])[0]
            if name not in SCENARIOS:
                self.reply(400, f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}\n".encode())
                return
            self.server.set_scenario(name)
            self.reply(200, f"scenario {name}\n".encode())
        else:
            self.reply(404, b"not found\n")


class _Server(LoopbackServer):
    def __init__(self, render: Callable[[], str], set_scenario: Callable[[str], None]) -> None:
        super().__init__(_Handler)
        self.render, self.set_scenario = render, set_scenario


class ReplayServer(Served):
    """A loopback HTTP server on a free port; ``render`` produces the /metrics body."""

    def __init__(self, render: Callable[[], str], set_scenario: Callable[[str], None] | None = None) -> None:
        super().__init__(_Server(render, set_scenario or (lambda _name: None)), "replay-exporter")


class DcgmReplay(ReplayServer):
    """dcgm-exporter for one node; the clock starts when the object is created."""

    def __init__(self, spec: NodeSpec, counters: CounterFile | None = None) -> None:
        self.spec = spec
        full = counters or load_counters()
        self.counters = CounterFile(tuple(c for c in full.counters if c.name not in spec.counters_without))
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        super().__init__(self.render, self.set_scenario)

    def set_scenario(self, name: str) -> None:
        if name not in SCENARIOS:
            raise ValueError(f"unknown scenario {name!r}")
        with self._lock:
            self.spec.scenario = name

    def assign(self, gpu: int, pod: PodRef | None) -> None:
        """Give ``gpu`` to ``pod`` (None: free it) from the next scrape on."""
        with self._lock:
            pods = {g: p for g, p in self.spec.pods.items() if g != gpu}
            self.spec.pods = {**pods, gpu: pod} if pod is not None else pods

    def render(self) -> str:
        with self._lock:
            return render_dcgm(self.spec, self.counters, time.monotonic() - self._t0)


class KsmReplay(ReplayServer):
    """kube-state-metrics for the simulated nodes (allocatable GPUs stay 8 whatever DCGM reports)."""

    def __init__(self, specs: list[NodeSpec]) -> None:
        self.specs = specs
        self.extra: list[str] = []  # series of pods no replayed GPU holds (queued, ended): tests/prometheus/ksm_pods.py
        super().__init__(lambda: merged(render_ksm(self.specs), self.extra))


def main() -> None:
    """Serve one node for ``--seconds`` or until interrupted (curl the printed address)."""
    parser = argparse.ArgumentParser(description="Serve one replayed dcgm-exporter node.")
    parser.add_argument("--node", default="node-a", choices=[s.node for s in default_nodes()])
    parser.add_argument("--scenario", default="healthy", choices=SCENARIOS)
    parser.add_argument("--seconds", type=float, default=3600.0, help="stop after this long")
    args = parser.parse_args()
    spec = next(s for s in default_nodes() if s.node == args.node)
    spec.scenario = args.scenario
    server = DcgmReplay(spec).start()
    print(f"serving {spec.node} ({spec.scenario}) on http://{server.address}/metrics", flush=True)
    try:
        threading.Event().wait(timeout=args.seconds)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
