"""Load the configuration: embedded default < gpustack.yaml < GPUSTACK_* environment < flags.

Every error names the file, the line and the field, and is raised as ConfigError (exit 2)
before any host is touched.
"""

from __future__ import annotations

import codecs
import os
import re
import socket
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from gpustack.config import environment, semantics
from gpustack.config.model import Config
from gpustack.console import MESSAGE_VALUE_LIMIT, shorten
from gpustack.errors import ConfigError

ENV_PREFIX = "GPUSTACK_"
DEFAULT_FILES = ("gpustack.yaml", "gpustack.yml")
EMBEDDED_DEFAULT = "<embedded default: this machine>"

Key = tuple[str | int, ...]


@dataclass
class Loaded:
    config: Config
    source: str  # the file path, or EMBEDDED_DEFAULT
    provenance: dict[str, str] = field(default_factory=dict)  # dotted key -> file|env|flag

    @property
    def is_default(self) -> bool:
        """True when no config file exists: the target is this machine as a single node."""
        return self.source == EMBEDDED_DEFAULT


# ---------------------------------------------------------------- reading the file, bounded
MAX_FILE_BYTES = 2 * 1024 * 1024  # a 5,000-node config is ~400 KB
MAX_ALIAS_EXPANSIONS = 10_000  # nodes reached again through an alias (a billion-laughs file needs millions)
MAX_DEPTH = 64  # nesting of mappings/lists; gpustack's deepest field is 5 levels down
MAX_ERRORS_SHOWN = 20


