"""A small HTTP helper for the diagnose sources: GETs (and the odd POST) either to a direct URL or
through the Kubernetes API server's proxy, always with a timeout and a cap on the body read.

Two kinds of :class:`Endpoint`:

- :class:`DirectEndpoint`: ``http(s)://host:port`` (tests, NodePorts), optional basic auth;
- :class:`KubeProxyEndpoint`: ``/api/v1/namespaces/{ns}/services/{name}:{port}/proxy/{path}`` (or
  ``pods/{name}:{port}``) with the kubeconfig's credentials. The API server *removes* the
  ``Authorization`` header before proxying (kubernetes/kubernetes#38775, PR #34076), so a backend that
  needs its own credentials (Grafana) must use something else, e.g. a session cookie.

Every failure -- unreachable, timeout, non-2xx -- is an :class:`HttpError` carrying the status (None when
nothing answered) and the start of the body; callers turn it into snapshot data.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

DEFAULT_TIMEOUT = 10.0
DEFAULT_LIMIT = 4 * 1024 * 1024  # bytes read from a body at most: every source asks only for what its checks need


Query = Mapping[str, str | list[str]]  # a list value repeats the parameter (``rule_group[]=a&rule_group[]=b``)


class HttpError(Exception):
    """A request failed: ``status`` is None when nothing answered (refused, DNS, timeout)."""

    def __init__(self, message: str, *, status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class BodyTooLarge(HttpError):
    """The answer was larger than the cap on a body: only the first ``limit`` bytes were read."""

    def __init__(self, limit: int, *, status: int | None = None) -> None:
        super().__init__(f"the answer is larger than gpustack's cap of {cap_text(limit)} on a response body "
                         "(gpustack.diagnose.http.DEFAULT_LIMIT): not read", status=status)  # fmt: skip
        self.limit = limit


def cap_text(limit: int) -> str:
    """``4 MiB`` / ``64 KiB`` / ``100 B``."""
    for unit, size in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if limit >= size and limit % size == 0:
            return f"{limit // size} {unit}"
    return f"{limit} B"


@dataclass(frozen=True)
class Response:
    """A response body (at most ``limit`` bytes of it) with its status and headers."""

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    truncated: bool = False
    limit: int = DEFAULT_LIMIT  # the cap the body was read with

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; :class:`BodyTooLarge` when it was cut at the cap, :class:`HttpError` when it is not
        JSON (e.g. an HTML login page)."""
        if self.truncated:
            raise BodyTooLarge(self.limit, status=self.status)
        try:
            return json.loads(self.body or b"null")
        except ValueError:
            raise HttpError(f"expected JSON, got: {self.text()[:200]!r}", status=self.status) from None


class Endpoint(Protocol):
    """Something that answers HTTP requests for paths under one base."""

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        limit: int = DEFAULT_LIMIT,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Response: ...

    def describe(self) -> str: ...


def query_items(query: Query | None) -> list[tuple[str, str]]:
    """The query as (name, value) pairs, list values repeated."""
    out: list[tuple[str, str]] = []
    for key, value in (query or {}).items():
        out += [(key, v) for v in value] if isinstance(value, list) else [(key, value)]
    return out


def _join(path: str, query: Query | None) -> str:
    path = "/" + path.lstrip("/")
    return f"{path}?{urllib.parse.urlencode(query_items(query))}" if query else path


def _encode(body: Any, headers: dict[str, str]) -> bytes | None:
    if body is None:
        return None
    if isinstance(body, bytes):
        return body
    headers.setdefault("Content-Type", "application/json")
    return json.dumps(body).encode()


def _headers(raw: Any) -> dict[str, str]:
    """Response headers; repeated ones (``Set-Cookie``) joined with newlines."""
    out: dict[str, str] = {}
    getall = getattr(raw, "get_all", None) or getattr(raw, "getlist", None)
    for key in dict.fromkeys(raw.keys()):
        values = getall(key) if getall is not None else [raw[key]]
        out[str(key)] = "\n".join(str(v) for v in values or [])
    return out


