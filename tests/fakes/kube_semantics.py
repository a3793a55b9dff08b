"""What the fake API server (tests/fakes/kube_api.py) takes from the real kube-apiserver, one pure function per
behaviour, each with the upstream source it was read from. tests/contract/test_kube_api_contract.py holds the
same facts as test data and checks the fake against them; docs/testing.md lists them in the reality table.

The Kubernetes minor these behaviours are those of is :data:`IMITATES`; tests/contract/test_pins.py fails when
gpustack/config/pins.py pins a newer minor than that.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

Obj = dict[str, Any]

#: the Kubernetes minor whose API server the fake imitates (the newest one gpustack pins)
IMITATES = "1.36"

# --- discovery ----------------------------------------------------------------------------------------------
# The short names kubectl resolves (``kubectl rollout status ds/x``, ``get no``) come from discovery: each
# resource's REST storage ShortNames() in kubernetes/kubernetes pkg/registry/<group>/<resource>/storage/
# storage.go, and the CRD's spec.names.shortNames (apiextensions-apiserver).

#: plural -> (api group, short names)
SHORT_NAMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "pods": ("", ("po",)),
    "nodes": ("", ("no",)),
    "namespaces": ("", ("ns",)),
    "services": ("", ("svc",)),
    "configmaps": ("", ("cm",)),
    "endpoints": ("", ("ep",)),
    "events": ("", ("ev",)),
    "persistentvolumes": ("", ("pv",)),
    "serviceaccounts": ("", ("sa",)),
    "daemonsets": ("apps", ("ds",)),
    "deployments": ("apps", ("deploy",)),
    "cronjobs": ("batch", ("cj",)),
    "poddisruptionbudgets": ("policy", ("pdb",)),
    "storageclasses": ("storage.k8s.io", ("sc",)),
    "customresourcedefinitions": ("apiextensions.k8s.io", ("crd", "crds")),
}

# --- field selectors -------------------------------------------------------------------------------------
# Which fields a LIST may select on, per kind. kubernetes/kubernetes pkg/apis/core/v1/conversion.go
# (addConversionFuncs: Pod, Node, ReplicationController; AddFieldLabelConversionsFor{Event,Namespace,Secret,
# Service}), pkg/registry/batch/job/strategy.go (JobToSelectableFields: status.successful <- status.succeeded),
# pkg/registry/core/event/strategy.go (source <- source.component, reportingComponent <- reportingController);
# every other kind: staging/src/k8s.io/apimachinery/pkg/runtime/conversion.go
# DefaultMetaV1FieldSelectorConversion (metadata.name, metadata.namespace only).
# A label a kind does not support is a 400 BadRequest whose message is the conversion function's error.

#: (api group, kind) -> {selector label: path in the object (dotted)}
FIELD_SELECTORS: dict[tuple[str, str], dict[str, str]] = {
    ("", "Pod"): {
        "metadata.name": "metadata.name",
        "metadata.namespace": "metadata.namespace",
        "spec.nodeName": "spec.nodeName",
        "spec.host": "spec.nodeName",  # old v1 clients' name for spec.nodeName
        "spec.restartPolicy": "spec.restartPolicy",
        "spec.schedulerName": "spec.schedulerName",
        "spec.serviceAccountName": "spec.serviceAccountName",
        "spec.hostNetwork": "spec.hostNetwork",
        "status.phase": "status.phase",
        "status.podIP": "status.podIP",
        "status.podIPs": "status.podIPs",
        "status.nominatedNodeName": "status.nominatedNodeName",
    },
    ("", "Node"): {"metadata.name": "metadata.name", "spec.unschedulable": "spec.unschedulable"},
    ("", "Event"): {
        **{
            f"involvedObject.{f}": f"involvedObject.{f}"
            for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
        },
        "reason": "reason",
        "reportingComponent": "reportingController",
        "source": "source.component",
        "type": "type",
        "metadata.namespace": "metadata.namespace",
        "metadata.name": "metadata.name",
    },
    ("", "Namespace"): {"status.phase": "status.phase", "metadata.name": "metadata.name"},
    ("", "Secret"): {"type": "type", "metadata.namespace": "metadata.namespace", "metadata.name": "metadata.name"},
    ("", "Service"): {
        "metadata.namespace": "metadata.namespace",
        "metadata.name": "metadata.name",
        "spec.clusterIP": "spec.clusterIP",
        "spec.type": "spec.type",
    },
    ("", "ReplicationController"): {
        "metadata.name": "metadata.name",
        "metadata.namespace": "metadata.namespace",
        "status.replicas": "status.replicas",
    },
    ("batch", "Job"): {
        "metadata.name": "metadata.name",
        "metadata.namespace": "metadata.namespace",
        "status.successful": "status.succeeded",
    },
}
DEFAULT_FIELD_SELECTORS = {"metadata.name": "metadata.name", "metadata.namespace": "metadata.namespace"}
#: defaults the API server fills in, so a selector on an unset field compares with these
_FIELD_DEFAULTS = {"spec.unschedulable": "false", "spec.hostNetwork": "false", "status.succeeded": "0"}


class SelectorError(ValueError):
    """A field selector the API server refuses (400 BadRequest, this message)."""


def unsupported_field_message(group: str, kind: str, label: str) -> str:
    """The API server's message for a field label ``kind`` does not support."""
    if (group, kind) in FIELD_SELECTORS:
        return f"field label not supported: {label}"
    return f'"{label}" is not a known field selector: only "metadata.name", "metadata.namespace"'


