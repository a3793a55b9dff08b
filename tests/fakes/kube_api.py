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

Every request is recorded in ``requests`` as ``(method, path, content type)``; ``request_count``.

For verify/doctor (collect once, at scale, with faults):

- built-in kinds also Node, Pod, Endpoints, Event, apps/v1 Deployment; the CRD-served kinds
  ServiceMonitor, PrometheusRule, Prometheus, PodMonitor (monitoring.coreos.com/v1) and ClusterPolicy
  (nvidia.com/v1, cluster-scoped) are served once their CRD exists: :meth:`FakeKubeAPI.serve_crd`, or
  implicitly by :meth:`FakeKubeAPI.seed`, which stores objects as given (status included), creating
  missing namespaces;
- LIST pagination (``limit`` + ``continue``, ``metadata.continue`` and ``remainingItemCount`` in the
  list; a malformed token is 400, a token from another resource is 410), on every kind, all-namespace
  and namespaced; ``fieldSelector`` (``a=b``, ``a==b``, ``a!=b``, dotted paths such as ``type``,
  ``involvedObject.name``, ``spec.nodeName``, ``metadata.namespace``) and ``labelSelector``
  (``k=v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``) on every kind;
- POST fills ``metadata.generateName`` names and a Pending pod status; ``on_create`` hooks
  (``fn(stored_obj)``, may mutate it, e.g. set ``status.phase: Succeeded``) run after each create;
- ``GET /api/v1/namespaces/{ns}/pods/{name}/log`` (``container``, ``tailLines``, ``previous``) returns
  text set with :meth:`FakeKubeAPI.set_log`; ``previous=true`` returns the previous instance's text
  (``set_log(..., previous=True)``) and, when there is none, 400 ``previous terminated container "c" in
  pod "p" not found`` as a real API server relays it from the kubelet;
- service proxy ``/api/v1/namespaces/{ns}/services/[scheme:]{name}[:{port}]/proxy/{path}`` forwards
  GET/POST to ``proxy_upstreams[(ns, name, port)]`` (port as written in the URL, "" when absent);
  503 when no upstream is registered or it is unreachable, 404 when the Service does not exist either.
  Like a real API server it passes the client's headers on (``Cookie`` included) except ``Authorization``,
  which authenticated the client to the API server and is removed before proxying, and passes the
  upstream's response headers back (every ``Set-Cookie`` included);
- the Eviction API (``POST /api/v1/namespaces/{ns}/pods/{name}/eviction``, policy/v1 Eviction) with the API
  server's PodDisruptionBudget semantics: the budgets of the pod's namespace whose selector matches it
  (``matchLabels``, ``matchExpressions``); none: the pod is deleted; more than one: 500; one whose
  ``status.disruptionsAllowed`` is below 1: 429 TooManyRequests with the budget in ``details.causes``;
  else the pod is deleted and ``disruptionsAllowed`` drops by one. A finished pod (Succeeded/Failed) is
  deleted without asking its budget. ``deleteOptions.dryRun: [All]`` (or ``?dryRun=All``) makes every
  check and changes nothing. Budgets' status is taken as seeded: there is no disruption controller;
- ``GET /version`` (``gitVersion`` = :attr:`FakeKubeAPI.version`);
- a ``Date`` header on every response, errors included, as kube-apiserver's Go net/http writes it
  (RFC 7231 IMF-fixdate, 1 s resolution), from :attr:`FakeKubeAPI.clock` (default: the real clock; tests set
  it to skew the server against the clients);
- fault injection per path regex (``re.search`` on the raw path with query): :meth:`FakeKubeAPI.fail`
  (status, optional ``times`` and ``method``) and :meth:`FakeKubeAPI.delay` (seconds before answering).

