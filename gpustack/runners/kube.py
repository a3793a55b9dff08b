"""Kubernetes API access for the cluster layer: server-side apply, reads, bounded waits.

:class:`Kube` wraps a ``kubernetes.client.ApiClient`` built from a kubeconfig. ``apply`` uses
server-side apply (``PATCH`` with ``application/apply-patch+yaml``, field manager ``gpustack``,
``force=true``): idempotent, no ``last-applied-configuration`` annotation (CRD-sized objects fit), and
gpustack takes over fields another manager set by hand. REST paths come from API discovery
(``/api/v1``, ``/apis/<group>/<version>``), cached per group-version and refreshed on a miss, so a
kind served by a freshly installed CRD is found once it is established.

This is gpustack's one Kubernetes client path: every command and collector that talks to an API server
gets a :class:`Kube` from :mod:`gpustack.runners.kubeconfig` (``cluster_client``: the one kubeconfig
resolution, or in-cluster ServiceAccount credentials) and goes through its methods -- JSON
(:meth:`Kube.request`), paged LISTs (:meth:`Kube.list_all`), text (:meth:`Kube.text`, pod logs) and raw bodies
(:meth:`Kube.raw`, the service proxy behind :class:`gpustack.runners.http.KubeProxyEndpoint`). All of them
leave through :meth:`Kube._send`, whose first request proves the server is Kubernetes (:meth:`Kube.prove_kubernetes`;
not one: :class:`~gpustack.runners.kube_proof.NotKubernetesAPI`, exit 3, never "that kind is not served").

Every request has a timeout; every wait has one overall deadline (:func:`wait_until`).
"""

from __future__ import annotations

import copy
import functools
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.util.retry import Retry

from gpustack.console import waiting
from gpustack.constants import FIELD_MANAGER
from gpustack.errors import ClusterUnreachableError, StageError
from gpustack.runners.kube_proof import PROBE_LIMIT, Answer, Proof, probe
from gpustack.runners.neterr import connect_timeout, connecting, connection_problem

REQUEST_TIMEOUT = 30.0
STAGE = "cluster"
LIST_PAGE = 500  # items per page of a paged LIST (:meth:`Kube.list_all`)
MAX_PAGES = 10_000  # a server that keeps returning continue tokens must not loop forever

Obj = dict[str, Any]
T = TypeVar("T")


class KubeError(StageError):
    """The API server rejected a request (names the object and the server's message)."""

    def __init__(self, message: str, *, status: int | None = None, hint: str | None = None) -> None:
        super().__init__(message, stage=STAGE, hint=hint)
        self.status = status


class ApiUnreachable(ClusterUnreachableError):
    """Nothing answered (refused, DNS, TLS, timeout): exit 3. ``detail`` is the transport error alone."""

    def __init__(self, host: str, detail: str) -> None:
        super().__init__(
            f"the Kubernetes API at {host} is unreachable: {detail}",
            hint="check that the control plane is up (kubectl get --raw /readyz) and the kubeconfig",
        )
        self.detail = detail


@dataclass(frozen=True)
class RawResponse:
    """What :meth:`Kube.raw` read: the status (any, non-2xx included), at most ``limit`` bytes of the body, the
    headers (repeated ones such as ``Set-Cookie`` joined with newlines), and whether the body was cut."""

    status: int
    body: bytes
    headers: Mapping[str, str]
    truncated: bool = False


def _header_dict(raw: Any) -> dict[str, str]:
    getall = getattr(raw, "getlist", None)
    out: dict[str, str] = {}
    for key in dict.fromkeys((raw or {}).keys()):
        values = getall(key) if getall is not None else [raw[key]]
        out[str(key)] = "\n".join(str(v) for v in values or [])
    return out


def single_try_client(api: k8s_client.ApiClient, *, connect: int = 1) -> k8s_client.ApiClient:
    """A copy of ``api`` whose urllib3 does not retry a timed-out read (it would otherwise retry it 3 times,
    turning one request timeout into four against a hung API server); ``connect``: connection retries."""
    cfg = copy.deepcopy(api.configuration)
    cfg.retries = Retry(total=1, connect=connect, read=0, redirect=0, status=0)
    return k8s_client.ApiClient(configuration=cfg)