def _lookup(obj: Any, dotted: str) -> Any:
    cur = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def field_value(obj: Obj, path: str) -> str:
    value = _lookup(obj, path)
    if path == "status.podIPs" and isinstance(value, list):  # the pod's IPs as the strategy renders them
        return ",".join(str(v.get("ip", "")) for v in value if isinstance(v, dict))
    if value is None:
        return _FIELD_DEFAULTS.get(path, "")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_field_selector(group: str, kind: str, selector: str) -> list[tuple[str, str, str]]:
    """The (object path, operator, value) terms of a ``fieldSelector`` (``a=b``, ``a==b``, ``a!=b`` joined by
    commas) for ``kind``; :class:`SelectorError` for one the API server refuses. The API server converts the
    selector when it decodes the request, so a bad one is refused even when nothing would match."""
    supported = FIELD_SELECTORS.get((group, kind), DEFAULT_FIELD_SELECTORS)
    terms = []
    for term in filter(None, (t.strip() for t in selector.split(","))):
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(!=|==|=)\s*(.*)", term)
        if m is None:
            raise SelectorError(f"invalid selector: '{selector}'; can't understand '{term}'")
        label, op, want = m.groups()
        if label not in supported:
            raise SelectorError(unsupported_field_message(group, kind, label))
        terms.append((supported[label], op, want))
    return terms


def field_selector_matches(group: str, kind: str, obj: Obj, selector: str) -> bool:
    """Whether one object of ``kind`` matches ``selector`` (see :func:`parse_field_selector`)."""
    return all(
        (field_value(obj, path) == want) == (op != "!=")
        for path, op, want in parse_field_selector(group, kind, selector)
    )


# --- /version ---------------------------------------------------------------------------------------------
# staging/src/k8s.io/apimachinery/pkg/version/types.go Info (1.36: emulation and compatibility versions beside the
# build's): every field a kube-apiserver 1.36 answers, checked against the real one in
# tests/controlplane/test_fake_contract.py::test_version.


def version_info(git_version: str) -> Obj:
    """``GET /version`` of a kube-apiserver at ``git_version`` (``v1.36.5``), built as the release is."""
    major, minor = git_version.lstrip("v").split(".")[:2]
    return {"major": major, "minor": minor, "emulationMajor": major, "emulationMinor": minor,
            "minCompatibilityMajor": major, "minCompatibilityMinor": str(int(minor) - 1), "gitVersion": git_version,
            "gitCommit": "0" * 40, "gitTreeState": "clean", "buildDate": "2026-09-23T17:07:00Z",
            "goVersion": "go1.26.8", "compiler": "gc", "platform": "linux/amd64"}  # fmt: skip


# --- the scheduler's Unschedulable message ---------------------------------------------------------------------
# kube-scheduler 1.36 (pkg/scheduler/schedule_one.go FitError, the PostFilter plugins' messages joined): the filter
# reasons, then the DynamicResources plugin's "no new claims to deallocate" and preemption's verdict. Read from the
# real scheduler in tests/controlplane/test_golden_paths.py (the GPU kubelet double's Pending pod).


def unschedulable(nodes: int, reasons: list[str]) -> str:
    """The PodScheduled=False message (and FailedScheduling event) for ``reasons`` over ``nodes`` nodes."""
    return (f"0/{nodes} nodes are available: {', '.join(reasons)}. no new claims to deallocate, preemption: "
            f"0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling.")  # fmt: skip


# --- LIST pagination ----------------------------------------------------------------------------------------
# staging/src/k8s.io/apiserver/pkg/storage/continue.go: the token is base64.RawURLEncoding of
# {"v":"meta.k8s.io/v1","rv":<resourceVersion of the first page>,"start":"<next key, relative to the prefix>"};
# a token that does not decode is 400 "invalid continue token: continue key is not valid: ..."
# (storage/etcd3/store.go GetList). staging/src/k8s.io/apiserver/pkg/storage/etcd3/errors.go: a token whose
# resourceVersion etcd has compacted is 410 Expired with the message below and, in the Status' metadata,
# a new token (rv -1) that continues at the latest version. staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/
# types.go ListMeta.remainingItemCount: "If the list request contained label or field selectors, then the
# number of remaining items is unknown and the field will be left unset and omitted during serialization."