For gpustack diag / health (the section at the end of this file): batch/v1 Jobs and CronJobs,
ServiceAccounts and RBAC kinds, JSON merge patches with a resourceVersion precondition, cascading Job
deletes, a Job controller/scheduler/kubelet simulation (:class:`JobSimulator`) and RBAC enforcement
(:class:`RbacAuthorizer`).
"""

from __future__ import annotations

import base64
import bisect
import copy
import json
import random
import re
import string
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

from gpustack.config import pins
from tests.fakes import kube_semantics as ks
from tests.fakes import label_selector

Obj = dict[str, Any]
Key = tuple[str, str, str, str, str]  # group, version, plural, namespace ("" = cluster), name
SERVER_FIELDS = {"resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"}
#: request headers never passed to a proxied upstream (hop-by-hop, or the API server's own credentials)
PROXY_DROP_REQUEST = frozenset({"authorization", "proxy-authorization", "host", "content-length", "connection",
                                "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"})  # fmt: skip
#: upstream response headers not passed back (hop-by-hop, or set by this server itself)
PROXY_DROP_RESPONSE = frozenset({"content-length", "content-type", "connection", "keep-alive", "transfer-encoding",
                                 "date", "server"})  # fmt: skip
#: key suffix of a previous instance's log in ``FakeKubeAPI.logs`` ("/" is never in a container name)
PREVIOUS_SUFFIX = "/previous"


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    def api_resource(self) -> Obj:
        out: Obj = {
            "name": self.plural,
            "singularName": self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
        }
        if self.plural in ks.SHORT_NAMES and self.group == ks.SHORT_NAMES[self.plural][0]:
            out["shortNames"] = list(ks.SHORT_NAMES[self.plural][1])
        return out


BUILTIN = [
    Resource("", "v1", "namespaces", "Namespace", False),
    Resource("", "v1", "secrets", "Secret", True),
    Resource("", "v1", "configmaps", "ConfigMap", True),
    Resource("", "v1", "services", "Service", True),
    Resource("", "v1", "persistentvolumes", "PersistentVolume", False),
    Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False),
    Resource("apps", "v1", "daemonsets", "DaemonSet", True),
    Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False),
    Resource("", "v1", "nodes", "Node", False),
    Resource("", "v1", "pods", "Pod", True),
    Resource("", "v1", "endpoints", "Endpoints", True),
    Resource("", "v1", "events", "Event", True),
    Resource("apps", "v1", "deployments", "Deployment", True),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
]

#: CRD-served kinds :meth:`FakeKubeAPI.seed` / :meth:`FakeKubeAPI.serve_crd` know how to serve.
KNOWN_CRDS: dict[str, Resource] = {
    r.kind: r
    for r in (
        Resource("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor", True),
        Resource("monitoring.coreos.com", "v1", "podmonitors", "PodMonitor", True),
        Resource("monitoring.coreos.com", "v1", "prometheusrules", "PrometheusRule", True),
        Resource("monitoring.coreos.com", "v1", "prometheuses", "Prometheus", True),
        Resource("nvidia.com", "v1", "clusterpolicies", "ClusterPolicy", False),
    )
}

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass
class RawResponse:
    """A non-JSON answer (pod logs, proxied upstream responses)."""

    code: int
    body: bytes
    content_type: str = "text/plain"
    headers: list[tuple[str, str]] = field(default_factory=list)  # more response headers (proxied Set-Cookie)


@dataclass
class _Fault:
    pattern: re.Pattern[str]
    status: int = 0  # 0: no error (a delay only)
    seconds: float = 0.0
    times: int | None = None  # None: forever
    method: str | None = None

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        return (self.method is None or self.method == method) and self.pattern.search(path) is not None


def _label_match(labels: Any, selector: str) -> bool:
    """``labelSelector`` as kube-apiserver parses and matches it (tests/fakes/label_selector.py)."""
    try:
        return label_selector.matches(labels if isinstance(labels, dict) else {}, selector)
    except label_selector.SelectorError as exc:
        raise ApiError(400, "BadRequest", str(exc)) from None


class ApiError(Exception):
    """A failure answered with a metav1.Status; ``extra``: more of the Status (``details``, ``metadata``)."""

    def __init__(self, code: int, reason: str, message: str, extra: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.extra = code, reason, message, extra or {}

    def status(self) -> Obj:
        out = ks.status_failure(self.code, self.reason, self.message)
        return {**out, **self.extra, "code": self.code}


def _qualified(res: Resource) -> str:
    """The resource as API errors name it: ``pods``, ``deployments.apps``."""
    return f"{res.plural}.{res.group}" if res.group else res.plural


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
        self.on_create: list[Callable[[Obj], None]] = []  # run after every create with the stored object
        self.before_request: list[Callable[[], None]] = []  # run (under the lock) before every request: controllers
        self.authorizer: Callable[[str, str], None] | None = None  # raises ApiError(403): RBAC (see below)
        self.proxy_upstreams: dict[tuple[str, str, str], str] = {}  # (ns, service, port) -> base URL
        self.logs: dict[tuple[str, str, str], str] = {}  # (ns, pod, container[+PREVIOUS_SUFFIX]) -> text
        self._faults: list[_Fault] = []
        self.version = f"v{pins.KUBERNETES[ks.IMITATES]}"  # GET /version: the pinned patch of the imitated minor
        #: the server's clock: every response's ``Date`` header (as Go's net/http writes it, 1 s resolution)
        self.clock: Callable[[], float] = time.time
        self.compacted_rv = 0  # continue tokens of this resourceVersion or older are expired (see compact())
        self._index: dict[tuple[str, ...], list[tuple[str, Key]]] = {}
        self._index_stamp: tuple[int, int, int] = (0, -1, -1)
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}"

    def start(self) -> FakeKubeAPI:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def date_time_string(self, timestamp: float | None = None) -> str:  # the Date header, on api.clock
                return super().date_time_string(api.clock() if timestamp is None else timestamp)

            def _reply(self, code: int, body: Obj) -> None:
                self._reply_raw(RawResponse(code, json.dumps(body).encode(), "application/json"))

            def _reply_raw(self, resp: RawResponse) -> None:
                try:
                    self.send_response(resp.code)
                    self.send_header("Content-Type", resp.content_type)
                    self.send_header("Content-Length", str(len(resp.body)))
                    for key, value in resp.headers:
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(resp.body)
                except OSError:  # the client gave up (timeout) while we were delayed
                    pass

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                api.requests.append((method, self.path, ctype))
                try:
                    if ctype == "application/vnd.kubernetes.protobuf":  # a real API server decodes it; this one cannot
                        raise ApiError(415, "UnsupportedMediaType", "the fake API server reads JSON and YAML bodies "
                                       "only, not application/vnd.kubernetes.protobuf")  # fmt: skip
                    api._before(method, self.path)
                    api._inject_faults(method, self.path)
                    special = api.handle_special(method, self.path, ctype, raw, self.headers)
                    if special is not None:
                        self._reply_raw(special)
                        return
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
        self._stopping.set()  # wake delayed handlers
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

    @property
    def request_count(self) -> int:
        """Requests received so far (every path, faults and proxied ones included)."""
        return len(self.requests)

    def reset_requests(self) -> None:
        self.requests.clear()

    def _resource_for(self, api_version: str, kind: str) -> Resource:
        group, _, version = api_version.rpartition("/")
        for r in self.resources.values():
            if (r.group, r.version, r.kind) == (group, version, kind):
                return r
        known = KNOWN_CRDS.get(kind)
        if known is not None and (known.group, known.version) == (group, version):
            self.serve_crd(kind)
            return known
        raise KeyError(f"the fake API does not serve {kind} ({api_version})")

    def serve_crd(self, kind: str) -> None:
        """Create the CustomResourceDefinition of a :data:`KNOWN_CRDS` kind (no-op when it exists)."""
        r = KNOWN_CRDS[kind]
        name = f"{r.plural}.{r.group}"
        with self._lock:
            if ("apiextensions.k8s.io", "v1", "customresourcedefinitions", "", name) in self.objects:
                return
            crd = {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": name},
                "spec": {
                    "group": r.group,
                    "names": {"plural": r.plural, "kind": r.kind, "singular": r.kind.lower()},
                    "scope": "Namespaced" if r.namespaced else "Cluster",
                    "versions": [{"name": r.version, "served": True, "storage": True}],
                },
            }
            res = self.resources[("apiextensions.k8s.io", "v1", "customresourcedefinitions")]
            key = self._key(res, "", name)
            self._store(res, key, self._stamp(crd, "", None))
            self._crd_created[name] = time.monotonic() - self.crd_establish_delay  # established at once

    def seed(self, objs: Iterable[Obj]) -> None:
        """Store objects as given (status included; replaces existing ones), creating missing namespaces
        and the CRDs of :data:`KNOWN_CRDS` kinds. No managed fields, no admission: test setup only."""
        ns_res = self.resources[("", "v1", "namespaces")]
        with self._lock:
            for given in objs:
                obj = copy.deepcopy(given)
                res = self._resource_for(str(obj.get("apiVersion")), str(obj.get("kind")))
                meta = obj.setdefault("metadata", {})
                ns = str(meta.get("namespace") or "default") if res.namespaced else ""
                if ns and self._key(ns_res, "", ns) not in self.objects:
                    ns_obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                    self.objects[self._key(ns_res, "", ns)] = self._stamp(ns_obj, "", None)
                key = self._key(res, ns, str(meta["name"]))
                stored = self._stamp(obj, ns, self.objects.get(key))
                stored["metadata"]["managedFields"] = []
                self.objects[key] = stored
                if res.kind == "CustomResourceDefinition":
                    self._register_crd(stored)

    def set_status(self, api_version: str, kind: str, name: str, namespace: str, status: Obj) -> None:
        """Replace an object's ``status`` (simulate a controller/kubelet)."""
        with self._lock:
            res = self._resource_for(api_version, kind)
            obj = self.objects[self._key(res, namespace if res.namespaced else "", name)]
            obj["status"] = copy.deepcopy(status)
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)

    def set_log(self, namespace: str, pod: str, container: str, text: str, *, previous: bool = False) -> None:
        """What ``GET .../pods/{pod}/log?container=...`` returns (``previous``: with ``&previous=true``, the
        log of the container's previous, terminated instance; without one that request is a 400)."""
        self.logs[(namespace, pod, container + PREVIOUS_SUFFIX if previous else container)] = text

    def fail(self, pattern: str, status: int, times: int | None = None, *, method: str | None = None) -> None:
        """Answer requests whose raw path (with query) matches ``pattern`` with ``status`` (``times`` times)."""
        self._faults.append(_Fault(re.compile(pattern), status=status, times=times, method=method))

    def delay(self, pattern: str, seconds: float, times: int | None = None, *, method: str | None = None) -> None:
        """Wait ``seconds`` before answering matching requests (client-side timeouts)."""
        self._faults.append(_Fault(re.compile(pattern), seconds=seconds, times=times, method=method))

    def clear_faults(self) -> None:
        self._faults.clear()

    def _inject_faults(self, method: str, path: str) -> None:
        with self._lock:
            hits = [f for f in self._faults if f.matches(method, path)]
            for f in hits:
                if f.times is not None:
                    f.times -= 1
        for f in hits:
            if f.seconds:
                self._stopping.wait(f.seconds)
        for f in hits:
            if f.status:
                reason = REASONS.get(f.status, "InternalError")
                what = urlparse(path).path
                message = {
                    403: f'forbidden: User "fake" cannot {method.lower()} {what}',
                    404: "the server could not find the requested resource",
                }.get(f.status, f"injected fault {f.status} on {what}")
                raise ApiError(f.status, reason, message)

    # -- logs and the service proxy ---------------------------------------------------------------------

    def handle_special(
        self, method: str, raw_path: str, ctype: str, raw: bytes, headers: Any = None
    ) -> RawResponse | None:
        """Pod logs and the service proxy (non-JSON answers); None for every other path. ``headers``: the
        request's (an ``email.message.Message`` or a mapping)."""
        url = urlparse(raw_path)
        parts = [p for p in url.path.split("/") if p]
        if parts == ["version"] and method == "GET":
            return self._json(200, ks.version_info(self.version))
        if (
            len(parts) == 7
            and parts[:3] == ["api", "v1", "namespaces"]
            and parts[4] == "pods"
            and parts[6] == "eviction"
        ):
            if method != "POST":
                raise ApiError(405, "MethodNotAllowed", method)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            return self._evict(parts[3], parts[5], self._body(ctype, raw) if raw else {}, query)
        if len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods" and parts[6] == "log":
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", method)
            return self._log(parts[3], parts[5], {k: v[-1] for k, v in parse_qs(url.query).items()})
        if (
            len(parts) >= 7
            and parts[:3] == ["api", "v1", "namespaces"]
            and parts[4] == "services"
            and parts[6] == "proxy"
        ):
            return self._proxy(method, parts[3], parts[5], raw_path, ctype, raw, headers)
        return None

    @staticmethod
    def _json(code: int, body: Obj) -> RawResponse:
        return RawResponse(code, json.dumps(body).encode(), "application/json")

    def _evict(self, ns: str, pod: str, body: Obj, query: dict[str, str]) -> RawResponse:
        """The Eviction subresource as kube-apiserver's EvictionREST answers it (see kube_semantics)."""
        dry_query = [query["dryRun"]] if "dryRun" in query else []
        dry_body = list((body.get("deleteOptions") or {}).get("dryRun") or [])
        if dry_query and dry_body and dry_query != dry_body:
            raise ApiError(500, "InternalError", f"Non-matching dry-run options in request and content: "
                           f"[{' '.join(dry_query)}] and [{' '.join(dry_body)}]")  # fmt: skip
        bad = ks.invalid_dry_run("CreateOptions", dry_query or dry_body)
        if bad:
            raise ApiError(422, "Invalid", bad, {"details": ks.invalid_dry_run_details("CreateOptions",
                                                                                       dry_query or dry_body)})  # fmt: skip
        dry = "All" in (dry_query or dry_body)
        if (body.get("metadata") or {}).get("name", pod) != pod:
            raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
        with self._lock:
            obj = self.objects.get(("", "v1", "pods", ns, pod))
            if obj is None:
                raise ApiError(404, "NotFound", f'pods "{pod}" not found', {"details": {"name": pod, "kind": "pods"}})
            if not ks.can_ignore_budget(obj):
                labels = (obj.get("metadata") or {}).get("labels") or {}
                budgets = [
                    o
                    for (g, _, plural, ons, _), o in self.objects.items()
                    if (g, plural, ons) == ("policy", "poddisruptionbudgets", ns)
                    and ks.selector_matches(labels, (o.get("spec") or {}).get("selector"))
                ]
                if len(budgets) > 1:  # a Status returned (not raised) by EvictionREST: no reason
                    return self._json(500, ks.status_failure(500, "", ks.EVICTION_TWO_BUDGETS))
                if budgets and not ks.skips_decrement(obj, budgets[0]):
                    verdict = ks.budget_verdict(obj, budgets[0])
                    if verdict is not None:
                        return self._json(*verdict)
                    if not dry:
                        status = budgets[0].setdefault("status", {})
                        status["disruptionsAllowed"] = int(status.get("disruptionsAllowed") or 0) - 1
                        status.setdefault("disruptedPods", {})[pod] = _now()
            if not dry:
                self._delete_obj(self.resources[("", "v1", "pods")], ns, pod)
        return self._json(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})

    def _log(self, ns: str, pod: str, query: dict[str, str]) -> RawResponse:
        with self._lock:
            obj = self.objects.get(("", "v1", "pods", ns, pod))
            if obj is None:
                raise ApiError(404, "NotFound", f'pods "{pod}" not found')
            spec = obj.get("spec") or {}
            names = [c.get("name") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])]
            container = query.get("container")
            if not container:
                main = [c.get("name") for c in spec.get("containers") or []]
                if len(main) > 1:
                    raise ApiError(
                        400, "BadRequest", f"a container name must be specified for pod {pod}, choose one of: {main}"
                    )
                container = str(main[0]) if main else ""
            elif names and container not in names:
                raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {pod}")
            if query.get("previous") == "true":
                previous = self.logs.get((ns, pod, container + PREVIOUS_SUFFIX))
                if previous is None:  # the kubelet's answer, relayed by the API server as a 400
                    raise ApiError(
                        400, "BadRequest", f'previous terminated container "{container}" in pod "{pod}" not found'
                    )
                text = previous
            else:
                text = self.logs.get((ns, pod, container), "")
        tail = query.get("tailLines")
        if tail is not None:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(tail) :]) if int(tail) > 0 else ""
        return RawResponse(200, text.encode())

    def _proxy(
        self, method: str, ns: str, spec: str, raw_path: str, ctype: str, raw: bytes, headers: Any = None
    ) -> RawResponse:
        bits = spec.split(":")
        if len(bits) == 3:  # scheme:name:port
            bits = bits[1:]
        name, port = bits[0], (bits[1] if len(bits) > 1 else "")
        upstream = self.proxy_upstreams.get((ns, name, port))
        if upstream is None:  # REST.ResourceLocation (pkg/registry/core/service/storage/storage.go)
            with self._lock:
                endpoints = self.objects.get(("", "v1", "endpoints", ns, name))
            if endpoints is None:  # no Service, or no Endpoints for it: the endpoints Get's NotFound
                raise ApiError(404, "NotFound", f'services "{name}" not found',
                               {"details": {"name": name, "kind": "services"}})  # fmt: skip
            raise ApiError(503, "ServiceUnavailable", f'no endpoints available for service "{name}"')
        marker = f"/services/{spec}/proxy"
        rest = raw_path.split(marker, 1)[1]
        target = upstream.rstrip("/") + (rest if rest.startswith("/") else "/" + rest)
        forward = {k: v for k, v in (headers or {}).items() if k.lower() not in PROXY_DROP_REQUEST}
        if ctype and not any(k.lower() == "content-type" for k in forward):
            forward["Content-Type"] = ctype
        req = urllib.request.Request(target, data=raw or None, method=method, headers=forward)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return self._proxied(resp.status, resp.read(), resp.headers)
        except urllib.error.HTTPError as exc:
            return self._proxied(exc.code, exc.read(), exc.headers)
        except (urllib.error.URLError, OSError) as exc:
            raise ApiError(503, "ServiceUnavailable", f"error trying to reach service: {exc}") from None

    @staticmethod
    def _proxied(code: int, body: bytes, headers: Any) -> RawResponse:
        """The upstream's answer as this server relays it: status, body and end-to-end headers."""
        passed = [(k, v) for k, v in headers.items() if k.lower() not in PROXY_DROP_RESPONSE]
        return RawResponse(code, body, headers.get("Content-Type") or "text/plain", passed)

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
                if name is None:
                    return 200, self._list(res, ns, query)
                return 200, self._get(res, ns, name)
            body = self._body(ctype, raw) if raw else {}
            dry_run = [v for k, vs in parse_qs(url.query).items() if k == "dryRun" for v in vs]
            if method == "POST":
                self._dry_run_valid("CreateOptions", dry_run)
                return 201, self._create(res, ns, body, manager=query.get("fieldManager", "client"), dry=bool(dry_run))
            if method == "PATCH":
                self._dry_run_valid("PatchOptions", dry_run)
                if ctype == MERGE_PATCH or (ctype == STRATEGIC_MERGE_PATCH and res in BUILTIN):
                    if ctype == STRATEGIC_MERGE_PATCH and "$" in raw.decode("utf-8", "replace"):
                        raise ApiError(415, "UnsupportedMediaType", "the fake API server applies a strategic "
                                       "merge patch as a merge patch: $-directives are not supported")  # fmt: skip
                    return 200, self._merge_patch(res, ns, name, body)
                if ctype != APPLY_PATCH:
                    accepted = ["application/json-patch+json", MERGE_PATCH, APPLY_PATCH]
                    if res in BUILTIN:
                        accepted.insert(2, STRATEGIC_MERGE_PATCH)
                    raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                                   "accepted media types include: " + ", ".join(accepted))  # fmt: skip
                if not query.get("fieldManager"):
                    raise ApiError(422, "Invalid", ks.APPLY_NEEDS_MANAGER, {"details": ks.APPLY_NEEDS_MANAGER_DETAILS})
                if name is None:
                    raise ApiError(405, "MethodNotAllowed", "apply needs a name")
                return self._apply(res, ns, name, body, query["fieldManager"], query.get("force") == "true",
                                   dry=bool(dry_run))  # fmt: skip
            if method == "DELETE":
                self._dry_run_valid("DeleteOptions", dry_run or list(body.get("dryRun") or []))
                deleted = self.objects.get(self._key(res, ns, name or ""))
                if dry_run or body.get("dryRun"):
                    if deleted is None:
                        raise ApiError(404, "NotFound", f'{_qualified(res)} "{name}" not found')
                    return 200, self._deleted_status(res, deleted)
                out = self._delete_obj(res, ns, name)
                self._cascade(deleted, query.get("propagationPolicy") or body.get("propagationPolicy"))
                return 200, out
            raise ApiError(405, "MethodNotAllowed", method)

    @staticmethod
    def _dry_run_valid(kind: str, values: list[str]) -> None:
        bad = ks.invalid_dry_run(kind, values)
        if bad:
            raise ApiError(422, "Invalid", bad, {"details": ks.invalid_dry_run_details(kind, values)})

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
            raise ApiError(404, "NotFound", f'{_qualified(res)} "{name}" not found',
                           {"details": {"name": name, **({"group": res.group} if res.group else {}), "kind": res.plural}})  # fmt: skip
        return self._view(obj)

    def _list(self, res: Resource, ns: str, query: dict[str, str]) -> Obj:
        """LIST with ``limit``/``continue`` pagination and field/label selectors (see kube_semantics)."""
        gvp = (res.group, res.version, res.plural)
        index = self._sorted_keys(gvp, ns)
        fsel, lsel = query.get("fieldSelector", ""), query.get("labelSelector", "")
        token = query.get("continue")
        if token:
            try:
                start, token_rv = ks.decode_continue(token)
            except ks.ContinueError as exc:
                raise ApiError(400, "BadRequest", str(exc)) from None
            if 0 < token_rv <= self.compacted_rv:
                again = ks.encode_continue(start, -1)
                raise ApiError(410, "Expired", ks.INCONSISTENT_CONTINUE, {"metadata": {"continue": again}})
            index = index[bisect.bisect_left(index, (start,)) :]
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise ApiError(400, "BadRequest", "limit must be an integer") from None
        try:
            terms = ks.parse_field_selector(res.group, res.kind, fsel)
        except ks.SelectorError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from None
        keys: list[Key] = []
        more, pos = False, 0
        for pos, (keystr, k) in enumerate(index):  # noqa: B007 (pos is read after the loop)
            obj = self.objects[k]
            if terms and not all((ks.field_value(obj, p) == want) == (op != "!=") for p, op, want in terms):
                continue
            if lsel and not _label_match((obj.get("metadata") or {}).get("labels"), lsel):
                continue
            if 0 < limit <= len(keys):
                more = True
                break
            keys.append(k)
            last = keystr
        meta: Obj = {"resourceVersion": str(self._rv)}
        if more:
            meta["continue"] = ks.encode_continue(last + "\x00", self._rv)
            if not (fsel or lsel):  # unknown with selectors: left unset (ListMeta.remainingItemCount)
                meta["remainingItemCount"] = len(index) - pos
        items = [self._view(self.objects[k]) if res.kind == "CustomResourceDefinition" else self.objects[k]
                 for k in keys]  # fmt: skip
        api_version = f"{res.group}/{res.version}" if res.group else res.version
        return {"kind": f"{res.kind}List", "apiVersion": api_version, "metadata": meta, "items": items}

    def compact(self) -> None:
        """etcd compaction up to now: every continue token handed out so far is expired (410), as on a real
        API server once its storage compacted past the token's resourceVersion."""
        with self._lock:
            self.compacted_rv = self._rv

    def _sorted_keys(self, gvp: tuple[str, str, str], ns: str) -> list[tuple[str, Key]]:
        """(storage key, key) of one resource (and namespace) in the order etcd keeps them (the key under the
        resource's prefix: ``<namespace>/<name>`` or ``<name>``), cached until the store changes."""
        stamp = (id(self.objects), len(self.objects), self._rv)
        if self._index_stamp != stamp:
            self._index, self._index_stamp = {}, stamp
        cached = self._index.get((*gvp, ns))
        if cached is None:
            cached = self._index[(*gvp, ns)] = sorted(
                (f"{k[3]}/{k[4]}" if k[3] else k[4], k) for k in self.objects if k[:3] == gvp and (not ns or k[3] == ns)
            )
        return cached

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

    def _create(self, res: Resource, ns: str, body: Obj, manager: str, *, dry: bool = False) -> Obj:
        """POST; ``dry`` (``?dryRun=All``): every check, the object as it would be stored, nothing stored."""
        self._check(res, ns, body, None)
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
        name = meta.get("name")
        if not name:
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        key = self._key(res, ns, name)
        if key in self.objects:
            raise ApiError(409, "AlreadyExists", f'{_qualified(res)} "{name}" already exists',
                           {"details": {"name": name, **({"group": res.group} if res.group else {}), "kind": res.plural}})  # fmt: skip
        if dry:
            rv = self._rv
            preview = self._stamp(self._normalize(body), ns, None)
            self._rv = rv
            preview["metadata"].pop("resourceVersion", None)
            return preview
        obj = self._stamp(self._normalize(body), ns, None)
        if res.kind == "Pod":
            obj.setdefault("status", {"phase": "Pending"})
        self.owners[key] = {p: manager for p in _leaves(obj)}
        out = self._store(res, key, obj)
        for hook in list(self.on_create):
            hook(self.objects[key])
        return out

    def _apply(
        self, res: Resource, ns: str, name: str, body: Obj, manager: str, force: bool, *, dry: bool = False
    ) -> tuple[int, Obj]:
        self._check(res, ns, body, name)
        key = self._key(res, ns, name)
        applied = _leaves(self._normalize(body))
        old = self.objects.get(key)
        owners = dict(self.owners.get(key, {}))
        current = copy.deepcopy(old) if old else {}
        current_leaves = _leaves(current) if old else {}
        conflicts = [
            (owners[p], "." + ".".join(p))
            for p, v in applied.items()
            if p in owners and owners[p] != manager and current_leaves.get(p) != v
        ]
        if conflicts and not force:
            causes = [{"reason": "FieldManagerConflict", "message": f'conflict with "{m}"', "field": f}
                      for m, f in conflicts]  # fmt: skip
            raise ApiError(409, "Conflict", ks.conflict_message(conflicts), {"details": {"causes": causes}})
        for p, m in list(owners.items()):
            if m == manager and p not in applied:
                _delete(current, p)
                del owners[p]
        for p, v in applied.items():
            _set(current, p, v)
            owners[p] = manager
        if old is not None and _leaves(current) == current_leaves and owners == self.owners.get(key, {}):
            return 200, self._view(old)  # no-op apply: a real server keeps the resourceVersion
        if dry:
            rv = self._rv
            preview = self._stamp(current, ns, old)
            self._rv = rv
            preview["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"] if old else ""
            return (200 if old else 201), preview
        obj = self._stamp(current, ns, old)
        self.owners[key] = owners
        return (200 if old else 201), self._store(res, key, obj)

    def _delete_obj(self, res: Resource, ns: str, name: str | None) -> Obj:
        if name is None:
            raise ApiError(405, "MethodNotAllowed", "collection delete is not supported by the fake")
        key = self._key(res, ns, name)
        obj = self.objects.pop(key, None)
        if obj is None:
            raise ApiError(404, "NotFound", f'{_qualified(res)} "{name}" not found')
        self._rv += 1
        self.owners.pop(key, None)
        if res.kind == "Pod":
            for log_key in [k for k in self.logs if k[:2] == (ns, name)]:
                del self.logs[log_key]
        if res.kind == "CustomResourceDefinition":
            spec = obj["spec"]
            for v in spec["versions"]:
                self.resources.pop((spec["group"], v["name"], spec["names"]["plural"]), None)
            self._crd_created.pop(name, None)
        return self._deleted_status(res, obj)

    @staticmethod
    def _deleted_status(res: Resource, obj: Obj) -> Obj:
        """What DELETE answers for an object deleted at once (registry Store.finalizeDelete)."""
        details = {"name": obj["metadata"]["name"], **({"group": res.group} if res.group else {}), "kind": res.plural,
                   "uid": obj["metadata"].get("uid", "")}  # fmt: skip
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

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


