"""Reading dashboards from Grafana 13 (R03, R04; issue 32 item 9): the legacy ``/api`` endpoints where they answer,
Grafana's dashboard API (``/apis/dashboard.grafana.app``) where they do not.

What the pinned Grafana (13.2.0, kube-prometheus-stack 88.5.3) serves (tests/contract/upstream/grafana.yaml
``dashboards``, checked against the Grafana double by tests/contract/test_grafana_dashboards_contract.py):

- ``GET /api/search?type=dash-db`` (deprecated, still served): the dashboards' hits (uid, title, ...);
- ``GET /api/dashboards/uid/<uid>`` (deprecated): ``{"dashboard": <model>, "meta": ...}`` for a dashboard stored in a
  v0/v1 schema; for one stored as v2 (the schema Grafana 12+ writes when dashboards are saved with the v2 feature)
  **406** ``dashboard api version not supported, use /apis/dashboard.grafana.app/<version>/namespaces/<ns>/dashboards/
  <uid> instead`` (grafana/grafana pkg/api/dashboard.go GetDashboard, ``// v2 is not supported in /api``);
- ``GET /apis/dashboard.grafana.app/v1beta1/namespaces/<ns>/dashboards/<uid>``: a Kubernetes-style object whose
  ``spec`` is the classic model -- a v2 dashboard converted by the API server (apps/dashboard/pkg/migration/conversion
  ``Convert_V2beta1_to_V1beta1``); a conversion that failed says so in ``status.conversion`` (``failed``,
  ``storedVersion``, ``error``: "the caller should instead fetch the stored version"). Namespace ``default`` is org 1.

So: the legacy path first (every Grafana gpustack supports answers it for gpustack's own dashboards, provisioned as
classic JSON by the sidecar), the dashboard API on a 406 (or a 404/410 from a Grafana that dropped the legacy
path), and a failed conversion is an error that names the stored version. The search falls back to listing the
dashboard API's objects when ``/api/search`` is gone.
"""

from __future__ import annotations

import re
from typing import Any

from gpustack.runners.http import HttpError

GROUP = "dashboard.grafana.app"
VERSION = "v1beta1"  # the classic-model version of Grafana's dashboard API (12.x, 13.x)
NAMESPACE = "default"  # org 1 (pkg/services/apiserver/endpoints/request: org 1 -> "default", others "org-<id>")
#: the legacy path is gone (a Grafana that removed it): try the dashboard API instead
GONE = (404, 410)
_API_PATH = re.compile(rf"/apis/{re.escape(GROUP)}/(?P<version>[\w.]+)/namespaces/(?P<ns>[\w.-]+)/dashboards/")


class DashboardUnreadable(Exception):
    """The dashboard exists but gpustack cannot read its panels (a v2 dashboard Grafana failed to convert)."""


def api_path(uid: str, namespace: str = NAMESPACE) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/dashboards/{uid}"


def namespace_of(message: str) -> str:
    """The namespace a 406's message names (``.../namespaces/<ns>/dashboards/...``), else :data:`NAMESPACE`."""
    found = _API_PATH.search(message or "")
    return found.group("ns") if found else NAMESPACE


def _message(exc: HttpError) -> str:
    body = exc.json_body()
    return str(body.get("message") or "") if isinstance(body, dict) else str(exc)


def fetch_dashboard(client: Any, uid: str) -> dict[str, Any]:
    """The classic model (panels, templating) of dashboard ``uid``: ``/api/dashboards/uid`` or, on a 406 (stored
    as v2) or a legacy path that is gone, the dashboard API's v1beta1 object. :class:`HttpError` as Grafana answered,
    :class:`DashboardUnreadable` when Grafana could not convert it."""
    try:
        return (client.get(f"/api/dashboards/uid/{uid}") or {}).get("dashboard") or {}
    except HttpError as exc:
        if exc.status != 406 and exc.status not in GONE:
            raise
        namespace = namespace_of(_message(exc)) if exc.status == 406 else NAMESPACE
        legacy = f"/api/dashboards/uid/{uid}: HTTP {exc.status} {_message(exc)}".strip()
    obj = client.get(api_path(uid, namespace)) or {}
    conversion = (obj.get("status") or {}).get("conversion") or {}
    if conversion.get("failed"):
        stored = conversion.get("storedVersion") or "?"
        raise DashboardUnreadable(
            f"dashboard {uid} is stored as {stored} and Grafana could not convert it to {VERSION} "
            f"({conversion.get('error') or 'no reason given'}); {legacy}. Re-provision it: gpustack up --only cluster"
        )
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def search_dashboards(client: Any) -> list[Any]:
    """The dashboards' search hits: ``/api/search?type=dash-db``, or, where that is gone (404/410), the dashboard
    API's list as hits (``uid`` = the object's name, ``title`` from its spec)."""
    try:
        hits = client.get("/api/search", {"type": "dash-db"})
        return hits if isinstance(hits, list) else []
    except HttpError as exc:
        if exc.status not in GONE:
            raise
    listing = client.get(f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/dashboards") or {}
    return [
        {"uid": (item.get("metadata") or {}).get("name"), "title": (item.get("spec") or {}).get("title")}
        for item in listing.get("items") or []
        if isinstance(item, dict)
    ]