CONTINUE_VERSION = "meta.k8s.io/v1"
INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)


class ContinueError(ValueError):
    """A continue token that does not decode (400 BadRequest, this message)."""


def encode_continue(start: str, resource_version: int) -> str:
    raw = json.dumps({"v": CONTINUE_VERSION, "rv": resource_version, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[str, int]:
    """(start key, resourceVersion) of a token; :class:`ContinueError` with the API server's message: Go's
    ``base64.RawURLEncoding`` then ``encoding/json`` errors (:func:`go_base64_error`, :func:`go_json_error`)."""
    prefix = "invalid continue token: continue key is not valid"
    bad = go_base64_error(token)
    if bad:
        raise ContinueError(f"{prefix}: {bad}")
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    bad = go_json_error(raw)
    if bad:
        raise ContinueError(f"{prefix}: {bad}")
    data = json.loads(raw)
    if not isinstance(data, dict) or data.get("v") != CONTINUE_VERSION:
        version = data.get("v") if isinstance(data, dict) else data
        raise ContinueError(f"{prefix}: server does not recognize this encoded version {version}")
    if not data.get("rv"):
        raise ContinueError(f"{prefix}: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    if not data.get("start"):
        raise ContinueError(f"{prefix}: encoded start key empty (version meta.k8s.io/v1)")
    return str(data["start"]), int(data["rv"])


_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def go_base64_error(token: str) -> str:
    """Go's ``base64.RawURLEncoding.DecodeString`` error for ``token`` ("" when it decodes): ``illegal base64 data
    at input byte N`` for the first byte outside the alphabet (padding included), or a dangling last byte."""
    for i, ch in enumerate(token):
        if ch not in _B64URL:
            return f"illegal base64 data at input byte {i}"
    if len(token) % 4 == 1:
        return f"illegal base64 data at input byte {len(token) - 1}"
    return ""


def go_json_error(raw: bytes) -> str:
    """Go's ``encoding/json`` error for a document that is not JSON ("" when it is): an unexpected first byte is
    ``invalid character 'X' looking for beginning of value`` (X quoted as Go's ``quoteChar`` does), an empty one
    ``unexpected end of JSON input``; other syntax errors keep Python's wording."""
    text = raw.lstrip(b" \t\r\n")
    if not text:
        return "unexpected end of JSON input"
    first = text[0]
    if chr(first) not in '{["-0123456789tfn':
        return f"invalid character {go_quote_char(first)} looking for beginning of value"
    try:
        json.loads(raw)
    except ValueError as exc:
        return str(exc)
    return ""


GO_ESCAPES = {7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r", 0x5C: "\\\\"}


def go_quote_char(byte: int) -> str:
    """Go's ``encoding/json`` quoteChar: ``'\\''``, ``'"'``, else the rune of the byte as ``strconv.Quote`` writes it
    (``\\n``, ``\\x7f``, ``\\u009e``...), in single quotes."""
    if byte == ord("'"):
        return "'\\''"
    if byte == ord('"'):
        return "'\"'"
    if byte in GO_ESCAPES:
        return f"'{GO_ESCAPES[byte]}'"
    if byte < 0x20 or byte == 0x7F:
        return f"'\\x{byte:02x}'"
    ch = chr(byte)
    return f"'{ch}'" if ch.isprintable() else f"'\\u{byte:04x}'"


# --- the Eviction subresource ------------------------------------------------------------------------------
# kubernetes/kubernetes pkg/registry/core/pod/storage/eviction.go (EvictionREST.Create, canIgnorePDB,
# checkAndDecrement, getPodDisruptionBudgets, createTooManyRequestsError); the Status and HTTP code of each
# outcome: staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go (NewTooManyRequests, NewForbidden),
# staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go (a Status without a code is answered 201).

EVICTION_BLOCKED = "Cannot evict pod as it would violate the pod's disruption budget."
EVICTION_TWO_BUDGETS = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)


def can_ignore_budget(pod: Obj) -> bool:
    """canIgnorePDB: a finished, pending or terminating pod is deleted without asking its budget."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def pod_ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions if isinstance(c, dict))


def selector_matches(labels: dict[str, str], selector: Any) -> bool:
    """metav1.LabelSelectorAsSelector + Matches: a missing selector matches nothing, an empty one everything."""
    if not isinstance(selector, dict):
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), set(e.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def budget_verdict(pod: Obj, pdb: Obj) -> tuple[int, Obj] | None:
    """What one matching PodDisruptionBudget says about evicting a running ``pod``: None (evict, and decrement
    ``disruptionsAllowed`` unless :func:`skips_decrement`), else the error (HTTP code, Status)."""
    meta, status = pdb.get("metadata") or {}, pdb.get("status") or {}
    name = meta.get("name", "")
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return 429, status_failure(429, "TooManyRequests", EVICTION_BLOCKED, retry_after=10, causes=[
            {"reason": "DisruptionBudget", "message": f"The disruption budget {name} is still being processed by the server."}])  # fmt: skip
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        return 403, status_failure(
            403, "Forbidden",
            f'poddisruptionbudget.policy "{name}" is forbidden: pdb disruptions allowed is negative',
            details={"name": name, "group": "policy", "kind": "poddisruptionbudget"},
        )  # fmt: skip
    if allowed == 0:
        cause = (f"The disruption budget {name} needs {int(status.get('desiredHealthy') or 0)} healthy pods and has "
                 f"{int(status.get('currentHealthy') or 0)} currently")  # fmt: skip
        return 429, status_failure(429, "TooManyRequests", EVICTION_BLOCKED,
                                   causes=[{"reason": "DisruptionBudget", "message": cause}])  # fmt: skip
    return None


def skips_decrement(pod: Obj, pdb: Obj) -> bool:
    """An unready pod is deleted without using the budget when the application is not disrupted now:
    ``unhealthyPodEvictionPolicy: AlwaysAllow``, or (default IfHealthyBudget) currentHealthy >= desiredHealthy > 0."""
    if pod_ready(pod):
        return False
    if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    status = pdb.get("status") or {}
    desired = int(status.get("desiredHealthy") or 0)
    return int(status.get("currentHealthy") or 0) >= desired > 0


def status_failure(
    code: int,
    reason: str,
    message: str,
    *,
    causes: list[Obj] | None = None,
    retry_after: int = 0,
    details: Obj | None = None,
) -> Obj:
    """A metav1.Status for a failure, serialised as the API server does (empty fields omitted)."""
    out: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message}
    if reason:
        out["reason"] = reason
    det = dict(details or {})
    if causes:
        det["causes"] = causes
    if retry_after:
        det["retryAfterSeconds"] = retry_after
    if det:
        out["details"] = det
    out["code"] = code
    return out


# --- server-side apply --------------------------------------------------------------------------------------
# staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go ValidatePatchOptions and
# ValidateDryRun, answered by staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go as
# errors.NewInvalid(PatchOptions.meta.k8s.io, "", errs): 422 Invalid. Conflicts:
# staging/src/k8s.io/apimachinery/pkg/util/managedfields/internal/conflict.go (NewConflictError,
# getConflictMessage, printManager): 409 Conflict, one FieldManagerConflict cause per field.

APPLY_NEEDS_MANAGER = (
    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
)


APPLY_NEEDS_MANAGER_DETAILS = {
    "group": "meta.k8s.io", "kind": "PatchOptions",
    "causes": [{"reason": "FieldValueRequired", "message": "Required value: is required for apply patch",
                "field": "fieldManager"}],
}  # fmt: skip


def invalid_dry_run(kind: str, values: list[str]) -> str | None:
    """The 422 message for ``dryRun`` values other than ``All`` (``kind``: CreateOptions, PatchOptions,
    DeleteOptions); None when they are valid. The values are shown as JSON (field.NotSupported in 1.36)."""
    if all(v == "All" for v in values):
        return None
    return f'{kind}.meta.k8s.io "" is invalid: dryRun: {dry_run_cause(values)}'


def dry_run_cause(values: list[str]) -> str:
    return f'Unsupported value: {json.dumps(values, separators=(",", ":"))}: supported values: "All"'


def invalid_dry_run_details(kind: str, values: list[str]) -> Obj:
    """The Status ``details`` of :func:`invalid_dry_run`'s 422 (errors.NewInvalid: group, kind, one cause)."""
    return {"group": "meta.k8s.io", "kind": kind,
            "causes": [{"reason": "FieldValueNotSupported", "message": dry_run_cause(values), "field": "dryRun"}]}  # fmt: skip


def conflict_message(conflicts: list[tuple[str, str]]) -> str:
    """``conflicts``: (manager, field path as ``.spec.x``) pairs, managers that applied (no ``using``)."""
    if len(conflicts) == 1:
        manager, path = conflicts[0]
        return f'Apply failed with 1 conflict: conflict with "{manager}": {path}'
    by: dict[str, list[str]] = {}
    for manager, path in conflicts:
        by.setdefault(manager, []).append(path)
    lines: list[str] = []
    for manager in sorted(by):
        lines.append(f'conflicts with "{manager}":')
        lines += [f"- {p}" for p in by[manager]]
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
