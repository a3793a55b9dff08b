"""gpustack.report.source: where Prometheus is reached, what is sent (and how often), what failures become."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gpustack.config.model import Config
from gpustack.errors import ClusterUnreachableError, GpustackError, UsageError
from gpustack.report import queries as q
from gpustack.report import source
from gpustack.report.compute import Request
from gpustack.runners.http import DirectEndpoint, HttpError, KubeProxyEndpoint, Response

END = 1_800_000_000.0


class Scripted:
    """An endpoint answering from a function of (path, params); records every request."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[tuple[str, dict[str, str]]] = []

    def describe(self) -> str:
        return "scripted"

    def request(self, method: str, path: str, *, query: Mapping[str, str] | None = None, **_: Any) -> Response:
        params = dict(query or {})
        self.calls.append((path, params))
        result = self.answer(path, params)
        if isinstance(result, Exception):
            raise result
        return Response(200, json.dumps(result).encode())


def success(data: Any) -> dict[str, Any]:
    return {"status": "success", "data": data}


def test_endpoint_url_kubeconfig_and_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    cfg = Config()
    ep = source.endpoint(cfg, None, "http://127.0.0.1:9090/")
    assert isinstance(ep, DirectEndpoint) and ep.base_url == "http://127.0.0.1:9090"
    with pytest.raises(UsageError, match="--prometheus-url 'prometheus:9090': must be a URL starting with http://"):
        source.endpoint(cfg, None, "prometheus:9090")
    with pytest.raises(UsageError, match=r"--kubeconfig .*: no such file"):
        source.endpoint(cfg, tmp_path / "missing.conf", None)
    with pytest.raises(ClusterUnreachableError) as err:
        source.endpoint(cfg, None, None)
    assert "no kubeconfig for cluster" in err.value.message and "--prometheus-url" in (err.value.hint or "")
    bad = tmp_path / "bad.conf"
    bad.write_text("this: is not a kubeconfig\n")
    with pytest.raises(UsageError, match="not a usable kubeconfig"):
        source.endpoint(cfg, bad, None)
    good = tmp_path / "admin.conf"
    good.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    proxy = source.endpoint(cfg, good, None)
    assert isinstance(proxy, KubeProxyEndpoint)
    assert proxy.base == "/api/v1/namespaces/monitoring/services/kube-prometheus-stack-prometheus:http-web/proxy"


@pytest.mark.parametrize(
    ("error", "kind", "needle"),
    [
        (HttpError("GET x: connection refused"), ClusterUnreachableError, "Prometheus unreachable via scripted"),
        (
            HttpError("GET x: HTTP 503", status=503, body="no endpoints available"),
            ClusterUnreachableError,
            "unreachable",
        ),
        (HttpError("GET x: HTTP 404", status=404, body="services not found"), ClusterUnreachableError, "unreachable"),
        (
            HttpError("HTTP 422", status=422, body='{"status":"error","errorType":"execution","error":"bad"}'),
            GpustackError,
            "Prometheus refused a report query: execution: bad",
        ),
        (HttpError("GET x: HTTP 401", status=401, body="Unauthorized"), GpustackError, "HTTP 401"),
    ],
)
def test_failures(error: HttpError, kind: type[Exception], needle: str) -> None:
    prom = source.Prometheus(Scripted(lambda path, params: error))  # type: ignore[arg-type]
    with pytest.raises(kind) as err:
        prom.instant("up", END)
    assert needle in err.value.message  # type: ignore[attr-defined]
    assert type(err.value) is kind


def test_a_timeout_points_at_the_recording_rules() -> None:
    body = '{"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"}'
    prom = source.Prometheus(Scripted(lambda path, params: HttpError("503", status=503, body=body)))  # type: ignore[arg-type]
    with pytest.raises(GpustackError) as err:
        prom.instant("up", END)
    assert err.value.exit_code == 1 and "recording rules" in (err.value.hint or "")


def answers(groups: list[dict[str, Any]], first: dict[str, float]) -> Any:
    def answer(path: str, params: dict[str, str]) -> Any:
        if path == "/api/v1/rules":
            return success({"groups": groups})
        if path == "/api/v1/query_range":
            return success({"resultType": "matrix", "result": []})
        if (
            "min_over_time(timestamp(" in params["query"]
            and q.PART_LABEL in params["query"]
            and "rules" in params["query"]
        ):
            rows = [{"metric": {q.PART_LABEL: k}, "value": [END, str(v)]} for k, v in first.items()]
            return success({"resultType": "vector", "result": rows})
        return success({"resultType": "vector", "result": []})

    return answer


GROUP = [{"name": q.GROUP, "interval": 60, "rules": [{"name": q.ALLOCATED, "health": "ok"}]}]


def test_with_rules_five_requests_without_ten() -> None:
    covered = Scripted(answers(GROUP, {"rules": END - 30 * 86400, "raw": END - 30 * 86400}))
    results = source.collect(source.Prometheus(covered), Request(END, 30 * 86400))  # type: ignore[arg-type]
    assert results.use_rules and results.queries == 5 and not results.notes
    paths = [p for p, _ in covered.calls]
    assert paths == ["/api/v1/rules", "/api/v1/query", "/api/v1/query", "/api/v1/query", "/api/v1/query_range"]
    window = covered.calls[2][1]
    assert q.ALLOCATED in window["query"] and window["time"] == f"{END:.3f}" and window["timeout"] == "120s"
    trend = covered.calls[4][1]
    assert (trend["start"], trend["end"], trend["step"]) == (f"{END - 29 * 86400:.3f}", f"{END:.3f}", "86400s")

    missing = Scripted(answers([], {}))
    results = source.collect(source.Prometheus(missing), Request(END, 30 * 86400))  # type: ignore[arg-type]
    assert not results.use_rules and results.queries == 10 and "not loaded" in results.notes[0]
    queries = [c[1]["query"] for c in missing.calls if c[0] == "/api/v1/query"]
    tags = [re.findall(rf'"{q.PART_LABEL}", "(\w+)"', e)[-1] for e in queries[:-1]]  # the last one: "now"
    assert sorted(tags) == sorted(["allocated", "used", "measured", "idle", "capacity", "pending", "bucket"])

    late = Scripted(answers(GROUP, {"rules": END - 86400, "raw": END - 30 * 86400}))
    results = source.collect(source.Prometheus(late), Request(END, 30 * 86400))  # type: ignore[arg-type]
    assert not results.use_rules and "recording rules start at" in results.notes[0]


def test_forced_modes_and_a_window_under_a_day() -> None:
    ep = Scripted(answers(GROUP, {}))
    results = source.collect(source.Prometheus(ep), Request(END, 3600), mode="raw")  # type: ignore[arg-type]
    assert not results.use_rules and results.queries == 9  # rules API, 7 window parts, now; no trend for 1 h
    assert all(q.ALLOCATED not in c[1]["query"] for c in ep.calls[1:])
    results = source.collect(source.Prometheus(Scripted(answers([], {}))), Request(END, 86400), mode="rules")  # type: ignore[arg-type]
    assert results.use_rules and results.queries == 4
    with pytest.raises(ValueError):
        source.collect(source.Prometheus(ep), Request(END, 86400), mode="fast")  # type: ignore[arg-type]