def read_config_text(file: Path) -> str:
    """The file's text, or a ConfigError naming it: missing, not a regular file, too large, binary,
    UTF-16/32 or not UTF-8 (with the line of the first bad byte)."""
    try:
        st = file.stat()
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read config file: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise ConfigError(f"{file}: cannot read config file: {kind}")
    try:
        with file.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read config file: {exc.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(
            f"{file}: config file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB; is this the right file?"
        )
    for bom, enc in ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
                     (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16")):  # fmt: skip
        if raw.startswith(bom):
            raise ConfigError(f"{file}: the file is {enc}-encoded; save it as UTF-8")
    if b"\0" in raw:
        line = raw[: raw.index(b"\0")].count(b"\n") + 1
        raise ConfigError(f"{file}:{line}: not a text file (NUL byte); is this the right file?")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{file}:{line}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None


# ---------------------------------------------------------------- YAML with positions
# libyaml when present: 6x faster on a 20,000-node file. Its composer recurses in C, so nesting is
# bounded by _check_depth's token scan first (PyYAML's scanner is also quadratic in flow depth).
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPEN = (yaml.FlowSequenceStartToken, yaml.FlowMappingStartToken, yaml.BlockSequenceStartToken,
         yaml.BlockMappingStartToken)  # fmt: skip
_CLOSE = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)
#: a YAML library's own nesting-limit error (libyaml since 0.2.6: "exceeded max depth of 1000")
DEPTH_PROBLEM = re.compile(r"(?i)max(imum)? (nesting )?depth|nesting (level|depth)")


def _check_depth(text: str, filename: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH before the document is composed. A syntax error stops the check:
    the scanner alone runs past what the parser refuses (a key indented one column less fails to parse on its
    own line, but scans on to the next), so the parser (compose) says where the error is."""
    depth = 0
    try:
        for tok in yaml.scan(text, Loader=_LOADER):
            if isinstance(tok, _OPEN):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ConfigError(
                        f"{filename}:{tok.start_mark.line + 1}: invalid YAML: nested more than {MAX_DEPTH} levels deep"
                    )
            elif isinstance(tok, _CLOSE):
                depth -= 1
    except yaml.YAMLError:
        return


def _yaml_error_at(exc: yaml.YAMLError) -> Any:
    """Where a YAML error is: the problem's mark, except for a key without its ':' (libyaml notices on the next
    line, "while scanning a simple key" names the key's own)."""
    if "simple key" in (getattr(exc, "context", None) or "") and getattr(exc, "context_mark", None) is not None:
        return exc.context_mark  # type: ignore[attr-defined]
    return getattr(exc, "problem_mark", None)


def _compose(text: str, filename: str) -> tuple[Any, dict[Key, int]]:
    """Parse YAML into plain data plus a map of key path -> 1-based line.

    Aliases are expanded here, bounded: a recursive alias, more than MAX_ALIAS_EXPANSIONS nodes
    reached through aliases, nesting deeper than MAX_DEPTH or a non-scalar mapping key is a
    ConfigError naming the line."""
    try:
        _check_depth(text, filename)
        node = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        mark = _yaml_error_at(exc)
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        problem = getattr(exc, "problem", None) or str(exc)
        if DEPTH_PROBLEM.search(problem):  # a libyaml with a depth limit of its own: the same bound, said one way
            where, problem = where.rsplit(":", 1)[0] if mark else where, f"nested more than {MAX_DEPTH} levels deep"
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    lines: dict[Key, int] = {}
    if node is None:
        return None, lines
    loader = yaml.SafeLoader("")
    seen: set[int] = set()
    expansions = 0

    def at(n: yaml.Node) -> str:
        return f"{filename}:{n.start_mark.line + 1}"

    def walk(n: yaml.Node, path: Key, active: tuple[int, ...]) -> Any:
        nonlocal expansions
        if id(n) in active:
            raise ConfigError(f"{at(n)}: {_dotted(path)}: recursive YAML alias (an anchor used inside itself)")
        if len(active) > MAX_DEPTH:
            raise ConfigError(f"{at(n)}: nested more than {MAX_DEPTH} levels deep")
        if id(n) in seen:
            expansions += 1
            if expansions > MAX_ALIAS_EXPANSIONS:
                top = path[:1]  # name the top-level key being expanded, at its line
                raise ConfigError(
                    f"{filename}:{lines.get(top, n.start_mark.line + 1)}: {_dotted(top)}: YAML aliases expand to "
                    f"more than {MAX_ALIAS_EXPANSIONS:,} values; refusing to expand further (an alias bomb?)"
                )
        seen.add(id(n))
        lines.setdefault(path, n.start_mark.line + 1)
        inner = (*active, id(n))
        if isinstance(n, yaml.MappingNode):
            explicit = sum(1 for k, _ in n.value if k.tag != "tag:yaml.org,2002:merge")
            try:
                loader.flatten_mapping(n)  # `<<: *defaults` merge keys: merged pairs come first
            except yaml.YAMLError as exc:
                raise ConfigError(f"{at(n)}: invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
            except RecursionError:
                raise ConfigError(f"{at(n)}: {_dotted(path)}: recursive YAML merge (<<) alias") from None
            merged = len(n.value) - explicit
            merged_keys: set[Any] = set()
            out: dict[Any, Any] = {}
            for i, (k, v) in enumerate(n.value):
                if not isinstance(k, yaml.ScalarNode):
                    raise ConfigError(
                        f"{at(k)}: {_dotted(path)}: a mapping key must be a plain name, not a "
                        f"{'list' if isinstance(k, yaml.SequenceNode) else 'mapping'}"
                    )
                key = loader.construct_object(k, deep=True)
                if key is None or isinstance(key, (bool, float)) or not isinstance(key, (str, int)):
                    key = k.value  # `yes:`, `1.5:`, `null:`: keep what was written
                if key in out and i >= merged and key not in merged_keys:
                    raise ConfigError(f"{at(k)}: duplicate key {key!r}")
                if i < merged:
                    merged_keys.add(key)
                else:
                    merged_keys.discard(key)  # an explicit key overrides the merged one
                lines[(*path, key)] = k.start_mark.line + 1
                out[key] = walk(v, (*path, key), inner)
                lines[(*path, key)] = k.start_mark.line + 1
            return out
        if isinstance(n, yaml.SequenceNode):
            return [walk(v, (*path, i), inner) for i, v in enumerate(n.value)]
        try:
            return loader.construct_object(n, deep=True)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{at(n)}: {_dotted(path)}: {getattr(exc, 'problem', None) or exc}") from None

    return walk(node, (), ()), lines


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
def env_overrides(environ: Mapping[str, str], *, skip: Iterable[str] = ()) -> dict[str, Any]:
    """GPUSTACK_SECTION__FIELD=value -> {"section": {"field": value}}; values parsed as YAML scalars.

    gpustack's own non-config variables (environment.NON_CONFIG) and the names in ``skip`` (secrets
    the config reads through ``*_env`` fields) are not overrides. An unknown variable is an error
    naming the variable, with the closest valid name."""
    skipped = set(skip)
    out: dict[str, Any] = {}
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or name in environment.NON_CONFIG or name in skipped:
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX) :].split("__")]
        if len(parts) < 2 or not all(parts):
            problem = "expected GPUSTACK_<SECTION>__<FIELD>, e.g. GPUSTACK_VERSIONS__KUBERNETES=1.35"
        else:
            problem = environment.check_path(Config, parts) or ""
        if problem:
            close = environment.suggest(name, Config)
            raise ConfigError(
                f"environment variable {name}: {problem}" + (f" (did you mean {close}?)" if close else ""),
                hint="gpustack's environment variables: docs/configuration.md; unset this one or fix its name",
            )
        # Lists and mappings are YAML; scalars stay strings (pydantic converts them per field,
        # so 1.30 stays "1.30" instead of becoming the float 1.3).
        value: Any = raw
        if raw.strip()[:1] in {"[", "{"}:
            try:
                value = _compose(raw, f"environment variable {name}")[0]
            except ConfigError:
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
    found = [cwd / name for name in DEFAULT_FILES if (cwd / name).exists()]
    if len(found) > 1:
        raise ConfigError(
            f"both {found[0]} and {found[1]} exist: which one is the config?",
            hint="remove or rename one, or name it with --config",
        )
    return found[0] if found else None


