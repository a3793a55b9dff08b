"""The ``grafana`` source on its production path: Grafana reached through the API server's service proxy.

The proxy (the fake API server, like a real one) removes the client's ``Authorization`` header -- it
authenticated the client to the API server -- and passes ``Cookie`` and ``Set-Cookie`` through, so the
source must log in (``POST /login``) and send Grafana's session cookie. The fake Grafana answers 401
without basic auth or that cookie, and 401 to any other ``Authorization`` (e.g. the API server's
bearer token, had the proxy leaked it)."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.constants import GRAFANA_ADMIN_SECRET, MONITORING_NAMESPACE
from gpustack.diagnose import checks_grafana, registry
from gpustack.diagnose.collect import CollectContext, collect
from gpustack.diagnose.collect_grafana import GRAFANA_PORT, GRAFANA_SERVICE, CredentialError, credentials_from_cluster
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
    specs = sorted((s for s in registry.REGISTRY.values() if s.id[:3] in ("R01", "R02", "R03", "R04", "R05")),
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

    assert "401" in snap.errors["grafana:login"] and "/login" in snap.errors["grafana:login"]
    assert "grafana" not in snap.errors
    assert snap.grafana.reachable, "/api/health answered"
    assert not snap.grafana.datasources and not snap.grafana.dashboards
    assert not grafana.sessions
    assert [p for _, p in grafana.requests] == ["/api/health", "/login"], "nothing else tried without a session"
    result = r_checks(snap)
    assert result["R01"].status == "pass", "Grafana is healthy: the login is a separate finding"
    assert result["R05"].status == "fail" and "refused" in result["R05"].summary
    assert "grafana cli admin reset-admin-password" in result["R05"].fix
    assert {result[k].status for k in ("R02", "R03", "R04")} == {"skip"}
    assert all("R05-grafana-login" in result[k].summary for k in ("R02", "R03", "R04")), "one cause, named once"


def test_the_proxy_passes_cookies_and_drops_authorization(fake_api: FakeKubeAPI, kubeconfig: Path,
                                                          grafana: FakeGrafana) -> None:  # fmt: skip
    """The fake API server's proxy itself, through the real client: Set-Cookie back, Cookie on, no Authorization."""
    from gpustack.diagnose.collect_grafana import _set_cookies
    from gpustack.runners.http import HttpError, KubeProxyEndpoint
    from gpustack.runners.kubeconfig import kube_from_file

    ep = KubeProxyEndpoint(kube_from_file(kubeconfig), MONITORING_NAMESPACE, GRAFANA_SERVICE, GRAFANA_PORT)
    resp = ep.request("POST", "/login", body={"user": "admin", "password": "right-pw"})
    cookies = _set_cookies(resp)
    assert set(cookies) == {"grafana_session", "grafana_session_expiry"}, resp.headers
    cookie = f"grafana_session={cookies['grafana_session']}"
    assert ep.request("GET", "/api/datasources", headers={"Cookie": cookie}).json()[0]["type"] == "prometheus"
    with pytest.raises(HttpError) as exc:  # basic auth cannot cross the proxy: the API server removes it
        ep.request("GET", "/api/datasources", headers={"Authorization": "Basic YWRtaW46cmlnaHQtcHc="})
    assert exc.value.status == 401
    assert grafana.auth_seen[-1] == ("/api/datasources", "", ())


# --- credentials only in the cluster ------------------------------------------------------------------

SECRET_PATH = f"/api/v1/namespaces/{MONITORING_NAMESPACE}/secrets/{GRAFANA_ADMIN_SECRET}"


def cluster_snapshot(kubeconfig: Path, **extra: object) -> Snapshot:
    """doctor's grafana layer with no password given: the state (empty) or the cluster must provide it."""
    ctx = CollectContext(cfg=Config(), command="doctor", kubeconfig=kubeconfig, timeout=20, layers=("grafana",),
                         extra=dict(extra))  # fmt: skip
    return collect(ctx, sources=["kubernetes", "grafana"])


@pytest.fixture
def cluster_grafana(fake_api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGrafana]:
    """The scenario cluster (its Grafana Deployment reads the admin password from gpustack-grafana-admin) and
    a Grafana that accepts only that password; an empty state directory."""
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    sc.healthy(1).load(fake_api)
    with FakeGrafana.running(NO_PROMETHEUS, password=sc.GRAFANA_PASSWORD) as fake:
        fake.add_dashboard(load_dashboard())
        fake.add_dashboard(load_capacity_dashboard())
        fake_api.proxy_upstreams[(MONITORING_NAMESPACE, GRAFANA_SERVICE, GRAFANA_PORT)] = fake.url
        yield fake


def test_credentials_read_from_the_secret_grafanas_deployment_references(
    fake_api: FakeKubeAPI, kubeconfig: Path, cluster_grafana: FakeGrafana
) -> None:
    snap = cluster_snapshot(kubeconfig)
    assert "grafana:login" not in snap.errors and "grafana" not in snap.errors, snap.errors
    assert len(cluster_grafana.sessions) == 1
    secret_reads = [(m, p) for m, p, _ in fake_api.requests if "/secrets" in p]
    assert secret_reads == [("GET", SECRET_PATH)], "one GET of the referenced Secret, never a LIST"
    assert snap.grafana.login == {
        "state": "ok", "user": "admin", "deployment": f"{MONITORING_NAMESPACE}/{GRAFANA_SERVICE}",
        "secret": f"{MONITORING_NAMESPACE}/{GRAFANA_ADMIN_SECRET}", "key": "admin-password",
        "source": f"Secret {MONITORING_NAMESPACE}/{GRAFANA_ADMIN_SECRET} key admin-password "
                  f"(GF_SECURITY_ADMIN_PASSWORD) of Deployment {MONITORING_NAMESPACE}/{GRAFANA_SERVICE}",
    }  # fmt: skip
    assert sc.GRAFANA_PASSWORD not in json.dumps(snap.to_json()), "the password is never kept"
    result = r_checks(snap)
    assert result["R05"].status == "pass" and result["R01"].status == "pass" and result["R03"].status == "pass"