# --- Jobs, merge patches, cascading deletes and RBAC (gpustack diag / gpustack health) ------------------
#
# - batch/v1 Job and CronJob, ServiceAccount and the rbac.authorization.k8s.io/v1 kinds are served;
# - ``PATCH`` with ``application/merge-patch+json`` (RFC 7386: maps merge, ``null`` removes a key, lists are
#   replaced whole, as for a Node's ``spec.taints``); a ``metadata.resourceVersion`` in the patch is a
#   precondition: a stale one is a 409 Conflict, as on a real API server (optimistic concurrency);
# - ``DELETE`` of a Job with ``propagationPolicy=Background`` or ``Foreground`` (query or DeleteOptions body)
#   deletes its pods; without one, batch/v1 orphans them (the pods stay, their ownerReference removed);
# - :class:`JobSimulator`: the Job controller, the scheduler and the kubelet for Jobs, driven by the request
#   clock (it advances on every request, no thread): one pod per Job, scheduled only where the pod's
#   required node affinity / nodeName, the node's taints and cordon, and the node's free ``nvidia.com/gpu``
#   allow it (else Pending/Unschedulable with the scheduler's message); then Running for ``run_seconds``,
#   then Succeeded or Failed with the planned log; ``activeDeadlineSeconds`` fails the Job
#   (DeadlineExceeded) and removes its pod;
# - :class:`RbacAuthorizer`: with ``api.authorizer`` set, a request its rules do not allow is a 403, as
#   RBAC answers it (verbs from the method, ``services/proxy`` style subresources, ``resourceNames``).

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
GPU_RESOURCE = "nvidia.com/gpu"