class WaitTimeout(StageError):
    """A condition did not become true before its deadline."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, stage=STAGE, hint=hint)


@dataclass(frozen=True)
class ApiResource:
    """Where a kind lives: ``/api/v1`` or ``/apis/<group>/<version>``, its plural, namespaced or not."""

    base: str
    plural: str
    namespaced: bool

    def path(self, name: str | None = None, namespace: str | None = None) -> str:
        parts = [self.base]
        if self.namespaced:
            if not namespace:
                raise ValueError(f"{self.plural} is namespaced: a namespace is required")
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        if name:
            parts.append(name)
        return "/".join(parts)


def describe(obj: Mapping[str, Any]) -> str:
    """``Kind namespace/name`` for messages."""
    meta = obj.get("metadata") or {}
    ns = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {ns}{meta.get('name')}"


def _api_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "{}")
        return str(body.get("message") or exc.reason)
    except (TypeError, ValueError):
        return str(exc.reason)


@dataclass(frozen=True)
class Eviction:
    """The Eviction API's answer for one pod: ``allowed`` (evicted, or would be in a dry run),
    ``blocked`` (429: a PodDisruptionBudget allows no disruption now; ``message`` says which) or
    ``gone`` (the pod no longer exists)."""

    pod: str
    namespace: str
    outcome: str
    message: str = ""


def _eviction_message(exc: ApiException) -> str:
    """The server's reason for a 429, with the budget named in its causes when given."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        return str(exc.reason)
    causes = [str(c.get("message")) for c in (body.get("details") or {}).get("causes") or [] if c.get("message")]
    return "; ".join([str(body.get("message") or exc.reason), *causes])


def wait_until(
    predicate: Callable[[], T | None],
    deadline: float,
    *,
    what: str,
    interval: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    hint: str | None = None,
) -> T:
    """Call ``predicate`` until it returns something truthy, or raise :class:`WaitTimeout` at ``deadline``.

    ``deadline`` is a ``clock()`` value (monotonic seconds). The predicate is tried once even when the
    deadline has passed, so a condition that already holds never times out.
    """
    while True:
        result = predicate()
        if result:
            return result
        remaining = deadline - clock()
        if remaining <= 0:
            raise WaitTimeout(f"timed out waiting for {what}", hint=hint)
        sleep(min(interval, remaining))


