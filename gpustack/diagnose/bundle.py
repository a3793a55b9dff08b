"""``gpustack doctor --bundle FILE``: a support bundle (.tar.gz) with secrets REDACTED.

Members: ``snapshot.json`` (everything collected: cluster objects, Prometheus/Grafana data, host
facts, collection errors), ``findings.json`` (the report, same contract as ``--output json``),
``hosts/<node>.json``, ``logs/<namespace>_<pod>_<container>.log`` (failing pods' log tails),
``version.json``, ``config.json`` (the effective config the command ran with) and, when this machine
ran ``gpustack up`` for the cluster, ``last-up/``: that run's directory name, summary, preflight
findings and facts, its config, and the tail (:data:`LOG_TAIL_BYTES`) of each Ansible run's stdout.
The file is written 0600, atomically.

Redaction (applied to every member; :func:`redact` is pure and unit-tested):

- Secret objects: every value of ``data`` / ``stringData``; their last-applied annotation;
- mapping keys naming credentials (password, token, secret, client-key(-data), private/api key,
  credentials, ``basicAuthPassword``, Grafana ``secureJsonData`` ...): scalar values;
- container ``env`` entries whose name matches ``(?i)pass|token|secret|key``: the value;
- in every string: URL user-info and query strings (webhook tokens), webhook URL paths (Slack-style
  secrets live in the path), ``Bearer`` tokens, ``password=...``/``token: ...`` assignments, PEM keys.
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpustack import __version__
from gpustack.checks.model import Finding
from gpustack.diagnose import report
from gpustack.diagnose.snapshot import Snapshot

REDACTED = "REDACTED"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
#: mapping keys whose scalar values are credentials (not plain "key": taints and selectors use it;
#: not "pass" inside a word: "bypass", "passthrough")
SECRET_KEY_RE = re.compile(
    r"(?i)(pass(word|wd|phrase)|(?-i:(?<![A-Za-z])(?:pass|Pass|PASS)|(?<=[a-z])Pass)(?-i:(?![a-z]))|token|secret|client-key|private[-_]?key|api[-_]?key|"
    r"access[-_]?key|credential|auth[-_]?key|cookie|webhook[-_]?url|bearer)"
)
#: a key that is only the word "pass" names a credential when its value is text, a tally when it is a
#: number (findings.json's summary: ``{"pass": 31, "fail": 2, ...}``; summary.json's counts)
TALLY_KEY_RE = re.compile(r"(?i)pass")  # the whole key
#: container env var names whose values are redacted (the brief's broad rule)
ENV_SECRET_RE = re.compile(r"(?i)pass|token|secret|key")
URL_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s/?#@'\"]+@)?([^\s/?#'\"]*)([^\s?#'\"]*)(\?[^\s#'\"]*)?")
ASSIGN_RE = re.compile(
    r"(?i)((?:[\w.-]*(?:pass(?:word|wd)?|token|secret|credential|(?:api|private|client|access|auth)[-_]?key)[\w.-]*)"
    r"[\"']?\s*[:=]\s*[\"']?)"
    r"([^\s\"',;&]+)"
)
BEARER_RE = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+")
PEM_RE = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S)
WEBHOOK_HINTS = ("hook", "slack.com", "discord", "office.com", "pagerduty", "opsgenie")
#: how much of an Ansible run's stdout goes into the bundle (its end: where a failure is)
LOG_TAIL_BYTES = 1 << 20
#: files of a run directory the bundle carries (JSON, redacted), besides facts/ and the Ansible stdout
RUN_FILES = ("run.json", "summary.json", "preflight.json", "config.json")


def _redact_url(m: re.Match[str]) -> str:
    scheme, userinfo, host, path, query = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)
    out = scheme + (f"{REDACTED}@" if userinfo else "") + host
    if path and any(h in (host + path).lower() for h in WEBHOOK_HINTS):
        out += f"/{REDACTED}"
    else:
        out += path or ""
    if query:
        out += f"?{REDACTED}"
    return out


def redact_text(text: str) -> str:
    """Credentials inside free text (logs, config files in ConfigMaps, evidence strings)."""
    text = PEM_RE.sub(f"-----{REDACTED} PRIVATE KEY-----", text)
    text = URL_RE.sub(_redact_url, text)
    text = BEARER_RE.sub(lambda m: m.group(1) + REDACTED, text)
    return ASSIGN_RE.sub(lambda m: m.group(1) + REDACTED, text)


def _wipe(value: Any) -> Any:
    """Scalars -> REDACTED; containers keep their shape with every scalar redacted."""
    if isinstance(value, Mapping):
        return {k: _wipe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_wipe(v) for v in value]
    if value is None or isinstance(value, bool):
        return value
    return REDACTED


def _redact_env(items: list[Any]) -> list[Any]:
    out = []
    for item in items:
        if isinstance(item, Mapping) and "name" in item and "value" in item and ENV_SECRET_RE.search(str(item["name"])):
            item = {**item, "value": REDACTED}
        out.append(redact(item))
    return out


def _redact_annotation(value: Any) -> Any:
    if not isinstance(value, str):
        return redact(value)
    try:
        parsed = json.loads(value)
    except ValueError:
        return redact_text(value)
    return json.dumps(redact(parsed), sort_keys=True)


def redact(data: Any, *, parent_key: str = "") -> Any:
    """A deep copy of JSON-like ``data`` with credentials replaced by ``REDACTED``."""
    if isinstance(data, str):
        return redact_text(data)
    if isinstance(data, list):
        return _redact_env(data) if parent_key == "env" else [redact(v) for v in data]
    if not isinstance(data, Mapping):
        return data
    is_secret = data.get("kind") == "Secret"
    out: dict[str, Any] = {}
    for key, value in data.items():
        k = str(key)
        secret_field = is_secret and k in ("data", "stringData")
        credential = SECRET_KEY_RE.search(k) is not None and not isinstance(value, (Mapping, list))
        if credential and TALLY_KEY_RE.fullmatch(k) and isinstance(value, (int, float)):
            credential = False  # a count of passed checks, not a password
        if secret_field or credential or k == "secureJsonData":
            out[k] = _wipe(value)
        elif k == "annotations" and isinstance(value, Mapping):
            out[k] = {
                ak: (REDACTED if is_secret else _redact_annotation(av)) if ak == LAST_APPLIED else redact(av)
                for ak, av in value.items()
            }
        else:
            out[k] = redact(value, parent_key=k)
    return out


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:150] or "unnamed"


def last_run(runs: Path, cluster: str, command: str = "up") -> Path | None:
    """The newest run directory under ``runs`` of ``command`` for ``cluster``: its ``run.json`` says
    so, or (a run from before run.json existed) its config names the cluster and it ran site.yml."""
    if not runs.is_dir():
        return None
    for run in sorted((p for p in runs.iterdir() if p.is_dir()), reverse=True):
        meta = _json_file(run / "run.json")
        if isinstance(meta, dict) and meta:
            if meta.get("command") == command and meta.get("cluster") == cluster:
                return run
            continue
        cfg = _json_file(run / "config.json")
        name = (cfg.get("cluster") or {}).get("name", "gpustack") if isinstance(cfg, dict) else None
        if command == "up" and name == cluster and any(run.glob("ansible*/artifacts/site")):
            return run
    return None


def _json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    with path.open("rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(0, size - limit))
        data = fh.read()
    cut = f"[... first {size - limit:,} bytes left out ...]\n" if size > limit else ""
    return cut + data.decode("utf-8", errors="replace")


def run_members(run: Path) -> dict[str, bytes]:
    """A run directory's files for the bundle (names relative to it), redacted."""

    def dump(data: Any) -> bytes:
        return (json.dumps(redact(data), indent=1, sort_keys=True, default=str) + "\n").encode()

    out: dict[str, bytes] = {"run-directory.txt": f"{run}\n".encode()}
    for name in RUN_FILES:
        data = _json_file(run / name)
        if data is not None:
            out[name] = dump(data)
    for facts in sorted((run / "facts").glob("*.json")):
        data = _json_file(facts)
        if data is not None:
            out[f"facts/{_safe_name(facts.name)}"] = dump(data)
    for stdout in sorted(run.glob("ansible*/artifacts/*/stdout")):
        out[f"ansible/{_safe_name(stdout.parts[-4])}-{_safe_name(stdout.parts[-2])}.log"] = redact_text(
            _tail(stdout)
        ).encode()
    return out