BUILTIN.extend(
    [
        Resource("batch", "v1", "jobs", "Job", True),
        Resource("batch", "v1", "cronjobs", "CronJob", True),
        Resource("", "v1", "serviceaccounts", "ServiceAccount", True),
        Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
        Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
        Resource("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
        Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    ]
)


def json_merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = json_merge(out.get(key), value)
    return out


def _fake_before(self: FakeKubeAPI, method: str, raw_path: str) -> None:
    with self._lock:
        if self.authorizer is not None:
            self.authorizer(method, raw_path)
        for hook in list(self.before_request):
            hook()


def _fake_merge_patch(self: FakeKubeAPI, res: Resource, ns: str, name: str | None, body: Obj) -> Obj:
    if name is None:
        raise ApiError(405, "MethodNotAllowed", "a merge patch needs a name")
    key = self._key(res, ns, name)
    old = self.objects.get(key)
    if old is None:
        raise ApiError(404, "NotFound", f'{_qualified(res)} "{name}" not found')
    want = (body.get("metadata") or {}).get("resourceVersion")
    if want is not None and str(want) != str(old["metadata"].get("resourceVersion")):
        raise ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {res.plural}{"." + res.group if res.group else ""} "{name}": '
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    merged = json_merge(copy.deepcopy(old), body)
    merged["metadata"]["name"] = name
    for server_field in ("uid", "creationTimestamp", "managedFields"):
        if server_field in old["metadata"]:
            merged["metadata"][server_field] = old["metadata"][server_field]
    stored = self._stamp(merged, ns, old)
    self.objects[key] = stored
    return self._view(stored)


def _fake_cascade(self: FakeKubeAPI, deleted: Obj | None, policy: str | None) -> None:
    if not deleted or deleted.get("kind") != "Job":
        return
    uid = deleted["metadata"].get("uid")
    ns = deleted["metadata"].get("namespace", "")
    for key, pod in list(self.objects.items()):
        if key[:4] != ("", "v1", "pods", ns):
            continue
        refs = pod["metadata"].get("ownerReferences") or []
        if not any(r.get("uid") == uid for r in refs):
            continue
        if policy in ("Background", "Foreground"):
            self.objects.pop(key)
            for log_key in [k for k in self.logs if k[:2] == (ns, key[4])]:
                del self.logs[log_key]
        else:  # Orphan (the batch/v1 default for a plain DELETE): the pod stays, no longer owned
            pod["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
    self._rv += 1


FakeKubeAPI._before = _fake_before  # type: ignore[attr-defined]
FakeKubeAPI._merge_patch = _fake_merge_patch  # type: ignore[attr-defined]
FakeKubeAPI._cascade = _fake_cascade  # type: ignore[attr-defined]


@dataclass
class PodPlan:
    """What the simulated kubelet does with a Job's pod once it is scheduled."""

    log: str = ""
    phase: str = "Succeeded"  # or "Failed"
    exit_code: int = 0
    run_seconds: float = 0.0
    waiting_reason: str = ""  # e.g. "ImagePullBackOff": the container never starts
    hang: bool = False  # never finishes (until the Job's deadline or a delete)


def _tolerates(tolerations: list[Obj], taint: Obj) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t.get("key") == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and str(t.get("value", "")) == str(taint.get("value", "")):
            return True
    return False


def _required_nodes(spec: Obj) -> set[str] | None:
    """Nodes a pod may go to by spec.nodeName or a required node affinity on metadata.name (None: any)."""
    if spec.get("nodeName"):
        return {str(spec["nodeName"])}
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []  # fmt: skip
    names: set[str] = set()
    for term in terms:
        for field_ in term.get("matchFields") or []:
            if field_.get("key") == "metadata.name" and field_.get("operator") == "In":
                names |= {str(v) for v in field_.get("values") or []}
    return names if terms else None


def pod_gpu_request(pod: Obj) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        total += int(
            str((res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(GPU_RESOURCE) or 0)
        )
    return total


class JobSimulator:
    """Job controller + scheduler + kubelet for the fake API (see the section comment). ``plans`` maps a
    node name to its :class:`PodPlan` (or is a function of (node, job) returning one)."""

    def __init__(
        self,
        api: FakeKubeAPI,
        plans: dict[str, PodPlan] | Callable[[str, Obj], PodPlan] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.clock = api, clock
        self.plans = plans or {}
        self.started: dict[str, float] = {}  # job uid -> creation time
        self.running_since: dict[str, float] = {}  # pod uid -> start time
        self.pods_created: list[Obj] = []  # every pod the controller made (for assertions)

    def install(self) -> JobSimulator:
        self.api.on_create.append(self._created)
        self.api.before_request.append(self.tick)
        return self

    def plan_for(self, node: str, job: Obj) -> PodPlan:
        return self.plans(node, job) if callable(self.plans) else self.plans.get(node, PodPlan())

    def _created(self, obj: Obj) -> None:
        if obj.get("kind") != "Job":
            return
        meta, template = obj["metadata"], obj["spec"]["template"]
        self.started[meta["uid"]] = self.clock()
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{meta['name']}-{''.join(random.choices(string.ascii_lowercase + string.digits, k=5))}",
                "namespace": meta["namespace"],
                "labels": {**(template.get("metadata") or {}).get("labels", {}), "job-name": meta["name"],
                           "batch.kubernetes.io/job-name": meta["name"], "controller-uid": meta["uid"]},
                "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                     "uid": meta["uid"], "controller": True}],
            },
            "spec": copy.deepcopy(template["spec"]),
            "status": {"phase": "Pending"},
        }  # fmt: skip
        res = self.api.resources[("", "v1", "pods")]
        key = self.api._key(res, meta["namespace"], pod["metadata"]["name"])
        self.api.objects[key] = self.api._stamp(pod, meta["namespace"], None)
        self.pods_created.append(copy.deepcopy(pod))
        obj["status"] = {"active": 1, "startTime": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}

    def _job_pods(self, job: Obj) -> list[tuple[Key, Obj]]:
        uid = job["metadata"]["uid"]
        return [(k, p) for k, p in self.api.objects.items()
                if k[:3] == ("", "v1", "pods") and any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])]  # fmt: skip

    def _fit(self, pod: Obj) -> tuple[str | None, str]:
        """(node, "") where the pod fits, or (None, the scheduler's message)."""
        spec = pod["spec"]
        allowed = _required_nodes(spec)
        nodes = [o for k, o in self.api.objects.items() if k[:3] == ("", "v1", "nodes")]
        candidates = [n for n in nodes if allowed is None or n["metadata"]["name"] in allowed]
        want = pod_gpu_request(pod)
        reasons: list[str] = []
        if len(candidates) < len(nodes):
            reasons.append(f"{len(nodes) - len(candidates)} node(s) didn't match Pod's node affinity/selector")
        for node in candidates:
            name = node["metadata"]["name"]
            taints = list((node.get("spec") or {}).get("taints") or [])
            if (node.get("spec") or {}).get("unschedulable"):
                taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
            untolerated = [t for t in taints if t.get("effect") in ("NoSchedule", "NoExecute")
                           and not _tolerates(spec.get("tolerations") or [], t)]  # fmt: skip
            if untolerated:
                reasons.append(
                    f"1 node(s) had untolerated taint {{{untolerated[0]['key']}: {untolerated[0].get('value', '')}}}"
                )
                continue
            alloc = int(str(((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE) or 0))
            used = sum(pod_gpu_request(p) for k, p in self.api.objects.items()
                       if k[:3] == ("", "v1", "pods") and p is not pod and (p.get("spec") or {}).get("nodeName") == name
                       and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))  # fmt: skip
            if want > alloc - used:
                reasons.append(f"1 Insufficient {GPU_RESOURCE}")
                continue
            return name, ""
        return None, ks.unschedulable(len(nodes), reasons)

    def _set_job_condition(self, job: Obj, kind: str, reason: str, message: str) -> None:
        status = job.setdefault("status", {})
        status["active"] = 0
        status[("succeeded" if kind == "Complete" else "failed")] = 1
        status["conditions"] = [{"type": kind, "status": "True", "reason": reason, "message": message}]

    def tick(self) -> None:
        now = self.clock()
        jobs = [o for k, o in list(self.api.objects.items()) if k[:3] == ("batch", "v1", "jobs")]
        for job in jobs:
            conds = (job.get("status") or {}).get("conditions") or []
            if any(c.get("status") == "True" for c in conds):
                continue
            started = self.started.get(job["metadata"]["uid"], now)
            deadline = job["spec"].get("activeDeadlineSeconds")
            pods = self._job_pods(job)
            if deadline is not None and now - started >= float(deadline):
                for key, _ in pods:  # the controller deletes the active pods
                    self.api.objects.pop(key, None)
                self._set_job_condition(
                    job, "Failed", "DeadlineExceeded", "Job was active longer than specified deadline"
                )
                self.api._rv += 1
                continue
            for _key, pod in pods:
                self._advance(job, pod, now)

    def _advance(self, job: Obj, pod: Obj, now: float) -> None:
        status, spec = pod.setdefault("status", {}), pod["spec"]
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if status.get("phase") in ("Succeeded", "Failed"):
            return
        if not spec.get("nodeName"):
            node, why = self._fit(pod)
            if node is None:
                status.update(phase="Pending", conditions=[{"type": "PodScheduled", "status": "False",
                                                            "reason": "Unschedulable", "message": why}])  # fmt: skip
                return
            spec["nodeName"] = node
            status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
            self.api._rv += 1
        plan = self.plan_for(spec["nodeName"], job)
        container = spec["containers"][0]["name"]
        if plan.waiting_reason:
            status.update(phase="Pending", containerStatuses=[{"name": container, "ready": False, "state": {
                "waiting": {"reason": plan.waiting_reason, "message": f'Back-off pulling image "{spec["containers"][0]["image"]}"'}}}])  # fmt: skip
            return
        uid = pod["metadata"]["uid"]
        since = self.running_since.setdefault(uid, now)
        if plan.hang or now - since < plan.run_seconds:
            status.update(phase="Running", containerStatuses=[{"name": container, "ready": True,
                                                               "state": {"running": {"startedAt": "2026-11-18T09:00:00Z"}}}])  # fmt: skip
            self.api.logs[(ns, name, container)] = plan.log.split("gpustack: begin", 1)[0] if plan.log else ""
            return
        reason = "Completed" if plan.phase == "Succeeded" else "Error"
        status.update(phase=plan.phase, containerStatuses=[{"name": container, "ready": False,
                                                            "state": {"terminated": {"reason": reason, "exitCode": plan.exit_code}}}])  # fmt: skip
        self.api.logs[(ns, name, container)] = plan.log
        if plan.phase == "Succeeded":
            self._set_job_condition(job, "Complete", "", "")
        else:
            self._set_job_condition(
                job, "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"
            )
        self.api._rv += 1


