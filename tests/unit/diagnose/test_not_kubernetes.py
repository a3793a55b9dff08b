"""Issue 26: verify/doctor against a kubeconfig whose server is not a Kubernetes API server (a 404 server, a web
server, a proxy's error page, JSON without gitVersion). It was "K00 pass, K06 pass, exit 1": a 404 read as
"kind not served, empty list". Now the collector proves the server first, K00 fails naming it, every other
API-read check is a consequence (skip), and the run exits 3, asking the server once for the whole run."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack.config.model import Config
from gpustack.diagnose import registry, report
from gpustack.diagnose.collect import CollectContext, collect
from gpustack.diagnose.engine import cluster_unreachable
from gpustack.runners.kubeconfig import resolve_kubeconfig
from tests.fakes import not_kube
from tests.fakes import scenarios as sc
from tests.fakes.kube_api import FakeKubeAPI

API_LAYERS = ("kubernetes", "gpu-operator", "monitoring", "grafana")


@pytest.mark.parametrize("command", ["verify", "doctor"])
@pytest.mark.parametrize("kind", not_kube.KINDS)
def test_not_kubernetes_is_k00_and_exit_3(kind: str, command: str, tmp_path: Path) -> None:
    with not_kube.serving(kind) as server:
        target = resolve_kubeconfig(kubeconfig=server.write_kubeconfig(tmp_path / "kc"))
        ctx = CollectContext(cfg=Config.model_validate({}), command=command, kubeconfig=None, timeout=10,
                             layers=API_LAYERS, target=target)  # fmt: skip
        snap = collect(ctx)
    said = f"not a Kubernetes API server at {server.url}: {not_kube.REASONS[kind]}"
    assert snap.errors["kubernetes"] == said and snap.kube == {}
    # every source shares one verdict: the server was asked once for the whole run, and nothing else
    assert server.paths == (["/version", "/api"] if kind == "api-404" else ["/version"])
    assert cluster_unreachable(snap)
    findings = report.attribute_to_api(registry.run(registry.select(command, layers=API_LAYERS), snap))
    k00 = next(f for f in findings if f.id == "K00-api-unreachable")
    assert (k00.status, k00.evidence) == ("fail", said)
    assert k00.summary == "the kubeconfig's server is not a Kubernetes API server" and "/version" in k00.fix
    assert [f.id for f in findings if f.status != "skip"] == ["K00-api-unreachable"]  # K06 and all others: skip
    assert report.exit_code(findings, cluster_unreachable=True) == 3
    assert report.verdict(findings, cluster_unreachable=True).startswith(f"UNREACHABLE: {said}; ")


def test_the_fake_api_server_is_proven_kubernetes(fake_api: FakeKubeAPI, kubeconfig: Path) -> None:
    """The double every other test reads a cluster through answers /version and /api as kube-apiserver does."""
    sc.healthy(1).load(fake_api)
    fake_api.reset_requests()
    snap = sc.collect_kube(fake_api, kubeconfig)
    assert not snap.errors and snap.kube["Node"]
    asked = [p for _, p, _ in fake_api.requests]
    assert asked[:2] == ["/version", "/api"] and asked.count("/version") == 1
    assert [f.id for f in sc.run_checks(snap) if f.status == "fail"] == []
