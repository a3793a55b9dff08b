"""TEST DOUBLE: a small Kubernetes API server speaking the real REST paths (not Kubernetes).

Enough of the API for gpustack's cluster layer, driven by the real ``kubernetes`` client:

- discovery: ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>/<version>`` (CRD groups appear once a
  CustomResourceDefinition is created, and disappear when it is deleted);
- core/v1 namespaces (cluster), secrets, configmaps, services; apiextensions.k8s.io/v1 CRDs;
  any custom resource whose CRD exists;
- GET item/list, POST (409 when it exists), DELETE, and server-side apply: ``PATCH`` with
  ``Content-Type: application/apply-patch+yaml`` and ``?fieldManager=`` (required) creates the object
  or merges the applied configuration; fields the same manager applied before and no longer applies
  are removed; a field owned by another manager with a different value is a 409 Conflict unless
  ``force=true``. Lists are atomic. Responses are the stored object.
- namespaced objects need their Namespace (404 otherwise, as on a real server); Secret ``stringData``
  is folded into base64 ``data``; CRDs become ``Established`` after ``crd_establish_delay`` seconds.

Every request is recorded in ``requests`` as ``(method, path, content type)``.
"""

from __future__ import annotations

import base64
import copy
import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

Obj = dict[str, Any]
Key = tuple[str, str, str, str, str]  # group, version, plural, namespace ("" = cluster), name
SERVER_FIELDS = {"resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"}


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    def api_resource(self) -> Obj:
        return {
            "name": self.plural,
            "singularName": self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
        }


BUILTIN = [
    Resource("", "v1", "namespaces", "Namespace", False),
    Resource("", "v1", "secrets", "Secret", True),
    Resource("", "v1", "configmaps", "ConfigMap", True),
    Resource("", "v1", "services", "Service", True),
    Resource("", "v1", "persistentvolumes", "PersistentVolume", False),
    Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False),
    Resource("apps", "v1", "daemonsets", "DaemonSet", True),
    Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False),
]


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> Obj:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


