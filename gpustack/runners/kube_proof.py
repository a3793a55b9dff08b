"""Is the kubeconfig's server a Kubernetes API server? The verdict on its answers to ``GET /version`` and
``GET /api``, as pure functions, and the error that names a server that is not one.

A kube-apiserver answers ``/version`` with ``{"gitVersion": "v1.36.4", ...}`` and ``/api`` with
``{"kind": "APIVersions", "versions": ["v1"], ...}``, to every authenticated user (ClusterRole
``system:discovery``) and ``/version`` to anonymous ones too (``system:public-info-viewer``), so any working
credentials do. Anything else -- a server that answers 404 to every path, a web server's HTML page, a proxy's
502/503 error page, JSON without those fields -- is not a Kubernetes API server: :class:`NotKubernetesAPI`
(a :class:`~gpustack.errors.ClusterUnreachableError`, exit 3), never "the kind is not served, the list is empty".

What stays Kubernetes although it did not answer 200: 401 and 403 (the credentials refused, or the two paths not
granted: a hardened cluster), and a 429 or 5xx whose body is the API server's own ``Status`` object (it is
overloaded or starting). The verdict is then "unproven": requests go ahead and report what the server says, as
they always did. :class:`Proof` keeps the verdict of one connection (``Kube.prove_kubernetes`` asks once).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpustack.errors import ClusterUnreachableError

#: the two paths asked, in order
VERSION_PATH, API_PATH = "/version", "/api"
#: bytes read of each answer (a real one is well under 1 KiB)
PROBE_LIMIT = 64 * 1024
#: the start of :class:`NotKubernetesAPI`'s message (reports recognise it by this)
NOT_KUBERNETES = "not a Kubernetes API server at"
HINT = (
    "the kubeconfig's server must be the cluster's API server (kube-apiserver, usually https://<control-plane>:6443); "
    "kubectl get --raw /version answers JSON with a gitVersion there"
)
#: statuses a Kubernetes API server answers before it reveals what it is: the credentials (or the path) refused
REFUSED = (401, 403)
#: verdicts: the server proved it is Kubernetes; it is Kubernetes by its answer but refused the probe; it is not
KUBERNETES, UNPROVEN, NOT = "kubernetes", "unproven", "not"


class NotKubernetesAPI(ClusterUnreachableError):
    """The kubeconfig's server answers, but not as a Kubernetes API server (exit 3, as an unreachable cluster).
    ``reason``: what gave it away (``GET /version answered 404 Not Found``, ``GET /api is not JSON``)."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"{NOT_KUBERNETES} {server}: {reason}", hint=HINT)
        self.server = server
        self.reason = reason


@dataclass(frozen=True)
class Answer:
    """One answer to a probe GET: status, reason phrase, Content-Type and (at most :data:`PROBE_LIMIT` bytes of)
    the body."""

    path: str
    status: int
    reason: str = ""
    content_type: str = ""
    body: bytes = b""
    truncated: bool = False


@dataclass(frozen=True)
class Verdict:
    """:data:`KUBERNETES` (``version``: the server's gitVersion, when read), :data:`UNPROVEN` or :data:`NOT`
    (``reason`` says why)."""

    kind: str
    reason: str = ""
    version: str = ""


def _json(answer: Answer) -> Any:
    """The body as JSON, or None when it is not JSON (cut short, HTML, text, empty)."""
    if answer.truncated or not answer.body.strip():
        return None
    try:
        return json.loads(answer.body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def _is_status(doc: Any) -> bool:
    """An API server's error object: ``{"kind": "Status", "apiVersion": "v1", "status": "Failure", ...}``."""
    return isinstance(doc, dict) and doc.get("kind") == "Status" and doc.get("apiVersion") == "v1"


def _looks(answer: Answer) -> str:
    """What the body is, in a word or two, for a reason: ``an HTML page``, ``empty``, its Content-Type."""
    ctype = answer.content_type.split(";", 1)[0].strip().lower()
    head = answer.body.lstrip()[:15].lower()
    if not head:
        return "empty"
    if ctype == "text/html" or head.startswith((b"<!doctype html", b"<html")):
        return "an HTML page"
    return ctype


def _answered(answer: Answer) -> Verdict | None:
    """The verdict a non-200 answer gives (None: a 200, judged on its body)."""
    if answer.status == 200:
        return None
    if answer.status in REFUSED:
        return Verdict(UNPROVEN, f"GET {answer.path} answered {answer.status}")
    if (answer.status == 429 or answer.status >= 500) and _is_status(_json(answer)):
        return Verdict(UNPROVEN, f"GET {answer.path} answered {answer.status}")
    said = f"GET {answer.path} answered {answer.status} {answer.reason}".rstrip()
    looks = _looks(answer)
    return Verdict(NOT, said + (f" ({looks})" if looks == "an HTML page" else ""))


def _not_json(answer: Answer) -> Verdict:
    looks = f"over {PROBE_LIMIT // 1024} KiB" if answer.truncated else _looks(answer)
    return Verdict(NOT, f"GET {answer.path} is not JSON" + ("" if not looks or "json" in looks else f" ({looks})"))


def judge_version(answer: Answer) -> Verdict:
    """``GET /version``: 200 with a JSON object carrying a ``gitVersion`` string."""
    early = _answered(answer)
    if early is not None:
        return early
    doc = _json(answer)
    if not isinstance(doc, dict):
        return _not_json(answer) if doc is None else Verdict(NOT, f"GET {answer.path} is not a JSON object")
    version = doc.get("gitVersion")
    if not isinstance(version, str) or not version:
        return Verdict(NOT, f"GET {answer.path} has no gitVersion")
    return Verdict(KUBERNETES, version=version)


def judge_api(answer: Answer) -> Verdict:
    """``GET /api``: 200 with JSON of kind ``APIVersions`` whose ``versions`` include ``v1``."""
    early = _answered(answer)
    if early is not None:
        return early
    doc = _json(answer)
    if not isinstance(doc, dict):
        return _not_json(answer) if doc is None else Verdict(NOT, f"GET {answer.path} is not a JSON object")
    if doc.get("kind") != "APIVersions":
        return Verdict(NOT, f"GET {answer.path} is not an APIVersions list")
    versions = doc.get("versions")
    if not isinstance(versions, list) or "v1" not in versions:
        return Verdict(NOT, f"GET {answer.path} does not list v1")
    return Verdict(KUBERNETES)


def probe(fetch: Callable[[str], Answer]) -> Verdict:
    """The verdict on a server whose answers ``fetch(path)`` gets: ``/version``, then, when that proved
    Kubernetes, ``/api``."""
    first = judge_version(fetch(VERSION_PATH))
    if first.kind != KUBERNETES:
        return first
    second = judge_api(fetch(API_PATH))
    return first if second.kind == KUBERNETES else second


@dataclass
class Proof:
    """The verdict on one connection's server, decided once (``Kube.prove_kubernetes``) and shared by the clients
    built on that connection (``CountingKube``, the collectors' clients). None until asked; a transport failure
    while asking decides nothing (the next request asks again)."""

    verdict: Verdict | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def settle(self, server: str) -> str:
        """The server's gitVersion ("" when unproven); :class:`NotKubernetesAPI` when it is not Kubernetes."""
        verdict = self.verdict
        if verdict is not None and verdict.kind == NOT:
            raise NotKubernetesAPI(server, verdict.reason)
        return verdict.version if verdict is not None else ""
