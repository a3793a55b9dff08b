"""TEST DOUBLE (part of the Grafana double, tests/fakes/grafana_api.py): Grafana 13.2.0's dashboard endpoints, the
legacy ones and the dashboard API, as upstream answers them (tests/contract/upstream/grafana.yaml ``dashboards``;
tests/contract/test_grafana_dashboards_contract.py):

- ``GET /api/search?type=dash-db``: one hit per dashboard, in the keys of pkg/services/search/model.Hit;
- ``GET /api/dashboards/uid/<uid>``: ``{"dashboard", "meta"}``; 404 ``Dashboard not found``; for a dashboard stored as
  v2 (``stored`` ``v2beta1``), **406** ``dashboard api version not supported, use /apis/dashboard.grafana.app/
  v2beta1/namespaces/default/dashboards/<uid> instead`` (pkg/api/dashboard.go GetDashboard);
- ``GET /apis/dashboard.grafana.app/v1beta1/namespaces/default/dashboards[/<uid>]``: the Kubernetes-style object
  (``spec`` the classic model), a v2 one converted, ``status.conversion`` {failed, storedVersion, error} when it was
  stored in another version; a failed conversion (``convert_error``) leaves ``spec`` empty and ``failed`` true; an
  unknown uid is a Kubernetes 404 Status.

A dashboard is ``{"model", "folder", "stored", "convert_error"}`` in ``FakeGrafana.dashboards``.
"""

from __future__ import annotations

import re
from typing import Any

Obj = dict[str, Any]
GROUP = "dashboard.grafana.app"
NAMESPACE = "default"  # org 1
_API = re.compile(
    rf"^/apis/{re.escape(GROUP)}/(?P<version>[\w]+)/namespaces/(?P<ns>[\w-]+)/dashboards(?:/(?P<uid>[^/]+))?$"
)


def search_hits(dashboards: dict[str, Obj], query: dict[str, list[str]]) -> list[Obj]:
    if query.get("type", ["dash-db"])[0] != "dash-db":
        return []
    return [
        {"id": i, "uid": uid, "orgId": 1, "title": d["model"].get("title", uid), "uri": f"db/{uid}",
         "url": f"/d/{uid}/{uid}", "slug": "", "type": "dash-db", "tags": d["model"].get("tags", []),
         "isStarred": False, "folderUid": "", "folderTitle": d["folder"], "sortMeta": 0, "isDeleted": False}
        for i, (uid, d) in enumerate(sorted(dashboards.items()), start=1)
    ]  # fmt: skip


def legacy_dashboard(dashboards: dict[str, Obj], uid: str) -> tuple[int, Obj]:
    """``GET /api/dashboards/uid/<uid>``: (status, body)."""
    if uid not in dashboards:
        return 404, {"message": "Dashboard not found", "traceID": ""}
    d = dashboards[uid]
    stored = d.get("stored") or "v1beta1"
    if stored.startswith("v2"):  # pkg/api/dashboard.go: "v2 is not supported in /api"
        url = f"/apis/{GROUP}/{stored}/namespaces/{NAMESPACE}/dashboards/{uid}"
        return 406, {"message": f"dashboard api version not supported, use {url} instead", "traceID": ""}
    return 200, {"dashboard": d["model"], "meta": {"slug": uid, "type": "db", "folderTitle": d["folder"],
                                                   "apiVersion": stored}}  # fmt: skip


def _object(uid: str, d: Obj, version: str) -> Obj:
    stored = d.get("stored") or version
    status: Obj = {}
    spec: Obj = dict(d["model"])
    if stored != version:  # converted by the API server from the stored version
        failed = bool(d.get("convert_error"))
        status["conversion"] = {"failed": failed, "storedVersion": stored, "error": d.get("convert_error") or ""}
        if failed:
            spec = {}
    return {"kind": "Dashboard", "apiVersion": f"{GROUP}/{version}",
            "metadata": {"name": uid, "namespace": NAMESPACE, "resourceVersion": "1", "generation": 1,
                         "annotations": {"grafana.app/folder": d["folder"]}},
            "spec": spec, "status": status}  # fmt: skip


def dashboard_api(dashboards: dict[str, Obj], path: str) -> tuple[int, Obj] | None:
    """``GET /apis/dashboard.grafana.app/...``: (status, body), None when ``path`` is not one of its paths."""
    found = _API.match(path)
    if found is None:
        return None
    version, uid = found.group("version"), found.group("uid")
    if found.group("ns") != NAMESPACE or version not in ("v0alpha1", "v1beta1", "v2alpha1", "v2beta1"):
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "the server could not find "
                     "the requested resource", "reason": "NotFound", "details": {}, "code": 404}  # fmt: skip
    if uid is None:
        items = [_object(u, d, version) for u, d in sorted(dashboards.items())]
        return 200, {"kind": "DashboardList", "apiVersion": f"{GROUP}/{version}", "metadata": {}, "items": items}
    if uid not in dashboards:
        return 404, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                     "message": f'dashboards.{GROUP} "{uid}" not found', "reason": "NotFound",
                     "details": {"name": uid, "group": GROUP, "kind": "dashboards"}, "code": 404}  # fmt: skip
    return 200, _object(uid, dashboards[uid], version)