def load(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    cwd: Path | None = None,
) -> Loaded:
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    environment.check_own(environ)
    file = find_config_file(path, environ, cwd)
    data: dict[str, Any] = {}
    lines: dict[Key, int] = {}
    provenance: dict[str, str] = {}
    if file is not None:
        try:
            text = read_config_text(file)
        except ConfigError as exc:
            if path is None and environ.get("GPUSTACK_CONFIG"):
                raise ConfigError(
                    f"environment variable GPUSTACK_CONFIG: {exc.message}",
                    hint="point GPUSTACK_CONFIG at your gpustack.yaml, or unset it",
                ) from None
            raise
        parsed, lines = _compose(text, str(file))
        if parsed is None:
            raise ConfigError(
                f"{file}: the config file is empty",
                hint=f"list your nodes in it (`gpustack init` writes an example), or remove {file} "
                "to target this machine as a single-node cluster",
            )
        if not isinstance(parsed, dict):
            raise ConfigError(f"{file}:1: the config must be a mapping of sections (nodes:, cluster:, ...)")
        if "nodes" not in parsed:
            raise ConfigError(
                f"{file}: no `nodes:` section: a config file must list the cluster's nodes",
                hint=f"add nodes (`gpustack init` writes an example), or remove {file} "
                "to target this machine as a single-node cluster",
            )
        data = parsed
        provenance.update({k: "file" for k in _flatten(data)})
    env = env_overrides(environ, skip=environment.referenced_secret_variables(data))
    provenance.update({k: "env" for k in _flatten(env)})
    data = _merge(data, env)
    if flags:
        provenance.update({k: "flag" for k in _flatten(flags)})
        data = _merge(data, flags)
    source = str(file) if file else EMBEDDED_DEFAULT
    if file is None:
        data["nodes"] = default_nodes()
        provenance["nodes"] = "default"

    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc, source, lines, provenance, data)) from None
    problems = semantics.check(cfg)
    if problems:
        msgs = [_format_problem(_blamed(p, provenance), p.message, source, lines, provenance) for p in problems]
        raise ConfigError(_problems_message(msgs))
    return Loaded(cfg, source, provenance)


def _problems_message(msgs: list[str]) -> str:
    """The error text: at most MAX_ERRORS_SHOWN problems, then how many more there are."""
    msgs = list(dict.fromkeys(msgs))
    shown = msgs[:MAX_ERRORS_SHOWN]
    if len(msgs) > len(shown):
        shown.append(f"... and {len(msgs) - len(shown)} more problem(s) (fix these first)")
    head = "invalid configuration:" if len(msgs) == 1 else f"invalid configuration ({len(msgs)} problems):"
    return head + "\n  " + "\n  ".join(shown)


def _origin(path: Key, provenance: Mapping[str, str]) -> str | None:
    """Where the value at ``path`` came from: the provenance of the key at or above it, else of the
    keys below it (a section whose fields were set), by whole path components."""
    parts = [str(p) for p in path]
    below: list[str] = []
    for key, origin in provenance.items():
        kp = key.split(".")
        if len(kp) <= len(parts) and parts[: len(kp)] == kp:
            return origin
        if len(kp) > len(parts) and kp[: len(parts)] == parts:
            below.append(origin)
    return below[0] if below else None


#: which setting wins when a rule involves several fields: the one set last
_LAYER = {"flag": 3, "env": 2, "file": 1}