@pytest.mark.parametrize(
    ("fault", "state", "summary", "fix"),
    [(403, "secret-forbidden", "may not read Secret", "kubectl auth can-i get secret/gpustack-grafana-admin"),
     (404, "secret-missing", "is missing or incomplete", "gpustack up --only cluster")],
)  # fmt: skip
def test_an_unreadable_secret_is_one_finding(
    fake_api: FakeKubeAPI, kubeconfig: Path, cluster_grafana: FakeGrafana, fault: int, state: str, summary: str,
    fix: str,
) -> None:  # fmt: skip
    fake_api.fail(re.escape(SECRET_PATH), fault)
    snap = cluster_snapshot(kubeconfig)
    assert snap.grafana.login["state"] == state and snap.grafana.reachable
    assert [p for _, p in cluster_grafana.requests] == ["/api/health"], "no login attempted without a password"
    result = r_checks(snap)
    assert result["R01"].status == "pass", "Grafana answers /api/health: not 'could not be reached'"
    assert result["R05"].status == "fail" and summary in result["R05"].summary and fix in result["R05"].fix
    assert f"{MONITORING_NAMESPACE}/{GRAFANA_ADMIN_SECRET}" in result["R05"].evidence
    assert {result[k].status for k in ("R02", "R03", "R04")} == {"skip"}
    assert not any("logs" in result[k].fix for k in result), "no `kubectl logs` cascade"


def test_the_state_file_is_used_only_for_gpustacks_own_cluster(
    fake_api: FakeKubeAPI, tmp_path: Path, cluster_grafana: FakeGrafana
) -> None:
    from gpustack.paths import grafana_password_path, kubeconfig_path

    stale = grafana_password_path(Config().cluster.name)
    stale.parent.mkdir(parents=True, mode=0o700)
    stale.write_text("this-machines-other-cluster\n")
    elsewhere = fake_api.write_kubeconfig(tmp_path / "other.conf")
    snap = cluster_snapshot(elsewhere)  # another cluster (no admin.conf for this server): the Secret
    assert snap.grafana.login["state"] == "ok" and "Secret" in snap.grafana.login["source"]
    fake_api.write_kubeconfig(kubeconfig_path("gpustack"))  # now it is gpustack's own cluster: the state file
    snap = cluster_snapshot(elsewhere)
    assert snap.grafana.login["source"] == f"gpustack's state file {stale}" and snap.grafana.login["state"] == "refused"
    result = r_checks(snap)["R05"]
    assert result.status == "fail" and f'reset-admin-password "$(cat {stale})"' in result.fix


def _deployment(container: dict[str, Any], volumes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "grafana", "namespace": "observability", "labels": {"app.kubernetes.io/name": "grafana"}},
            "spec": {"template": {"spec": {"containers": [{"name": "grafana", **container}],
                                           "volumes": volumes or []}}}}  # fmt: skip


def _secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "observability"},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}  # fmt: skip


@pytest.mark.parametrize(
    ("container", "volumes", "user", "source"),
    [
        ({"env": [{"name": "GF_SECURITY_ADMIN_PASSWORD", "value": "pw"}]}, None, "admin",
         "GF_SECURITY_ADMIN_PASSWORD (a literal value in the Deployment)"),
        ({"envFrom": [{"secretRef": {"name": "grafana-env"}}]}, None, "ops",
         "Secret observability/grafana-env key GF_SECURITY_ADMIN_PASSWORD (envFrom)"),
        ({"env": [{"name": "GF_SECURITY_ADMIN_PASSWORD__FILE", "value": "/etc/secrets/admin/pass"}],
          "volumeMounts": [{"name": "admin", "mountPath": "/etc/secrets/admin"}]},
         [{"name": "admin", "secret": {"secretName": "grafana-files", "items": [{"key": "password", "path": "pass"}]}}],
         "admin", "Secret observability/grafana-files key password (GF_SECURITY_ADMIN_PASSWORD__FILE=/etc/secrets/admin/pass)"),
    ],
)  # fmt: skip
def test_credentials_follow_the_container_spec(
    fake_api: FakeKubeAPI, kube: Any, container: dict[str, Any], volumes: Any, user: str, source: str
) -> None:
    fake_api.seed([_secret("grafana-env", {"GF_SECURITY_ADMIN_PASSWORD": "pw", "GF_SECURITY_ADMIN_USER": "ops"}),
                   _secret("grafana-files", {"password": "pw"})])  # fmt: skip
    snap = Snapshot(kube={"Deployment": [_deployment(container, volumes)]})
    creds = credentials_from_cluster(snap, kube, "admin")
    assert (creds.user, creds.password) == (user, "pw")
    assert creds.source == f"{source} of Deployment observability/grafana"
    assert "pw" not in repr(creds)
    with pytest.raises(CredentialError) as exc:
        credentials_from_cluster(Snapshot(kube={"Deployment": [_deployment({"env": []})]}), kube, "admin")
    assert exc.value.state == "not-set"
