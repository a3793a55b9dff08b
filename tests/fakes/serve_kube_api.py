"""TEST DOUBLE in its own process: :class:`~tests.fakes.kube_api.FakeKubeAPI` seeded with a scenario.

For measurements of the CLI end to end (``scripts/bench_doctor.py``): the API server must not share
the measured process (or its GIL), as a real one would not.

    python3 -m tests.fakes.serve_kube_api --nodes 100 --kubeconfig /tmp/kc

seeds ``scenarios.healthy(nodes)`` (``--upstream NS/SERVICE/PORT=URL``: where its service proxy forwards,
e.g. to a Prometheus), writes a kubeconfig pointing at itself, prints one line
``ready <url> <objects>`` on stdout and serves until stdin closes or it is terminated.
``GET /_fake/requests`` answers ``{"requests": n}`` (the requests received before it, not counting
itself or other ``/_fake/`` calls); ``POST /_fake/reset`` empties the request log. ``--share mig`` (or
``mig-single``, ``time-slicing``) puts the last node's GPUs under that sharing mode
(tests/fakes/sharing_scenarios.py) and runs verify's test pods with the GPU kubelet double
(tests/fakes/gpu_kubelet.py), as ``scripts/sample_sharing.py`` does for docs/gpu-sharing.md.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from tests.fakes import scenarios
from tests.fakes.kube_api import FakeKubeAPI, RawResponse


class ServedFakeKubeAPI(FakeKubeAPI):
    """FakeKubeAPI with a control path for a client in another process."""

    def handle_special(self, method: str, raw_path: str, *rest: Any) -> RawResponse | None:
        if raw_path.startswith("/_fake/"):
            with self._lock:
                own = [r for r in self.requests if r[1].startswith("/_fake/")]
                for r in own:
                    self.requests.remove(r)
                if raw_path == "/_fake/reset" and method == "POST":
                    self.requests.clear()
                body = json.dumps({"requests": len(self.requests)}).encode()
            return RawResponse(200, body, "application/json")
        return super().handle_special(method, raw_path, *rest)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--kubeconfig", type=Path, required=True)
    ap.add_argument("--upstream", action="append", default=[], metavar="NS/SERVICE/PORT=URL",
                    help="where the service proxy forwards a Service port (repeatable)")  # fmt: skip
    ap.add_argument("--share", choices=("mig", "mig-single", "time-slicing"),
                    help="the last node's GPUs shared this way; verify's GPU test pods run (GPU kubelet double)")  # fmt: skip
    args = ap.parse_args(argv)
    scenario = scenarios.healthy(args.nodes)
    api = ServedFakeKubeAPI()
    if args.share:
        from tests.fakes import sharing_scenarios
        from tests.fakes.gpu_kubelet import GpuKubelet

        if args.share == "time-slicing":
            sharing_scenarios.make_time_sliced(scenario)
        else:
            sharing_scenarios.make_mig(scenario, strategy="single" if args.share == "mig-single" else "mixed")
        api.on_create.append(GpuKubelet(api))
    api.seed(scenario.objects)
    for spec in args.upstream:
        where, _, url = spec.partition("=")
        ns, name, port = where.split("/")
        api.proxy_upstreams[(ns, name, port)] = url
    api.start()
    api.write_kubeconfig(args.kubeconfig)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    print(f"ready {api.url} {len(scenario.objects)}", flush=True)
    done.wait()
    api.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
