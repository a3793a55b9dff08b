"""The circuit breaker's ledger on the cluster: read it with the API server's clock, write it back
conditioned on the ``resourceVersion`` it was read at (the decisions are :mod:`gpustack.health.breaker`).

The clock: the ``Date`` header of the ledger read. The API server (Go's net/http, ``server.go``
``chunkWriter.writeHeader``) stamps every response with it, error answers included, so a 404 for a missing
ledger carries it too. It is read at the moment of the decision, at 1 s resolution. The ConfigMap's
``managedFields[].time`` was the alternative: it only says when the ledger was last *written*, not what time
it is now. HA API servers are separate hosts whose clocks may drift apart, so the decision checks that
Date against the evaluator's clock and the ledger's own times (:func:`gpustack.health.breaker.clock_problem`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpustack.constants import BREAKER_CONFIGMAP, HEALTH_FIELD_MANAGER, SYSTEM_NAMESPACE
from gpustack.errors import GpustackError
from gpustack.health.breaker import (
    LEDGER_KEY,
    Candidate,
    Decision,
    Entry,
    Ledger,
    LedgerUnreadable,
    decide,
    held_unreadable,
)
from gpustack.health.policy import Settings
from gpustack.runners.kube import Kube

CM_PATH = f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/configmaps"
MERGE = "application/merge-patch+json"
ATTEMPTS = 5
#: how to look at and repair an unreadable ledger (the breaker holds every new quarantine until then)
REPAIR = (
    f"kubectl -n {SYSTEM_NAMESPACE} get configmap {BREAKER_CONFIGMAP} -o jsonpath='{{.data.ledger\\.json}}'; "
    "repair the JSON (format: docs/operations.md, The circuit breaker), or, after checking the recent "
    "quarantines (kubectl get nodes -l gpustack.io/quarantined=true), delete the ConfigMap: the next run "
    "starts an empty ledger"
)
#: why a run that finds no ledger ConfigMap starts one (recorded in it as ``created.reason``)
NEW_LEDGER = "no ledger ConfigMap: the first --apply run, or it was deleted"
NO_DATE = (
    "the API server's answer carried no usable Date header, and the breaker keeps time by the API server's clock only"
)


def api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


def server_time(headers: Mapping[str, str] | Any) -> float | None:
    """The ``Date`` header as epoch seconds (None: absent or unparsable)."""
    try:
        value = headers.get("Date") or headers.get("date") if headers is not None else None
        return parsedate_to_datetime(str(value)).timestamp() if value else None
    except (TypeError, ValueError, AttributeError):
        return None


@dataclass(frozen=True)
class LedgerRead:
    ledger: Ledger | None  # None: unreadable (``problem`` says why)
    resource_version: str | None  # None: no ConfigMap yet
    now: float | None  # the API server's clock at the read
    problem: str = ""


def read_ledger(kube: Kube) -> LedgerRead:
    """The ledger, its resourceVersion and the API server's time. An unreadable ledger is reported, not
    raised (the breaker then holds); a failed request raises :class:`GpustackError`."""
    try:
        cm, headers = kube.request_with_headers("GET", f"{CM_PATH}/{BREAKER_CONFIGMAP}")
    except ApiException as exc:
        if exc.status == 404:
            return LedgerRead(Ledger(), None, server_time(exc.headers))
        raise GpustackError(
            f"cannot read the circuit breaker's ledger ({SYSTEM_NAMESPACE}/{BREAKER_CONFIGMAP}): {api_message(exc)}"
        ) from None
    rv = str((cm.get("metadata") or {}).get("resourceVersion") or "")
    try:
        ledger = Ledger.from_text((cm.get("data") or {}).get(LEDGER_KEY))
    except LedgerUnreadable as exc:
        return LedgerRead(None, rv, server_time(headers), str(exc))
    return LedgerRead(ledger, rv, server_time(headers))


def write_ledger(kube: Kube, ledger: Ledger, resource_version: str | None) -> bool:
    """Compare-and-swap: False when someone else wrote first (re-read and decide again)."""
    try:
        if resource_version is None:
            body = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": BREAKER_CONFIGMAP, "namespace": SYSTEM_NAMESPACE,
                                 "labels": {"app.kubernetes.io/part-of": "gpustack"}},
                    "data": {LEDGER_KEY: ledger.to_text()}}  # fmt: skip
            try:
                kube.request("POST", CM_PATH, body=body, query={"fieldManager": HEALTH_FIELD_MANAGER})
            except ApiException as exc:
                if exc.status != 404:  # 404: the namespace is missing (health --apply before `up` made it)
                    raise
                kube.apply_one({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE,
                                "labels": {"app.kubernetes.io/part-of": "gpustack"}}})  # fmt: skip
                kube.request("POST", CM_PATH, body=body, query={"fieldManager": HEALTH_FIELD_MANAGER})
        else:
            patch = {"metadata": {"resourceVersion": resource_version}, "data": {LEDGER_KEY: ledger.to_text()}}
            kube.request("PATCH", f"{CM_PATH}/{BREAKER_CONFIGMAP}", body=patch,
                         query={"fieldManager": HEALTH_FIELD_MANAGER}, content_type=MERGE)  # fmt: skip
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise GpustackError(f"cannot write the circuit breaker's ledger: {api_message(exc)}") from None
    return True


@dataclass(frozen=True)
class Context:
    """What a decision needs besides the ledger: the evaluator's clock (checked against the API server's)
    and the quarantines the nodes record (``gpustack.io/quarantine-history``)."""

    local: float | None = None
    stamps: tuple[Entry, ...] = ()


def _decide(read: LedgerRead, candidates: list[Candidate], gpu_nodes: int, settings: Settings, by: str,
            ctx: Context = Context()) -> Decision:  # fmt: skip
    if read.ledger is None:
        return held_unreadable(candidates, gpu_nodes, settings, read.problem)
    if read.now is None:
        return held_unreadable(candidates, gpu_nodes, settings, NO_DATE)
    created = NEW_LEDGER if read.resource_version is None else ""
    return decide(read.ledger, candidates, gpu_nodes, settings, read.now, by, local=ctx.local, stamps=ctx.stamps,
                  created=created)  # fmt: skip


def preview(kube: Kube, candidates: list[Candidate], gpu_nodes: int, settings: Settings, by: str,
            ctx: Context = Context()) -> Decision:  # fmt: skip
    """What :func:`reserve` would decide now, writing nothing (the dry run)."""
    try:
        read = read_ledger(kube)
    except GpustackError as exc:
        read = LedgerRead(None, None, None, str(exc))
    return _decide(read, candidates, gpu_nodes, settings, by, ctx)


def reserve(kube: Kube, candidates: list[Candidate], gpu_nodes: int, settings: Settings, by: str,
            ctx: Context = Context()) -> Decision:  # fmt: skip
    """Decide and record the decision atomically (read, decide, conditional write; again on a conflict)."""
    for _ in range(ATTEMPTS):
        read = read_ledger(kube)
        decision = _decide(read, candidates, gpu_nodes, settings, by, ctx)
        if decision.ledger is None or not decision.changed:
            return decision
        if write_ledger(kube, decision.ledger, read.resource_version):
            return decision
    raise GpustackError(f"the circuit breaker's ledger kept changing under this run ({ATTEMPTS} attempts): try again")
