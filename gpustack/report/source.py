"""The one place ``gpustack report`` reaches Prometheus, and the queries it sends.

Where Prometheus answers (:func:`endpoint`): ``--prometheus-url URL``, else the API server's service proxy to
``monitoring/kube-prometheus-stack-prometheus:http-web`` of the cluster the one kubeconfig resolution finds
(``--kubeconfig``, ``$KUBECONFIG``, gpustack's admin.conf, ``~/.kube/config``; ``--context``) -- exactly as
verify/doctor reach it (gpustack.diagnose.collect_prometheus).

What it sends (:func:`collect`), whatever the cluster size or window:

1. ``/api/v1/rules?type=record``: are gpustack's usage rules loaded, healthy, at which interval?
2. with the rules: how far back their data reaches, against the raw data (:func:`.queries.coverage_query`);
3. the window query (with the rules one request; without, its seven parts, two at a time), 4. the "now"
   query (instant, at the end of the window), 5. the trend (a range query, one point a day).

Five requests with the rules, ten without.

Failures: nothing answers (or the proxy finds no Prometheus) -> :class:`ClusterUnreachableError` (exit 3);
Prometheus answers with an error (a query timeout on a big raw window) -> :class:`GpustackError` (exit 1).
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpustack.config.model import Config
from gpustack.constants import MONITORING_NAMESPACE, PROMETHEUS_PORT, PROMETHEUS_SERVICE
from gpustack.errors import ClusterUnreachableError, GpustackError, UsageError
from gpustack.paths import check_input_file
from gpustack.report import compute
from gpustack.report import queries as q
from gpustack.report.model import Report
from gpustack.runners.http import DirectEndpoint, Endpoint, HttpError, KubeProxyEndpoint

QUERY_TIMEOUT = 120.0  # seconds, per request (sent to Prometheus as its query timeout too)
BODY_LIMIT = 256 * 1024 * 1024  # a window query lists one row per pod and GPU: allow big clusters
PROXY_DOWN = {404, 502, 503, 504}  # the API server proxy: no such Service, or no ready Prometheus behind it
MODES = ("auto", "rules", "raw")
RAW_PARALLEL = 2  # raw window parts in flight at once: each runs on its own Prometheus goroutine, and its
# query timeout (2 minutes by default) counts wall time, so more in flight than cores only makes each slower
HINT = (
    "pass --prometheus-url URL (e.g. after kubectl -n monitoring port-forward svc/kube-prometheus-stack-prometheus "
    "9090: --prometheus-url http://127.0.0.1:9090) or --kubeconfig FILE"
)


def endpoint(cfg: Config, kubeconfig: Path | None, url: str | None, context: str | None = None) -> Endpoint:
    """Where Prometheus answers: ``url``, else the API server's proxy of the cluster the one kubeconfig resolution
    finds (``--kubeconfig``, ``$KUBECONFIG``, gpustack's admin.conf, ``~/.kube/config``)."""
    if url:
        from gpustack.report.inputs import parse_prometheus_url

        return DirectEndpoint(parse_prometheus_url(url) or url)
    from gpustack.runners.kubeconfig import KubeconfigNotFound, cluster_client

    if kubeconfig is not None:
        check_input_file(kubeconfig, "--kubeconfig")
    try:
        kube = cluster_client(cfg.cluster.name, kubeconfig, context=context, request_timeout=QUERY_TIMEOUT)
    except KubeconfigNotFound as exc:
        raise ClusterUnreachableError(f"{exc.message}, and no --prometheus-url", hint=HINT) from None
    except UsageError as exc:  # a kubeconfig without a usable context
        raise UsageError(
            f"--kubeconfig {kubeconfig or 'of the cluster'}: not a usable kubeconfig: {exc.message}"
        ) from None
    return KubeProxyEndpoint(kube, MONITORING_NAMESPACE, PROMETHEUS_SERVICE, PROMETHEUS_PORT)


@dataclass
class Prometheus:
    """The Prometheus HTTP API behind an endpoint; counts the requests it sends."""

    ep: Endpoint
    timeout: float = QUERY_TIMEOUT
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def _data(self, path: str, params: dict[str, str]) -> Any:
        with self._lock:
            self.requests += 1
        try:
            body = self.ep.request(
                "GET", f"/api/v1/{path}", query=params, limit=BODY_LIMIT, timeout=self.timeout + 5
            ).json()
        except HttpError as exc:
            answer = _prometheus_error(exc.body)
            if answer:
                raise GpustackError(f"Prometheus refused a report query: {answer}", hint=_slow_hint(answer)) from None
            if exc.status is None or exc.status in PROXY_DOWN:
                raise ClusterUnreachableError(
                    f"Prometheus unreachable via {self.ep.describe()}: {exc}", hint=HINT
                ) from None
            raise GpustackError(f"Prometheus via {self.ep.describe()}: {exc}") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            answer = _prometheus_error(json.dumps(body)) or str(body)[:200]
            raise GpustackError(f"Prometheus refused a report query: {answer}", hint=_slow_hint(answer))
        return body.get("data")

    def instant(self, expr: str, at: float) -> list[dict[str, Any]]:
        data = self._data("query", {"query": expr, "time": f"{at:.3f}", "timeout": f"{self.timeout:.0f}s"})
        result = (data or {}).get("result") if isinstance(data, dict) else None
        return [r for r in result or [] if isinstance(r, dict)]

    def range(self, expr: str, start: float, end: float, step_s: int) -> list[dict[str, Any]]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s}s",
                  "timeout": f"{self.timeout:.0f}s"}  # fmt: skip
        data = self._data("query_range", params)
        result = (data or {}).get("result") if isinstance(data, dict) else None
        return [r for r in result or [] if isinstance(r, dict)]

    def record_groups(self) -> list[dict[str, Any]]:
        data = self._data("rules", {"type": "record"})
        groups = (data or {}).get("groups") if isinstance(data, dict) else None
        return [g for g in groups or [] if isinstance(g, dict)]