class Kube:
    """A small client over one kubeconfig (or an existing ``ApiClient``)."""

    def __init__(
        self, api_client: k8s_client.ApiClient, *, request_timeout: float = REQUEST_TIMEOUT, proof: Proof | None = None
    ) -> None:
        self.api = api_client
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout()  # the TCP connection's own bound (GPUSTACK_CONNECT_TIMEOUT)
        #: the cluster it talks to, when it came from :func:`gpustack.runners.kubeconfig.connect` (reports name it)
        self.target: dict[str, Any] | None = None
        #: the verdict on the server (:meth:`prove_kubernetes`), shared with clients of the same connection
        self.proof = Proof() if proof is None else proof
        self._discovery: dict[str, dict[str, ApiResource]] = {}

    # -- is it Kubernetes? ------------------------------------------------------------------------------

    def prove_kubernetes(self) -> str:
        """``GET /version`` and ``GET /api`` once per connection (:func:`~gpustack.runners.kube_proof.probe`): the
        gitVersion ("" when refused, 401/403: the next request says what). Not Kubernetes: NotKubernetesAPI."""
        with self.proof.lock:
            if self.proof.verdict is None:  # nothing answering: ApiUnreachable, nothing decided
                with waiting(connecting(str(self.api.configuration.host), self.connect_timeout)):
                    self.proof.verdict = probe(self._probe)
        return self.proof.settle(str(self.api.configuration.host))

    @functools.cached_property
    def _first_contact(self) -> k8s_client.ApiClient:
        return single_try_client(self.api, connect=0)

    def _probe(self, path: str) -> Answer:
        got, data, cut = self._send("GET", path, headers={"Accept": "application/json"}, limit=PROBE_LIMIT, prove=False)
        ctype = next((v for k, v in _header_dict(got.headers).items() if k.lower() == "content-type"), "")
        return Answer(path, int(got.status), str(got.reason or ""), ctype, data, cut)

    # -- raw requests ---------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        """One REST call; JSON in, JSON out. Connection failures -> :class:`ClusterUnreachableError`."""
        return self.request_with_headers(method, path, body=body, query=query, content_type=content_type)[0]

    def request_with_headers(
        self, method: str, path: str, *, body: Any = None, query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> tuple[Obj, dict[str, str]]:  # fmt: skip
        """:meth:`request`, and the response's headers (the API server's ``Date``: its clock). A non-2xx
        answer raises ApiException, whose ``headers`` carry them too."""
        response = self._call(method, path, body=body, query=query,
                              headers={"Accept": "application/json", "Content-Type": content_type})  # fmt: skip
        data = json.loads(response.data or b"{}")
        return (cast(Obj, data) if isinstance(data, dict) else {}), _header_dict(response.headers)

    def text(self, path: str, query: Mapping[str, str] | None = None) -> str:
        """GET a text/plain resource (``pods/<name>/log``)."""
        data = self._call("GET", path, query=query, headers={"Accept": "*/*"}).data or b""
        return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)

    def list_all(self, path: str, query: Mapping[str, str] | None = None, *, page: int = LIST_PAGE) -> list[Obj]:
        """Every item of a LIST (``path`` such as ``/api/v1/nodes``), page by page, following ``continue``
        tokens; a 410 Expired in the middle (the list snapshot expired) starts the LIST over, once."""
        items: list[Obj] = []
        token = ""
        restarted = False
        for _ in range(MAX_PAGES):
            q = {**(query or {}), "limit": str(page)}
            if token:
                q["continue"] = token
            try:
                data = self.request("GET", path, query=q)
            except ApiException as exc:
                if exc.status == 410 and token and not restarted:
                    items, token, restarted = [], "", True
                    continue
                raise
            found = data.get("items")
            items += [i for i in found if isinstance(i, dict)] if isinstance(found, list) else []
            meta = data.get("metadata")
            token = str((meta if isinstance(meta, dict) else {}).get("continue") or "")
            if not token:
                break
        return items

    def raw(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        limit: int,
        timeout: float | None = None,
    ) -> RawResponse:
        """One request whose body is returned as bytes, whatever the status (a proxied service's ``/metrics`` or
        JSON, pod logs): at most ``limit`` bytes are read. ``query`` pairs may repeat a name. Connection failures
        -> :class:`ApiUnreachable`; a request the client cannot even send (TLS) -> ApiException."""
        hdrs = {"Accept": "application/json, text/plain;q=0.9, */*;q=0.5", **(headers or {})}
        if body is not None:
            hdrs.setdefault("Content-Type", "application/json")  # the client serialises ``body`` itself
        response, data, truncated = self._send(method, path, headers=hdrs, body=body, query=query, timeout=timeout,
                                               limit=limit)  # fmt: skip
        return RawResponse(int(response.status), data, _header_dict(response.headers), truncated)

    def _call(
        self, method: str, path: str, *, headers: Mapping[str, str], body: Any = None,
        query: Mapping[str, str] | None = None,
    ) -> Any:  # fmt: skip
        """A request whose whole body is read: non-2xx -> ApiException (with the server's Status)."""
        response, _, _ = self._send(method, path, headers=headers, body=body, query=query)
        if not 200 <= response.status <= 299:
            self.api.response_deserialize(response, {})  # raises ApiException with the server's Status
            raise ApiException(status=response.status, reason=response.reason)
        return response

    def _send(
        self, method: str, path: str, *, headers: Mapping[str, str], body: Any = None,
        query: Mapping[str, str] | Sequence[tuple[str, str]] | None = None, timeout: float | None = None,
        limit: int | None = None, prove: bool = True,
    ) -> tuple[Any, bytes, bool]:  # fmt: skip
        """The one place requests go out: (the client's response, its body -- all of it, or at most ``limit``
        bytes --, whether it was cut). The first one proves the server is Kubernetes (:meth:`prove_kubernetes`;
        ``prove=False``: the probe's own GETs). Connection failures -> :class:`ApiUnreachable`."""
        if prove:
            self.prove_kubernetes()
        pairs = list(query.items()) if isinstance(query, Mapping) else list(query or [])
        try:
            serialized = self.api.param_serialize(method, path, query_params=pairs, header_params=dict(headers),
                                                  body=body, auth_settings=["BearerToken"])  # fmt: skip
            bound = self.request_timeout if timeout is None else timeout
            # the proof's GETs (a first contact): one connection attempt of at most connect_timeout, then the rest
            client, bounds = (self.api, bound) if prove else (self._first_contact, (self.connect_timeout, bound))
            response = client.call_api(*serialized, _request_timeout=bounds)
            if limit is None:
                response.read()  # type: ignore[no-untyped-call]
                return response, response.data or b"", False
            stream = response.response
            data = stream.read(limit + 1) or b""
            if len(data) > limit:
                stream.close()
            else:
                stream.release_conn()
        except (Urllib3Error, OSError) as exc:
            raise ApiUnreachable(str(self.api.configuration.host), connection_problem(exc)) from None
        return response, data[:limit], len(data) > limit

    # -- discovery ------------------------------------------------------------------------------------

    def _group_version(self, api_version: str) -> dict[str, ApiResource]:
        cached = self._discovery.get(api_version)
        if cached is not None:
            return cached
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        try:
            listing = self.request("GET", base)
        except ApiException as exc:
            if exc.status == 404:
                return {}
            raise
        out = {
            r["kind"]: ApiResource(base, r["name"], bool(r["namespaced"]))
            for r in listing.get("resources", [])
            if "/" not in r["name"]  # skip subresources (pods/status ...)
        }
        self._discovery[api_version] = out
        return out

    def resource(self, api_version: str, kind: str) -> ApiResource | None:
        """The REST resource serving ``kind`` (None when the server does not serve it, e.g. CRD missing)."""
        found = self._group_version(api_version).get(kind)
        if found is None:
            self._discovery.pop(api_version, None)  # a CRD may have appeared since
            found = self._group_version(api_version).get(kind)
        return found

    def _require(self, api_version: str, kind: str) -> ApiResource:
        res = self.resource(api_version, kind)
        if res is None:
            raise KubeError(
                f"the API server does not serve {kind} ({api_version})",
                status=404,
                hint="its CustomResourceDefinition is missing: was the chart that owns it installed?",
            )
        return res

    # -- objects --------------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        """One object, or None when it (or its kind) does not exist."""
        res = self.resource(api_version, kind)
        if res is None:
            return None
        try:
            return self.request("GET", res.path(name, namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise KubeError(f"GET {kind} {name}: {_api_message(exc)}", status=exc.status) from None

    def list_objects(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        """Objects of a kind (all namespaces when ``namespace`` is None), optionally selected."""
        res = self.resource(api_version, kind)
        if res is None:
            return []
        path = res.path(None, namespace) if res.namespaced and namespace else f"{res.base}/{res.plural}"
        query = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
        try:
            return list(self.request("GET", path, query=query or None).get("items", []))
        except ApiException as exc:
            raise KubeError(f"LIST {kind}: {_api_message(exc)}", status=exc.status) from None

    def apply_one(self, obj: Mapping[str, Any]) -> Obj:
        """Server-side apply one object; returns the object as stored."""
        api_version, kind = str(obj.get("apiVersion")), str(obj.get("kind"))
        meta = obj.get("metadata") or {}
        res = self._require(api_version, kind)
        path = res.path(str(meta.get("name")), meta.get("namespace"))
        try:
            return self.request(
                "PATCH",
                path,
                body=dict(obj),
                query={"fieldManager": FIELD_MANAGER, "force": "true"},
                content_type="application/apply-patch+yaml",
            )
        except ApiException as exc:
            raise KubeError(
                f"applying {describe(obj)} failed: {_api_message(exc)}",
                status=exc.status,
                hint="kubectl get events -A --sort-by=.lastTimestamp | tail",
            ) from None

    def apply(self, objects: Iterable[Mapping[str, Any]]) -> list[Obj]:
        """Server-side apply in order (namespaces before what lives in them). Idempotent."""
        return [self.apply_one(o) for o in objects]

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete one object; False when it did not exist."""
        res = self.resource(api_version, kind)
        if res is None:
            return False
        try:
            self.request("DELETE", res.path(name, namespace))
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise KubeError(f"DELETE {kind} {name}: {_api_message(exc)}", status=exc.status) from None
        return True

    def server_version(self) -> str:
        """The API server's version (``gitVersion`` of ``/version``, e.g. ``v1.36.4``), as the probe read it."""
        proven = self.prove_kubernetes()
        if proven:
            return proven
        try:
            return str(self.request("GET", "/version").get("gitVersion") or "")
        except ApiException as exc:
            raise KubeError(f"GET /version: {_api_message(exc)}", status=exc.status) from None

    def evict(self, pod: str, namespace: str, *, dry_run: bool = False) -> Eviction:
        """Ask the Eviction API to evict a pod (policy/v1): the API server checks the pod's
        PodDisruptionBudget and answers 429 when it allows no disruption now. ``dry_run``: the
        same checks, nothing deleted (``deleteOptions.dryRun: [All]``)."""
        body: Obj = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
        if dry_run:
            body["deleteOptions"] = {"dryRun": ["All"]}
        try:
            self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", body=body)
        except ApiException as exc:
            if exc.status == 404:
                return Eviction(pod, namespace, "gone")
            if exc.status == 429:
                return Eviction(pod, namespace, "blocked", _eviction_message(exc))
            raise KubeError(f"evicting pod {namespace}/{pod}: {_api_message(exc)}", status=exc.status) from None
        return Eviction(pod, namespace, "allowed")

    # -- waits ----------------------------------------------------------------------------------------

    def crd_established(self, name: str) -> bool:
        """The CRD exists and has condition Established=True."""
        crd = self.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
        conditions = ((crd or {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    def wait_for_crds(self, names: Iterable[str], deadline: float, *, interval: float = 1.0) -> None:
        """Wait until every named CRD is established (one overall ``deadline``, monotonic seconds)."""
        pending = list(names)

        def ready() -> bool:
            pending[:] = [n for n in pending if not self.crd_established(n)]
            return not pending

        try:
            wait_until(ready, deadline, what="CustomResourceDefinitions", interval=interval)
        except WaitTimeout:
            raise WaitTimeout(
                f"CustomResourceDefinitions not established in time: {', '.join(pending)}",
                hint="helm status kube-prometheus-stack -n monitoring; kubectl get crd | grep monitoring.coreos.com",
            ) from None