def basic_auth(user: str, password: str) -> str:
    """The value of an ``Authorization: Basic`` header."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@dataclass
class DirectEndpoint:
    """A plain URL base, e.g. ``http://127.0.0.1:9090`` (optional basic auth)."""

    base_url: str
    auth: tuple[str, str] | None = None

    def describe(self) -> str:
        return self.base_url

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        limit: int = DEFAULT_LIMIT,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Response:
        hdrs = {"Accept": "application/json, text/plain;q=0.9, */*;q=0.5", **(headers or {})}
        data = _encode(body, hdrs)
        if self.auth is not None:
            hdrs["Authorization"] = basic_auth(*self.auth)
        url = self.base_url.rstrip("/") + _join(path, query)
        req = urllib.request.Request(url, data=data, headers=hdrs, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read(limit + 1)
                return Response(int(resp.status), raw[:limit], _headers(resp.headers), len(raw) > limit, limit)
        except urllib.error.HTTPError as exc:
            text = exc.read(2048).decode("utf-8", errors="replace")
            raise HttpError(f"{method} {url}: HTTP {exc.code} {exc.reason}", status=exc.code, body=text) from None
        except (TimeoutError, urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise HttpError(f"{method} {url}: {reason}") from None


@dataclass
class KubeProxyEndpoint:
    """A Service (or Pod) port reached through the API server's proxy subresource.

    ``kube`` is a :class:`gpustack.runners.kube.Kube` (anything with ``.api``, a ``kubernetes``
    ``ApiClient``). ``port`` is the port *name* (or number) as in ``kubectl get --raw``.
    """

    kube: Any
    namespace: str
    name: str
    port: str
    kind: str = "services"  # or "pods"

    @property
    def base(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/{self.kind}/{self.name}:{self.port}/proxy"

    def describe(self) -> str:
        return f"API server proxy {self.base}"

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        limit: int = DEFAULT_LIMIT,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Response:
        return kube_raw(self.kube, method, self.base + "/" + path.lstrip("/"), query=query, body=body,
                        headers=headers, limit=limit, timeout=timeout)  # fmt: skip


def kube_raw(
    kube: Any,
    method: str,
    path: str,
    *,
    query: Query | None = None,
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    limit: int = DEFAULT_LIMIT,
    timeout: float = DEFAULT_TIMEOUT,
) -> Response:
    """One request to the API server returning the raw body (pod logs, proxied /metrics, proxied JSON)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError as Urllib3Error

    hdrs = {"Accept": "application/json, text/plain;q=0.9, */*;q=0.5", **(headers or {})}
    if body is not None:
        hdrs.setdefault("Content-Type", "application/json")  # the client serialises ``body`` itself
    api = kube.api
    try:
        serialized = api.param_serialize(
            method, path, query_params=query_items(query), header_params=hdrs, body=body,
            auth_settings=["BearerToken"],
        )  # fmt: skip
        resp = api.call_api(*serialized, _request_timeout=timeout)
        raw_resp = resp.response
        raw = raw_resp.read(limit + 1) if hasattr(raw_resp, "read") else (resp.read() or b"")
        if hasattr(raw_resp, "release_conn"):
            if len(raw) > limit:
                raw_resp.close()
            else:
                raw_resp.release_conn()
        status = int(resp.status)
        resp_headers = _headers(resp.headers or {})
    except ApiException as exc:
        raise HttpError(f"{method} {path}: HTTP {exc.status} {exc.reason}", status=exc.status,
                        body=str(exc.body or "")[:2048]) from None  # fmt: skip
    except (Urllib3Error, OSError) as exc:
        raise HttpError(f"{method} {path}: {exc}") from None
    if not 200 <= status <= 299:
        text = raw[:2048].decode("utf-8", errors="replace")
        raise HttpError(f"{method} {path}: HTTP {status}: {text[:200]}", status=status, body=text)
    return Response(status, raw[:limit], resp_headers, len(raw) > limit, limit)