def _prometheus_error(body: str) -> str:
    """``errorType: error`` when ``body`` is Prometheus' own JSON error, else ``""``."""
    try:
        err = json.loads(body)
    except (TypeError, ValueError):
        return ""
    if isinstance(err, dict) and err.get("status") == "error":
        return f"{err.get('errorType')}: {err.get('error')}"
    return ""


def _slow_hint(answer: str) -> str | None:
    if "timeout" in answer or "too many samples" in answer or "max samples" in answer:
        return (
            "without gpustack's recording rules every minute of the window is re-joined: a shorter --since, "
            "or gpustack up --only cluster (installs the rules; they cover the window once it has passed)"
        )
    return None


def _first(rows: list[dict[str, Any]], part: str) -> float | None:
    values = [compute.value(r) for r in compute.parts(rows).get(part, []) if compute.value(r) > 0]
    return min(values) if values else None


def collect(prom: Prometheus, request: compute.Request, mode: str = "auto") -> compute.Results:
    """Ask Prometheus everything the report needs. ``mode``: ``auto`` (the rules when loaded and covering
    the window), ``rules`` or ``raw`` (forced; the benchmark compares them)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {MODES}")
    window = q.Window(request.end, request.seconds)
    groups = prom.record_groups()
    notes: list[str] = []
    use_rules = mode == "rules"
    if mode == "auto":
        loaded = any(g.get("name") == q.GROUP for g in groups)
        first: list[dict[str, Any]] = prom.instant(q.coverage_query(window), window.end) if loaded else []
        use_rules, why = compute.use_recording_rules(groups, _first(first, "rules"), _first(first, "raw"))
        if why:
            notes.append(why)
    step_s = compute.rule_interval(groups) if use_rules else q.STEP_S
    window = q.Window(request.end, request.seconds, step_s)
    from gpustack.report.inputs import ksm_label_name

    if use_rules:
        window_rows = prom.instant(q.window_query(window, True), window.end)
    else:  # one request per part, RAW_PARALLEL at a time: each part is heavy (see queries.window_parts)
        tagged = [q.tag(expr, name) for name, expr in q.window_parts(window, False).items()]
        with ThreadPoolExecutor(max_workers=RAW_PARALLEL) as pool:
            window_rows = [row for rows in pool.map(lambda e: prom.instant(e, window.end), tagged) for row in rows]
    now_rows = prom.instant(q.now_query(window, ksm_label_name(request.team_label)), window.end)
    trend_rows: list[dict[str, Any]] = []
    if window.days >= 1:
        first_day = window.end - (window.days - 1) * 86400
        trend_rows = prom.range(q.trend_query(use_rules, step_s), first_day, window.end, 86400)
    return compute.Results(
        window_rows, now_rows, trend_rows, use_rules, step_s, notes=tuple(notes), queries=prom.requests
    )


def make_report(prom: Prometheus, request: compute.Request, mode: str = "auto") -> tuple[Report, float]:
    """Collect and build; also the wall time spent asking Prometheus (seconds)."""
    started = time.monotonic()
    results = collect(prom, request, mode)
    elapsed = time.monotonic() - started
    return compute.build(request, results), elapsed
