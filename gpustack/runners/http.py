"""The HTTP runner: GETs (and the odd POST) either to a direct URL or
through the Kubernetes API server's proxy, always with a timeout and a cap on the body read.

Three kinds of :class:`Endpoint`:

- :class:`DirectEndpoint`: ``http(s)://host:port`` (tests, NodePorts), optional basic auth;
- :class:`KubeApiEndpoint`: the API server itself (pod logs as capped raw text), through the one Kubernetes
  client path (:meth:`gpustack.runners.kube.Kube.raw`);
- :class:`KubeProxyEndpoint`: ``/api/v1/namespaces/{ns}/services/{name}:{port}/proxy/{path}`` (or
  ``pods/{name}:{port}``) with the kubeconfig's credentials, also through :meth:`~gpustack.runners.kube.Kube.raw`. The API server *removes* the
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

from gpustack.runners.neterr import connection_problem

DEFAULT_TIMEOUT = 10.0
DEFAULT_LIMIT = 4 * 1024 * 1024  # bytes read from a body at most: every source asks only for what its checks need


Query = Mapping[str, str | list[str]]  # a list value repeats the parameter (``rule_group[]=a&rule_group[]=b``)


class HttpError(Exception):
    """A request failed: ``status`` is None when nothing answered (refused, DNS, timeout)."""

    def __init__(self, message: str, *, status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body

    def json_body(self) -> Any:
        """The start of the error's body as JSON (an API's error document); None when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


class BodyTooLarge(HttpError):
    """The answer was larger than the cap on a body: only the first ``limit`` bytes were read."""

    def __init__(self, limit: int, *, status: int | None = None) -> None:
        super().__init__(f"the answer is larger than gpustack's cap of {cap_text(limit)} on a response body "
                         "(gpustack.runners.http.DEFAULT_LIMIT): not read", status=status)  # fmt: skip
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
            raise HttpError(f"{method} {url}: {connection_problem(exc)}") from None


@dataclass
class KubeApiEndpoint:
    """The API server itself, through :meth:`gpustack.runners.kube.Kube.raw` (pod logs as raw text, capped).

    ``kube`` is a :class:`gpustack.runners.kube.Kube`; ``base`` a path prefix (empty: the server's root)."""

    kube: Any
    base: str = ""

    def describe(self) -> str:
        return f"API server {self.base or '/'}"

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
        """The Kube's answer as a :class:`Response`; nothing answering, or a non-2xx status, -> :class:`HttpError`."""
        from kubernetes.client.exceptions import ApiException

        from gpustack.runners.kube import ApiUnreachable

        full = self.base + "/" + path.lstrip("/") if self.base else path
        try:
            got = self.kube.raw(method, full, query=query_items(query), body=body, headers=headers, limit=limit,
                                timeout=timeout)  # fmt: skip
        except ApiException as exc:
            raise HttpError(f"{method} {full}: HTTP {exc.status} {exc.reason}", status=exc.status,
                            body=str(exc.body or "")[:2048]) from None  # fmt: skip
        except ApiUnreachable as exc:
            raise HttpError(f"{method} {full}: {exc.detail}") from None
        if not 200 <= got.status <= 299:
            text = got.body[:2048].decode("utf-8", errors="replace")
            raise HttpError(f"{method} {full}: HTTP {got.status}: {text[:200]}", status=got.status, body=text)
        return Response(got.status, got.body, dict(got.headers), got.truncated, limit)


@dataclass
class KubeProxyEndpoint:
    """A Service (or Pod) port reached through the API server's proxy subresource.

    ``kube`` is a :class:`gpustack.runners.kube.Kube`; requests go through its :meth:`~gpustack.runners.kube.Kube.raw`
    (:class:`KubeApiEndpoint`). ``port`` is the port *name* (or number) as in ``kubectl get --raw``.
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
        return KubeApiEndpoint(self.kube, self.base).request(method, path, query=query, body=body, headers=headers,
                                                             limit=limit, timeout=timeout)  # fmt: skip