def _leaves(obj: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Leaf paths of a JSON object; lists and scalars are leaves (lists are atomic)."""
    if isinstance(obj, dict) and obj:
        out: dict[tuple[str, ...], Any] = {}
        for k, v in obj.items():
            if prefix == ("metadata",) and k in SERVER_FIELDS:
                continue
            out.update(_leaves(v, (*prefix, k)))
        return out
    return {prefix: obj}


def _set(obj: Obj, path: tuple[str, ...], value: Any) -> None:
    for p in path[:-1]:
        nxt = obj.get(p)
        if not isinstance(nxt, dict):
            nxt = obj[p] = {}
        obj = nxt
    obj[path[-1]] = copy.deepcopy(value)


def _delete(obj: Obj, path: tuple[str, ...]) -> None:
    parents = []
    cur: Any = obj
    for p in path[:-1]:
        if not isinstance(cur, dict) or p not in cur:
            return
        parents.append((cur, p))
        cur = cur[p]
    if isinstance(cur, dict):
        cur.pop(path[-1], None)
    for parent, key in reversed(parents):  # prune emptied maps
        if parent[key] == {}:
            del parent[key]


class FakeKubeAPI:
    """Start with :meth:`running` (a context manager) or :meth:`start`/:meth:`stop`."""

    def __init__(self, *, crd_establish_delay: float = 0.0) -> None:
        self.resources: dict[tuple[str, str, str], Resource] = {(r.group, r.version, r.plural): r for r in BUILTIN}
        self.objects: dict[Key, Obj] = {}
        self.owners: dict[Key, dict[tuple[str, ...], str]] = {}  # field path -> manager
        self.requests: list[tuple[str, str, str]] = []
        self.crd_establish_delay = crd_establish_delay
        self._crd_created: dict[str, float] = {}
        self._rv = 0
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeKubeAPI:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _reply(self, code: int, body: Obj) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                api.requests.append((method, self.path, ctype))
                try:
                    code, body = api.handle(method, self.path, ctype, raw)
                except ApiError as exc:
                    code, body = exc.code, exc.status()
                self._reply(code, body)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

            def do_PUT(self) -> None:
                self._handle("PUT")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @classmethod
    @contextmanager
    def running(cls, **kwargs: Any) -> Iterator[FakeKubeAPI]:
        api = cls(**kwargs).start()
        try:
            yield api
        finally:
            api.stop()

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig pointing at this server (token auth, plain HTTP)."""
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(cfg))
        return path

    # -- helpers for tests ----------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, name: str, namespace: str = "") -> Obj | None:
        group, _, version = api_version.rpartition("/")
        for (g, v, plural), r in self.resources.items():
            if g == group and v == version and r.kind == kind:
                obj = self.objects.get((g, v, plural, namespace if r.namespaced else "", name))
                return copy.deepcopy(obj) if obj else None
        return None

    def mutating_requests(self) -> list[tuple[str, str, str]]:
        return [r for r in self.requests if r[0] != "GET"]

    # -- request handling -----------------------------------------------------------------------------

    def handle(self, method: str, raw_path: str, ctype: str, raw: bytes) -> tuple[int, Obj]:
        with self._lock:
            url = urlparse(raw_path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            parts = [p for p in url.path.split("/") if p]
            disc = self._discovery(parts)
            if disc is not None:
                if method != "GET":
                    raise ApiError(405, "MethodNotAllowed", "discovery is read-only")
                return 200, disc
            res, ns, name = self._route(parts)
            if method == "GET":
                return 200, self._get(res, ns, name)
            body = self._body(ctype, raw) if raw else {}
            if method == "POST":
                return 201, self._create(res, ns, body, manager=query.get("fieldManager", "client"))
            if method == "PATCH":
                if ctype != "application/apply-patch+yaml":
                    raise ApiError(
                        415, "UnsupportedMediaType", f"fake API supports only server-side apply, not {ctype}"
                    )
                if not query.get("fieldManager"):
                    raise ApiError(400, "BadRequest", "PATCH with apply requires fieldManager")
                if name is None:
                    raise ApiError(405, "MethodNotAllowed", "apply needs a name")
                return self._apply(res, ns, name, body, query["fieldManager"], query.get("force") == "true")
            if method == "DELETE":
                return 200, self._delete_obj(res, ns, name)
            raise ApiError(405, "MethodNotAllowed", method)

    def _body(self, ctype: str, raw: bytes) -> Obj:
        try:
            data = yaml.safe_load(raw) if "yaml" in ctype else json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError(400, "BadRequest", f"invalid body: {exc}") from None
        if not isinstance(data, dict):
            raise ApiError(400, "BadRequest", "body is not an object")
        return data

    def _served(self) -> list[Resource]:
        out = []
        now = time.monotonic()
        for r in self.resources.values():
            created = self._crd_created.get(f"{r.plural}.{r.group}")
            if created is None and r not in BUILTIN:
                continue
            if created is not None and now - created < self.crd_establish_delay:
                continue
            out.append(r)
        return out

    def _discovery(self, parts: list[str]) -> Obj | None:
        served = self._served()
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if parts == ["api", "v1"]:
            return self._resource_list("v1", [r for r in served if r.group == ""])
        if parts == ["apis"]:
            groups: dict[str, list[str]] = {}
            for r in served:
                if r.group:
                    groups.setdefault(r.group, [])
                    if r.version not in groups[r.group]:
                        groups[r.group].append(r.version)
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": g,
                        "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                        "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                    }
                    for g, vs in sorted(groups.items())
                ],
            }
        if len(parts) == 3 and parts[0] == "apis":
            rs = [r for r in served if r.group == parts[1] and r.version == parts[2]]
            if not rs:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return self._resource_list(f"{parts[1]}/{parts[2]}", rs)
        return None

    @staticmethod
    def _resource_list(gv: str, rs: list[Resource]) -> Obj:
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv,
            "resources": [r.api_resource() for r in rs],
        }

    def _route(self, parts: list[str]) -> tuple[Resource, str, str | None]:
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest or len(rest) > 2:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        key = (group, version, rest[0])
        res = self.resources.get(key)
        if res is None or res not in self._served():
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if res.namespaced and not ns and len(rest) == 2:
            raise ApiError(404, "NotFound", "namespaced resource requested without a namespace")
        if not res.namespaced:
            ns = ""
        return res, ns, rest[1] if len(rest) == 2 else None

    def _key(self, res: Resource, ns: str, name: str) -> Key:
        return (res.group, res.version, res.plural, ns, name)

    def _get(self, res: Resource, ns: str, name: str | None) -> Obj:
        if name is None:
            items = [
                self._view(o)
                for (g, v, p, ons, _), o in sorted(self.objects.items())
                if (g, v, p) == (res.group, res.version, res.plural) and (not ns or ons == ns)
            ]
            api_version = f"{res.group}/{res.version}" if res.group else res.version
            return {
                "kind": f"{res.kind}List",
                "apiVersion": api_version,
                "metadata": {"resourceVersion": str(self._rv)},
                "items": items,
            }
        obj = self.objects.get(self._key(res, ns, name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{res.plural}.{res.group or "core"} "{name}" not found')
        return self._view(obj)

    def _view(self, obj: Obj) -> Obj:
        out = copy.deepcopy(obj)
        name = out["metadata"]["name"]
        if out.get("kind") == "CustomResourceDefinition":
            created = self._crd_created.get(name, 0.0)
            established = time.monotonic() - created >= self.crd_establish_delay
            out["status"] = {
                "conditions": [
                    {"type": "NamesAccepted", "status": "True"},
                    {"type": "Established", "status": "True" if established else "False"},
                ]
            }
        return out

    def _check(self, res: Resource, ns: str, body: Obj, name: str | None) -> None:
        api_version = f"{res.group}/{res.version}" if res.group else res.version
        if body.get("apiVersion") != api_version or body.get("kind") != res.kind:
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({body.get('apiVersion')}) / kind ({body.get('kind')}) does not "
                f"match the expected {api_version} / {res.kind}",
            )
        meta = body.get("metadata") or {}
        if name is not None and meta.get("name") != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        if res.namespaced:
            if meta.get("namespace", ns) != ns:
                raise ApiError(400, "BadRequest", "the namespace of the object does not match the URL")
            if ("", "v1", "namespaces", "", ns) not in self.objects:
                raise ApiError(404, "NotFound", f'namespaces "{ns}" not found')

    def _normalize(self, body: Obj) -> Obj:
        obj = copy.deepcopy(body)
        if obj.get("kind") == "Secret" and "stringData" in obj:
            data = obj.setdefault("data", {})
            for k, v in obj.pop("stringData").items():
                data[k] = base64.b64encode(str(v).encode()).decode()
        return obj

    def _stamp(self, obj: Obj, ns: str, old: Obj | None) -> Obj:
        self._rv += 1
        meta = obj.setdefault("metadata", {})
        if ns:
            meta["namespace"] = ns
        meta["resourceVersion"] = str(self._rv)
        meta["uid"] = old["metadata"]["uid"] if old else str(uuid.uuid4())
        meta["creationTimestamp"] = (
            old["metadata"]["creationTimestamp"] if old else datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        )
        gen = old["metadata"].get("generation", 1) if old else 1
        if old and old.get("spec") != obj.get("spec"):
            gen += 1
        meta["generation"] = gen
        if obj.get("kind") == "Namespace":
            obj["status"] = {"phase": "Active"}
        return obj

    def _managed(self, key: Key, api_version: str) -> list[Obj]:
        by: dict[str, list[str]] = {}
        for path, mgr in sorted(self.owners.get(key, {}).items()):
            by.setdefault(mgr, []).append(".".join(path))
        return [
            {"manager": m, "operation": "Apply", "apiVersion": api_version, "fieldsType": "FieldsV1", "fieldsV1": ps}
            for m, ps in by.items()
        ]

    def _store(self, res: Resource, key: Key, obj: Obj) -> Obj:
        obj["metadata"]["managedFields"] = self._managed(key, obj["apiVersion"])
        self.objects[key] = obj
        if res.kind == "CustomResourceDefinition":
            self._register_crd(obj)
        return self._view(obj)

    def _create(self, res: Resource, ns: str, body: Obj, manager: str) -> Obj:
        self._check(res, ns, body, None)
        name = (body.get("metadata") or {}).get("name")
        if not name:
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        key = self._key(res, ns, name)
        if key in self.objects:
            raise ApiError(409, "AlreadyExists", f'{res.plural} "{name}" already exists')
        obj = self._stamp(self._normalize(body), ns, None)
        self.owners[key] = {p: manager for p in _leaves(obj)}
        return self._store(res, key, obj)

    def _apply(self, res: Resource, ns: str, name: str, body: Obj, manager: str, force: bool) -> tuple[int, Obj]:
        self._check(res, ns, body, name)
        key = self._key(res, ns, name)
        applied = _leaves(self._normalize(body))
        old = self.objects.get(key)
        owners = dict(self.owners.get(key, {}))
        current = copy.deepcopy(old) if old else {}
        current_leaves = _leaves(current) if old else {}
        conflicts = [
            ".".join(p)
            for p, v in applied.items()
            if p in owners and owners[p] != manager and current_leaves.get(p) != v
        ]
        if conflicts and not force:
            raise ApiError(
                409,
                "Conflict",
                f"Apply failed with {len(conflicts)} conflict(s): "
                + "; ".join(f'conflict with "{owners[tuple(c.split("."))]}": .{c}' for c in conflicts),
            )
        for p, m in list(owners.items()):
            if m == manager and p not in applied:
                _delete(current, p)
                del owners[p]
        for p, v in applied.items():
            _set(current, p, v)
            owners[p] = manager
        if old is not None and _leaves(current) == current_leaves and owners == self.owners.get(key, {}):
            return 200, self._view(old)  # no-op apply: a real server keeps the resourceVersion
        obj = self._stamp(current, ns, old)
        self.owners[key] = owners
        return (200 if old else 201), self._store(res, key, obj)

    def _delete_obj(self, res: Resource, ns: str, name: str | None) -> Obj:
        if name is None:
            raise ApiError(405, "MethodNotAllowed", "collection delete is not supported by the fake")
        key = self._key(res, ns, name)
        obj = self.objects.pop(key, None)
        if obj is None:
            raise ApiError(404, "NotFound", f'{res.plural} "{name}" not found')
        self.owners.pop(key, None)
        if res.kind == "CustomResourceDefinition":
            spec = obj["spec"]
            for v in spec["versions"]:
                self.resources.pop((spec["group"], v["name"], spec["names"]["plural"]), None)
            self._crd_created.pop(name, None)
        return {"kind": "Status", "apiVersion": "v1", "status": "Success"}

    def _register_crd(self, crd: Obj) -> None:
        spec = crd["spec"]
        name = crd["metadata"]["name"]
        self._crd_created.setdefault(name, time.monotonic())
        for v in spec["versions"]:
            if v.get("served", True):
                r = Resource(
                    spec["group"],
                    v["name"],
                    spec["names"]["plural"],
                    spec["names"]["kind"],
                    spec["scope"] == "Namespaced",
                )
                self.resources[(r.group, r.version, r.plural)] = r