def _blamed(problem: semantics.Problem, provenance: Mapping[str, str]) -> Key:
    """The field a cross-field problem is told at: of those it involves, the one set in the latest
    layer (a flag, then the environment, then the file); the problem's own on a tie."""
    paths = (problem.path, *problem.also)
    return max(paths, key=lambda p: (_LAYER.get(_origin(p, provenance) or "", 0), p == problem.path))


def _where(path: Key, source: str, lines: Mapping[Key, int], provenance: Mapping[str, str]) -> str:
    origin = _origin(path, provenance)
    if origin == "env":
        return f"environment ({ENV_PREFIX}{'__'.join(str(p).upper() for p in path if isinstance(p, str))})"
    if origin == "flag":
        return "command-line flag"
    line = _line_of(lines, path) if origin == "file" or origin is None else None
    return f"{source}:{line}" if line else source


def _format_problem(path: Key, msg: str, source: str, lines: Mapping[Key, int], prov: Mapping[str, str]) -> str:
    return f"{_where(path, source, lines, prov)}: {_dotted(path)}: {msg}"


def _real_loc(loc: tuple[Any, ...], data: Any, *, keep_last: bool) -> Key:
    """pydantic puts union branch names (a receiver's ``webhook``, ``function-after[...]``) into
    ``loc``; keep only the keys and indexes that exist in the input (and a last, missing key)."""
    out: list[str | int] = []
    cur = data
    for i, p in enumerate(loc):
        in_dict = isinstance(cur, dict) and p in cur
        if in_dict or (isinstance(cur, list) and isinstance(p, int) and 0 <= p < len(cur)):
            cur = cur[p]
        elif keep_last and i == len(loc) - 1 and isinstance(p, (str, int)):
            pass  # a missing or unknown key
        else:
            continue
        out.append(p)
    return tuple(out)


#: Keys an earlier gpustack accepted, with why they are gone (refused like any unknown key, exit 2).
_FLANNEL_RENDERED = (
    "no longer a setting: gpustack renders Flannel's manifest itself, nothing is downloaded "
    "(remove the key; see docs/decisions.md)"
)
REMOVED_KEYS: dict[Key, str] = {
    ("versions", "flannel_sha256"): _FLANNEL_RENDERED,
    ("sources", "flannel_manifest_url"): _FLANNEL_RENDERED,
}


def _format_validation(
    exc: ValidationError, source: str, lines: Mapping[Key, int], prov: Mapping[str, str], data: Any
) -> str:
    msgs = []
    for err in exc.errors():
        loc = _real_loc(err["loc"], data, keep_last=err["type"] in {"missing", "extra_forbidden"})
        if err["type"] == "extra_forbidden" and loc in REMOVED_KEYS:
            text = REMOVED_KEYS[loc]
        elif err["type"] == "extra_forbidden":
            text = "unknown key (check the spelling; `gpustack init` writes every key with comments)"
            close = _close_key(loc)
            if close:
                text = f"unknown key (did you mean {close!r}?)"
        elif err["type"] == "missing":
            text = "required field is missing"
        else:
            text = err["msg"].removeprefix("Value error, ")
            value = err.get("input")
            if isinstance(value, str) and len(value) > MESSAGE_VALUE_LIMIT:  # a 1 MB value is not echoed whole
                text = text.replace(repr(value), repr(value[:60]) + f"… ({len(value):,} characters)")
                text = text.replace(value, shorten(value))
            if text.startswith("Input should be") and (value is None or isinstance(value, (str, int, float))):
                text += f" (got {shorten(repr(value))})"  # what was given, as the type error does not say it
        msgs.append(_format_problem(loc, text, source, lines, prov))
    return _problems_message(msgs)


def _close_key(loc: Key) -> str | None:
    """The closest valid key name for an unknown key at ``loc`` (sections and their fields)."""
    import difflib

    model: Any = Config
    for p in loc[:-1]:
        if isinstance(p, int):
            continue
        field_info = getattr(model, "model_fields", {}).get(p)
        if field_info is None:
            return None
        sub = environment._model_of(field_info.annotation)
        if sub is None:
            args = [a for a in getattr(field_info.annotation, "__args__", ()) if isinstance(a, type)]
            sub = next((a for a in args if issubclass(a, BaseModel)), None)
        if sub is None:
            return None
        model = sub
    names = list(getattr(model, "model_fields", {}))
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.75)
    return close[0] if close else None
