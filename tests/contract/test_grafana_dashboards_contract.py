"""Contract: the Grafana double's dashboard endpoints (tests/fakes/grafana_dashboards.py) answer as Grafana 13.2.0
does (tests/contract/upstream/grafana.yaml ``dashboards``, each fact with its upstream source): the legacy search and
get, the 406 the legacy get answers for a dashboard stored as v2, the dashboard API's object with its conversion
status, and the NotFound Status; and gpustack reads the panels of a v2 dashboard through the dashboard API."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from gpustack.diagnose.collect_grafana import GrafanaClient
from gpustack.diagnose.grafana_dashboards import DashboardUnreadable, api_path, fetch_dashboard, search_dashboards
from gpustack.runners.http import DirectEndpoint
from tests.contract.upstream import facts
from tests.fakes.grafana_api import FakeGrafana

D = facts("grafana")["dashboards"]
MODEL = {"uid": "gpustack-dcgm", "title": "NVIDIA DCGM Exporter (gpustack)", "panels": [{"title": "GPU Temperature"}]}


@pytest.fixture
def grafana() -> Iterator[FakeGrafana]:
    with FakeGrafana.running("http://127.0.0.1:9", password="pw") as fake:
        fake.add_dashboard(MODEL)
        fake.add_dashboard({**MODEL, "uid": "v2-dash", "title": "Saved as v2"}, stored="v2beta1")
        fake.add_dashboard({**MODEL, "uid": "broken-v2"}, stored="v2beta1", convert_error="panel 3: unknown kind")
        yield fake


def get(fake: FakeGrafana, path: str) -> tuple[int, Any]:
    req = urllib.request.Request(fake.url + path)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"admin:pw").decode())
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_search_hits_have_grafanas_keys(grafana: FakeGrafana) -> None:
    status, hits = get(grafana, "/api/search?type=dash-db")
    assert status == 200 and {h["uid"] for h in hits} == {"gpustack-dcgm", "v2-dash", "broken-v2"}
    for hit in hits:
        assert set(D["search"]["hit_keys"]) <= set(hit) and hit["type"] == D["search"]["type"]


def test_the_legacy_get_answers_a_classic_dashboard_and_406_for_a_v2_one(grafana: FakeGrafana) -> None:
    status, body = get(grafana, "/api/dashboards/uid/gpustack-dcgm")
    assert status == D["legacy_get"]["ok"]["status"] and set(body) == set(D["legacy_get"]["ok"]["keys"])
    status, body = get(grafana, "/api/dashboards/uid/nope")
    assert (status, body["message"]) == (
        D["legacy_get"]["not_found"]["status"],
        D["legacy_get"]["not_found"]["message"],
    )
    status, body = get(grafana, "/api/dashboards/uid/v2-dash")
    assert status == D["legacy_get"]["v2"]["status"]
    assert body["message"] == D["legacy_get"]["v2"]["message"].format(uid="v2-dash")
    assert f"/namespaces/{D['namespace']['org_1']}/" in body["message"]


def test_the_dashboard_api_converts_a_v2_dashboard_and_says_when_it_cannot(grafana: FakeGrafana) -> None:
    want = D["api_get"]
    status, obj = get(grafana, want["path"].format(uid="v2-dash"))
    assert status == 200 and (obj["kind"], obj["apiVersion"]) == (want["kind"], want["api_version"])
    assert obj["metadata"]["name"] == "v2-dash" and obj["spec"]["panels"] == MODEL["panels"]
    assert sorted(obj["status"]["conversion"]) == sorted(want["conversion_keys"])
    assert obj["status"]["conversion"]["failed"] is False and obj["status"]["conversion"]["storedVersion"] == "v2beta1"
    status, obj = get(grafana, want["path"].format(uid="broken-v2"))
    assert status == 200 and obj["status"]["conversion"]["failed"] is True and obj["status"]["conversion"]["error"]
    status, obj = get(grafana, want["path"].format(uid="gpustack-dcgm"))
    assert status == 200 and obj["status"] == {}, "stored as v1beta1: nothing converted"
    status, obj = get(grafana, want["path"].format(uid="nope"))
    nf = want["not_found"]
    assert (status, obj["kind"], obj["reason"], obj["message"]) == (
        nf["status"], nf["kind"], nf["reason"], nf["message"].format(uid="nope"))  # fmt: skip
    status, listing = get(grafana, want["path"].rsplit("/", 1)[0])
    assert status == 200 and listing["kind"] == want["list_kind"] and len(listing["items"]) == 3
    assert api_path("x") == want["path"].format(uid="x"), "gpustack asks the path Grafana serves"


def test_gpustack_reads_a_v2_dashboard_through_the_dashboard_api(grafana: FakeGrafana) -> None:
    client = GrafanaClient(DirectEndpoint(grafana.url, auth=("admin", "pw")), "admin", "pw")
    assert fetch_dashboard(client, "gpustack-dcgm")["panels"] == MODEL["panels"]
    assert fetch_dashboard(client, "v2-dash")["title"] == "Saved as v2"
    assert ("GET", api_path("v2-dash")) in grafana.requests, "after the 406, the dashboard API"
    with pytest.raises(DashboardUnreadable, match=r"stored as v2beta1 .* could not convert .*unknown kind.*HTTP 406"):
        fetch_dashboard(client, "broken-v2")
    grafana.legacy_gone = True  # a Grafana without the legacy endpoints: the dashboard API for both
    assert fetch_dashboard(client, "gpustack-dcgm")["panels"] == MODEL["panels"]
    assert {h["uid"]: h["title"] for h in search_dashboards(client)}["v2-dash"] == "Saved as v2"
