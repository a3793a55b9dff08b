"""One way to ask the fake API server and the real one the same thing, for the fake's contract test.

:class:`Server` sends raw HTTP requests (JSON bodies, the query as given) and returns the status, the decoded body
and the headers; :func:`normalise` removes what differs between any two servers by nature (uids, resource
versions, timestamps, managed fields), so that what is left can be compared as is.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
#: metadata set by the server that no two servers share
VOLATILE_META = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink")


@dataclass
class Answer:
    code: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Server:
    """``name`` (fake or real), its URL, TLS (the real one's admin client certificate), and how a pod becomes
    Running and Ready on it (``make_ready``: kwok on the real one, a status write on the fake)."""

    name: str
    url: str
    tls: ssl.SSLContext | None = None
    headers: dict[str, str] = field(default_factory=dict)
    make_ready: Callable[[str, str], None] | None = None

    def call(self, method: str, path: str, body: Any = None, *, ctype: str = "application/json",
             query: dict[str, str] | list[tuple[str, str]] | None = None,
             headers: dict[str, str] | None = None) -> Answer:  # fmt: skip
        url = self.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = (body if isinstance(body, bytes) else json.dumps(body).encode()) if body is not None else None
        hdrs = {**self.headers, "Accept": "application/json", **(headers or {})}
        if data is not None:
            hdrs["Content-Type"] = ctype
        req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.tls) as resp:
                return Answer(resp.status, _decode(resp.read()), dict(resp.headers.items()))
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, _decode(exc.read()), dict(exc.headers.items()))

    def wait(self, method: str, path: str, ok: Callable[[Answer], bool], timeout: float = 60) -> Answer:
        deadline = time.monotonic() + timeout
        while True:
            answer = self.call(method, path)
            if ok(answer):
                return answer
            assert time.monotonic() < deadline, f"{self.name}: {method} {path}: {answer.code} {str(answer.body)[:600]}"
            time.sleep(0.2)


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def normalise(obj: Any) -> Any:
    """``obj`` without server-specific metadata (see :data:`VOLATILE_META`), recursively (List items too)."""
    if isinstance(obj, list):
        return [normalise(o) for o in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: normalise(v) for k, v in obj.items()}
    meta = out.get("metadata")
    if isinstance(meta, dict):
        out["metadata"] = {k: v for k, v in meta.items() if k not in VOLATILE_META}
    return out