def bundle_members(
    snap: Snapshot,
    findings: Sequence[Finding],
    command: str,
    *,
    config: Mapping[str, Any] | None = None,
    up_run: Path | None = None,
) -> dict[str, bytes]:
    """Member name -> content, everything redacted. ``config``: the effective config (JSON-like);
    ``up_run``: the last ``gpustack up`` run directory of the cluster (:func:`last_run`)."""

    def dump(data: Any) -> bytes:
        return (json.dumps(redact(data), indent=1, sort_keys=True, default=str) + "\n").encode()

    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    version = {"gpustack": __version__, "python": platform.python_version(), "command": command, "created": created}
    members: dict[str, bytes] = {
        "version.json": dump(version),
        "snapshot.json": dump(snap.to_json()),
        "findings.json": dump(report.to_json(command, findings)),
    }
    for node, facts in sorted(snap.hosts.items()):
        members[f"hosts/{_safe_name(node)}.json"] = dump(facts)
    for key, text in sorted(snap.pod_logs.items()):
        members[f"logs/{_safe_name(key.replace('/', '_'))}.log"] = redact_text(str(text)).encode()
    if config is not None:
        members["config.json"] = dump(config)
    if up_run is not None:
        members.update({f"last-up/{name}": data for name, data in run_members(up_run).items()})
    return members


def write_bundle(
    path: Path,
    snap: Snapshot,
    findings: Sequence[Finding],
    command: str = "doctor",
    *,
    config: Mapping[str, Any] | None = None,
    up_run: Path | None = None,
) -> Path:
    """Write the support bundle (gzip tar, mode 0600, atomic rename); returns the path."""
    members = bundle_members(snap, findings, command, config=config, up_run=up_run)
    path = path.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".gpustack-bundle-", suffix=".tar.gz", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            now = time.time()
            for name, content in members.items():
                info = tarfile.TarInfo(f"gpustack-bundle/{name}")
                info.size, info.mtime, info.mode = len(content), now, 0o600
                tar.addfile(info, io.BytesIO(content))
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