# --- RBAC ----------------------------------------------------------------------------------------------

_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def request_attributes(method: str, raw_path: str) -> tuple[str, str, str, str, str] | None:
    """(verb, api group, resource[/subresource], namespace, name) of a resource request; None for
    discovery (every authenticated user may read it: system:discovery)."""
    parts = [p for p in urlparse(raw_path).path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None
    ns = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        ns, rest = rest[1], rest[2:]
    resource, name = rest[0], rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if resource == "namespaces" and ns == "" and len(rest) == 2:
        name = rest[1]
    verb = _VERBS.get(method, method.lower())
    if method == "GET" and not name:
        verb = "list"
    # services/[scheme:]NAME[:PORT]/proxy: RBAC sees the name as written, port included ("prom:http-web"),
    # so a Role's resourceNames must name it that way (as Heapster's did: "https:heapster:")
    return verb, group, resource, ns, name


@dataclass
class RbacAuthorizer:
    """RBAC for one subject: ``cluster_rules`` (ClusterRole rules bound cluster-wide) and ``namespace_rules``
    (Role rules per namespace). Use: ``api.authorizer = RbacAuthorizer(...)``; denied requests are recorded."""

    cluster_rules: list[Obj]
    namespace_rules: dict[str, list[Obj]] = field(default_factory=dict)
    denied: list[tuple[str, str]] = field(default_factory=list)

    @staticmethod
    def _match(rule: Obj, verb: str, group: str, resource: str, name: str) -> bool:
        if not ({"*", group} & set(rule.get("apiGroups") or [])):
            return False
        if not ({"*", resource} & set(rule.get("resources") or [])):
            return False
        if not ({"*", verb} & set(rule.get("verbs") or [])):
            return False
        names = rule.get("resourceNames") or []
        return not names or (verb not in ("list", "create", "watch") and name in names)

    def __call__(self, method: str, raw_path: str) -> None:
        attrs = request_attributes(method, raw_path)
        if attrs is None:
            return
        verb, group, resource, ns, name = attrs
        rules = list(self.cluster_rules) + (list(self.namespace_rules.get(ns, [])) if ns else [])
        if any(self._match(r, verb, group, resource, name) for r in rules):
            return
        self.denied.append((method, raw_path))
        where = f' in the namespace "{ns}"' if ns else " at the cluster scope"
        plural = resource.split("/")[0]
        # errors.NewForbidden(qualifiedResource, name, err) with RBAC's reason (authorization/authorizer: rbac.go)
        qualified = f"{plural}.{group}" if group else plural
        subject = f'{qualified} "{name}"' if name else qualified
        reason = (f'User "system:serviceaccount:test:subject" cannot {verb} resource "{resource}" in API group '
                  f'"{group}"{where}')  # fmt: skip
        details = {"name": name, "group": group, "kind": plural}
        raise ApiError(403, "Forbidden", f"{subject} is forbidden: {reason}",
                       {"details": {k: v for k, v in details.items() if v}})  # fmt: skip
