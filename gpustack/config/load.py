"""Load the configuration: embedded default < gpustack.yaml < GPUSTACK_* environment < flags.

Every error names the file, the line and the field, and is raised as ConfigError (exit 2)
before any host is touched.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gpustack.config import semantics
from gpustack.config.model import Config
from gpustack.errors import ConfigError

ENV_PREFIX = "GPUSTACK_"
# Environment variables that are not config fields.
ENV_NON_CONFIG = {"GPUSTACK_CONFIG", "GPUSTACK_STATE_DIR", "GPUSTACK_NO_COLOR"}
DEFAULT_FILES = ("gpustack.yaml", "gpustack.yml")

Key = tuple[str | int, ...]


@dataclass
class Loaded:
    config: Config
    source: str  # the file path, or "<embedded default>"
    provenance: dict[str, str] = field(default_factory=dict)  # dotted key -> file|env|flag


# ---------------------------------------------------------------- YAML with positions
def _compose(text: str, filename: str) -> tuple[Any, dict[Key, int]]:
    """Parse YAML into plain data plus a map of key path -> 1-based line."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    lines: dict[Key, int] = {}
    if node is None:
        return {}, lines
    loader = yaml.SafeLoader("")

    def walk(n: yaml.Node, path: Key) -> Any:
        lines[path] = n.start_mark.line + 1
        if isinstance(n, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for k, v in n.value:
                key = loader.construct_object(k, deep=True)
                if key in out:
                    raise ConfigError(f"{filename}:{k.start_mark.line + 1}: duplicate key {key!r}")
                lines[(*path, key)] = k.start_mark.line + 1
                out[key] = walk(v, (*path, key))
                lines[(*path, key)] = k.start_mark.line + 1
            return out
        if isinstance(n, yaml.SequenceNode):
            return [walk(v, (*path, i)) for i, v in enumerate(n.value)]
        return loader.construct_object(n, deep=True)

    return walk(node, ()), lines


def _line_of(lines: Mapping[Key, int], path: Key) -> int | None:
    for cut in range(len(path), -1, -1):
        if path[:cut] in lines:
            return lines[path[:cut]]
    return None


def _dotted(path: Key) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


# ---------------------------------------------------------------- environment overrides
def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """GPUSTACK_SECTION__FIELD=value -> {"section": {"field": value}}; values parsed as YAML scalars."""
    out: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name in ENV_NON_CONFIG:
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX) :].split("__")]
        if len(parts) < 2 or not all(parts):
            raise ConfigError(
                f"environment variable {name}: expected GPUSTACK_<SECTION>__<FIELD>, e.g. GPUSTACK_VERSIONS__KUBERNETES=1.35"
            )
        # Lists and mappings are YAML; scalars stay strings (pydantic converts them per field,
        # so 1.30 stays "1.30" instead of becoming the float 1.3).
        value: Any = raw
        if raw.strip()[:1] in {"[", "{"}:
            try:
                value = yaml.safe_load(raw)
            except yaml.YAMLError:
                raise ConfigError(f"environment variable {name}: invalid YAML list/mapping") from None
        cur = out
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = value
    return out


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _flatten(d: Mapping[str, Any], prefix: str = "") -> list[str]:
    keys: list[str] = []
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        keys += _flatten(v, key) if isinstance(v, Mapping) else [key]
    return keys


# ---------------------------------------------------------------- embedded default
def detect_local_address() -> str:
    """The source address of this machine's default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1; connect() on UDP only picks a route
            return str(s.getsockname()[0])
        except OSError:
            raise ConfigError(
                "cannot find this machine's address (no default route)",
                hint="write a gpustack.yaml with an explicit node address (gpustack init)",
            ) from None


def default_nodes() -> list[dict[str, Any]]:
    name = socket.gethostname().split(".")[0].lower()
    return [{"name": name, "address": detect_local_address(), "role": "control-plane", "connection": "local"}]


# ---------------------------------------------------------------- entry point
def find_config_file(explicit: Path | None, environ: Mapping[str, str], cwd: Path) -> Path | None:
    if explicit is not None:
        return explicit
    if environ.get("GPUSTACK_CONFIG"):
        return Path(environ["GPUSTACK_CONFIG"])
    for name in DEFAULT_FILES:
        if (cwd / name).is_file():
            return cwd / name
    return None


def load(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    cwd: Path | None = None,
) -> Loaded:
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    file = find_config_file(path, environ, cwd)
    data: dict[str, Any] = {}
    lines: dict[Key, int] = {}
    provenance: dict[str, str] = {}
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{file}: cannot read config file: {exc.strerror}") from None
        parsed, lines = _compose(text, str(file))
        if parsed is None:
            parsed = {}
        if not isinstance(parsed, dict):
            raise ConfigError(f"{file}:1: the config must be a mapping of sections (nodes:, cluster:, ...)")
        data = parsed
        provenance.update({k: "file" for k in _flatten(data)})
    env = env_overrides(environ)
    provenance.update({k: "env" for k in _flatten(env)})
    data = _merge(data, env)
    if flags:
        provenance.update({k: "flag" for k in _flatten(flags)})
        data = _merge(data, flags)
    source = str(file) if file else "<embedded default>"
    if "nodes" not in data:
        data["nodes"] = default_nodes()
        provenance["nodes"] = "default"

    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc, source, lines, provenance)) from None
    problems = semantics.check(cfg)
    if problems:
        msgs = [_format_problem(p.path, p.message, source, lines, provenance) for p in problems]
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(msgs))
    return Loaded(cfg, source, provenance)


def _where(path: Key, source: str, lines: Mapping[Key, int], provenance: Mapping[str, str]) -> str:
    dotted = _dotted(path)
    origin = next((o for k, o in provenance.items() if dotted.startswith(k) or k.startswith(dotted)), None)
    if origin == "env":
        return f"environment ({ENV_PREFIX}{'__'.join(str(p).upper() for p in path if isinstance(p, str))})"
    if origin == "flag":
        return "command-line flag"
    line = _line_of(lines, path)
    return f"{source}:{line}" if line else source


def _format_problem(path: Key, msg: str, source: str, lines: Mapping[Key, int], prov: Mapping[str, str]) -> str:
    return f"{_where(path, source, lines, prov)}: {_dotted(path)}: {msg}"


def _format_validation(exc: ValidationError, source: str, lines: Mapping[Key, int], prov: Mapping[str, str]) -> str:
    msgs = []
    for err in exc.errors():
        loc: Key = tuple(p for p in err["loc"] if isinstance(p, (str, int)))
        # pydantic puts union/constraint branch names into loc; keep only real keys.
        loc = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))
        if err["type"] == "extra_forbidden":
            text = "unknown key (check the spelling; `gpustack init` writes every key with comments)"
        elif err["type"] == "missing":
            text = "required field is missing"
        else:
            text = err["msg"].removeprefix("Value error, ")
        msgs.append(_format_problem(loc, text, source, lines, prov))
    return "invalid configuration:\n  " + "\n  ".join(dict.fromkeys(msgs))
