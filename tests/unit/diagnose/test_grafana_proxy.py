"""The ``grafana`` source on its production path: Grafana reached through the API server's service proxy.

The proxy (the fake API server, like a real one) removes the client's ``Authorization`` header -- it
authenticated the client to the API server -- and passes ``Cookie`` and ``Set-Cookie`` through, so the
source must log in (``POST /login``) and send Grafana's session cookie. The fake Grafana answers 401
without basic auth or that cookie, and 401 to any other ``Authorization`` (e.g. the API server's
bearer token, had the proxy leaked it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.constants import MONITORING_NAMESPACE
from gpustack.diagnose import checks_grafana, registry
from gpustack.diagnose.collect import CollectContext, collect
from gpustack.diagnose.collect_grafana import GRAFANA_PORT, GRAFANA_SERVICE
from gpustack.diagnose.snapshot import Snapshot
from gpustack.monitoring.dashboard import load_capacity_dashboard, load_dashboard
from tests.fakes import scenarios as sc
from tests.fakes.grafana_api import FakeGrafana
from tests.fakes.kube_api import FakeKubeAPI

NO_PROMETHEUS = "http://127.0.0.1:9"  # Grafana's datasource points nowhere: only the Grafana API is under test
PROXY = f"/api/v1/namespaces/{MONITORING_NAMESPACE}/services/{GRAFANA_SERVICE}:{GRAFANA_PORT}/proxy"


@pytest.fixture
def grafana(fake_api: FakeKubeAPI) -> Iterator[FakeGrafana]:
    sc.healthy(1).load(fake_api)
    with FakeGrafana.running(NO_PROMETHEUS, password="right-pw") as fake:
        fake.add_dashboard(load_dashboard())
        fake.add_dashboard(load_capacity_dashboard())
        fake_api.proxy_upstreams[(MONITORING_NAMESPACE, GRAFANA_SERVICE, GRAFANA_PORT)] = fake.url
        yield fake


def grafana_snapshot(kubeconfig: Path, password: str) -> Snapshot:
    """Collect the grafana layer the way doctor does: no Grafana URL, only the kubeconfig."""
    ctx = CollectContext(cfg=Config(), command="doctor", kubeconfig=kubeconfig, timeout=20, layers=("grafana",),
                         extra={"grafana_password": password})  # fmt: skip
    return collect(ctx, sources=["kubernetes", "grafana"])


def r_checks(snap: Snapshot) -> dict[str, Finding]:
    assert checks_grafana.BOTH
    specs = sorted((s for s in registry.REGISTRY.values() if s.id[:3] in ("R01", "R02", "R03", "R04")),
                   key=lambda s: s.id)  # fmt: skip
    return {f.id[:3]: f for f in registry.run(specs, snap)}


def test_logs_in_through_the_proxy_and_reads_with_the_session_cookie(
    fake_api: FakeKubeAPI, kubeconfig: Path, grafana: FakeGrafana
) -> None:
    snap = grafana_snapshot(kubeconfig, "right-pw")

    assert "grafana" not in snap.errors, snap.errors
    assert snap.grafana.reachable and snap.grafana.health == grafana.health
    assert [d["name"] for d in snap.grafana.datasources] == ["Prometheus"]
    assert [d["uid"] for d in snap.grafana.dashboards] == ["gpustack-capacity", "gpustack-dcgm"]
    # every Grafana call went through the API server's service proxy
    proxied = [(m, p.split("?")[0].removeprefix(PROXY)) for m, p, _ in fake_api.requests if p.startswith(PROXY)]
    assert proxied[:4] == [("GET", "/api/health"), ("POST", "/login"), ("GET", "/api/datasources"),
                           ("GET", "/api/search")]  # fmt: skip
    assert ("GET", "/api/dashboards/uid/gpustack-dcgm") in proxied
    assert len(proxied) == len(grafana.requests), "Grafana saw exactly what went through the proxy"
    # Grafana never saw the API server's bearer token; after the login every call carried the session cookie
    assert {scheme for _, scheme, _ in grafana.auth_seen} == {""}
    after_login = [(path, cookies) for path, _, cookies in grafana.auth_seen[2:]]
    assert after_login and all("grafana_session" in cookies for _, cookies in after_login), after_login
    assert len(grafana.sessions) == 1, "one login"
    # what Grafana returned is kept unannotated; the probe and panel errors have their own fields
    assert snap.grafana.datasources[0].items() <= grafana.datasources[0].items()
    assert snap.grafana.dashboards[0].items() <= grafana.search({})[0].items()
    assert list(snap.grafana.datasource_probes) == ["prometheus"]
    assert list(snap.grafana.panel_errors) == ["gpustack-dcgm", "gpustack-capacity"]
    # the panel queries were authorised too: they failed on the datasource (no Prometheus), not on auth
    probe = snap.grafana.datasource_probes["prometheus"]
    assert not probe["ok"] and NO_PROMETHEUS in probe["error"] and "401" not in probe["error"]
    result = r_checks(snap)
    assert result["R01"].status == "pass" and result["R03"].status == "pass"
    assert result["R02"].status == "fail" and NO_PROMETHEUS in result["R02"].evidence


def test_wrong_password_is_a_finding(fake_api: FakeKubeAPI, kubeconfig: Path, grafana: FakeGrafana) -> None:
    snap = grafana_snapshot(kubeconfig, "wrong-pw")

    assert "401" in snap.errors["grafana"] and "/login" in snap.errors["grafana"]
    assert snap.grafana.reachable, "/api/health answered"
    assert not snap.grafana.datasources and not snap.grafana.dashboards
    assert not grafana.sessions
    assert [p for _, p in grafana.requests] == ["/api/health", "/login"], "nothing else tried without a session"
    result = r_checks(snap)
    assert result["R01"].status == "fail"
    assert "refused" in result["R01"].summary and "password" in result["R01"].fix
    assert {result[k].status for k in ("R02", "R03", "R04")} == {"skip"}


def test_the_proxy_passes_cookies_and_drops_authorization(fake_api: FakeKubeAPI, kubeconfig: Path,
                                                          grafana: FakeGrafana) -> None:  # fmt: skip
    """The fake API server's proxy itself, through the real client: Set-Cookie back, Cookie on, no Authorization."""
    from gpustack.diagnose.collect_grafana import _set_cookies
    from gpustack.diagnose.http import HttpError, KubeProxyEndpoint
    from gpustack.runners.kube import Kube

    ep = KubeProxyEndpoint(Kube.from_kubeconfig(kubeconfig), MONITORING_NAMESPACE, GRAFANA_SERVICE, GRAFANA_PORT)
    resp = ep.request("POST", "/login", body={"user": "admin", "password": "right-pw"})
    cookies = _set_cookies(resp)
    assert set(cookies) == {"grafana_session", "grafana_session_expiry"}, resp.headers
    cookie = f"grafana_session={cookies['grafana_session']}"
    assert ep.request("GET", "/api/datasources", headers={"Cookie": cookie}).json()[0]["type"] == "prometheus"
    with pytest.raises(HttpError) as exc:  # basic auth cannot cross the proxy: the API server removes it
        ep.request("GET", "/api/datasources", headers={"Authorization": "Basic YWRtaW46cmlnaHQtcHc="})
    assert exc.value.status == 401
    assert grafana.auth_seen[-1] == ("/api/datasources", "", ())
