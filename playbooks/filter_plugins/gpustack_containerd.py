"""Ansible filters for containerd's config.toml: ``containerd_systemd_cgroup`` sets
``SystemdCgroup = true`` for runc; ``containerd_runtime_config`` also pins the sandbox (pause)
image of the Kubernetes minor, for runc from a release archive runc's ``BinaryName``, and keeps
the drop-in directory the NVIDIA container toolkit writes to (``/etc/containerd/conf.d/*.toml``)
among the top-level ``imports``: a regenerated config.toml must not lose the nvidia runtime.

kubeadm configures the kubelet with the systemd cgroup driver; containerd's runc must use the
same driver or control-plane pods restart in a loop. The edit is section-aware (a
``SystemdCgroup`` key of another runtime, e.g. one nvidia-ctk added, is never touched) and
minimal: every other line is kept byte for byte, so a converged file is returned unchanged.

Supported: config ``version = 2`` (containerd 1.x, ``[plugins."io.containerd.grpc.v1.cri"...]``),
``version = 3`` (containerd 2.0-2.2, ``[plugins.'io.containerd.cri.v1.runtime'...]``) and ``version = 4``
(containerd 2.3): version 4 moves only the server settings ([grpc], [ttrpc], [debug], [metrics]) into
``io.containerd.server.v1.*`` plugins; the CRI tables keep their version-3 names (containerd v2.3.4
cmd/containerd/server/config/config.go: the 3 -> 4 migration is ``serviceMigrate`` alone).
"""

from __future__ import annotations

import importlib.util
import os
import re
from types import ModuleType

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - outside Ansible (unit tests without ansible)
    AnsibleFilterError = ValueError  # type: ignore[misc,assignment]


def _module_utils(name: str) -> ModuleType:
    """``../module_utils/<name>.py``, loaded by path: on the controller Ansible resolves
    ``ansible.module_utils`` imports of playbook-adjacent files only for modules, not plugins."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, os.pardir, "module_utils", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_gpustack_module_utils_{name}", path)
    if spec is None or spec.loader is None:  # pragma: no cover - a broken installation
        raise ImportError(f"gpustack module_utils {name!r} not found at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


split_key = _module_utils("gpustack_toml").split_key

# config version -> (dotted path of the runc runtime table, how containerd quotes it)
RUNC_TABLES: dict[int, tuple[tuple[str, ...], str]] = {
    2: (
        ("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes", "runc"),
        'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc',
    ),
    3: (
        ("plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "runc"),
        "plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc",
    ),
}
RUNC_TABLES[4] = RUNC_TABLES[3]

# config version -> (table key, how containerd quotes it, key) of the sandbox (pause) image
SANDBOX_KEYS: dict[int, tuple[tuple[str, ...], str, str]] = {
    2: (("plugins", "io.containerd.grpc.v1.cri"), 'plugins."io.containerd.grpc.v1.cri"', "sandbox_image"),
    3: (
        ("plugins", "io.containerd.cri.v1.images", "pinned_images"),
        "plugins.'io.containerd.cri.v1.images'.pinned_images",
        "sandbox",
    ),
}
SANDBOX_KEYS[4] = SANDBOX_KEYS[3]

_TABLE_RE = re.compile(r"^(?P<indent>[ \t]*)\[(?!\[)(?P<key>[^\]]*)\][ \t]*(?:#.*)?$")
_ARRAY_TABLE_RE = re.compile(r"^[ \t]*\[\[")
_VERSION_RE = re.compile(r"^[ \t]*version[ \t]*=[ \t]*(\d+)")
_KEY_RE = re.compile(r"^(?P<indent>[ \t]*)SystemdCgroup[ \t]*=[ \t]*(?P<value>[^#\s]*)")
_ANY_KEY_RE = re.compile(r"^(?P<indent>[ \t]*)[A-Za-z0-9_\"'-]+[ \t]*=")


def config_version(text: str) -> int | None:
    """The top-level ``version = N`` (before the first table), or None."""
    for line in text.splitlines():
        if _TABLE_RE.match(line) or _ARRAY_TABLE_RE.match(line):
            return None
        m = _VERSION_RE.match(line)
        if m:
            return int(m.group(1))
    return None


def _tables(lines: list[str]) -> list[tuple[int, tuple[str, ...] | None]]:
    """(line index, key) of every table header; array-of-tables headers have key None."""
    out: list[tuple[int, tuple[str, ...] | None]] = []
    for i, line in enumerate(lines):
        m = _TABLE_RE.match(line.rstrip("\r\n"))
        if m:
            out.append((i, split_key(m.group("key"))))
        elif _ARRAY_TABLE_RE.match(line):
            out.append((i, None))
    return out


def _section(lines: list[str], key: tuple[str, ...]) -> tuple[int, int] | None:
    """(header index, end index exclusive) of table ``key``, or None."""
    tables = _tables(lines)
    for n, (i, k) in enumerate(tables):
        if k == key:
            end = tables[n + 1][0] if n + 1 < len(tables) else len(lines)
            return i, end
    return None


def containerd_systemd_cgroup(text: str) -> str:
    """Return ``text`` with ``SystemdCgroup = true`` in runc's options table."""
    text = str(text)
    version = config_version(text)
    if version not in RUNC_TABLES:
        raise AnsibleFilterError(
            f"containerd config version {version!r} is not supported (expected 2, 3 or 4); "
            "move /etc/containerd/config.toml away and re-run to regenerate it"
        )
    runc_key, runc_header = RUNC_TABLES[version]
    options_key = (*runc_key, "options")
    options_header = f"{runc_header}.options"
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += newline

    section = _section(lines, options_key)
    if section is not None:
        start, end = section
        header_indent = _TABLE_RE.match(lines[start].rstrip("\r\n")).group("indent")  # type: ignore[union-attr]
        key_indent = None
        for i in range(start + 1, end):
            m = _KEY_RE.match(lines[i])
            if m:
                if m.group("value") == "true":
                    return "".join(lines)
                lines[i] = f"{m.group('indent')}SystemdCgroup = true{newline}"
                return "".join(lines)
            other = _ANY_KEY_RE.match(lines[i])
            if other and key_indent is None:
                key_indent = other.group("indent")
        indent = key_indent if key_indent is not None else header_indent + "  "
        lines.insert(start + 1, f"{indent}SystemdCgroup = true{newline}")
        return "".join(lines)

    runc = _section(lines, runc_key)
    if runc is not None:
        start, end = runc
        indent = _TABLE_RE.match(lines[start].rstrip("\r\n")).group("indent")  # type: ignore[union-attr]
        # keep blank lines that separate the runc table from the next one after our table
        while end > start + 1 and not lines[end - 1].strip():
            end -= 1
        block = [
            newline,
            f"{indent}  [{options_header}]{newline}",
            f"{indent}    SystemdCgroup = true{newline}",
        ]
        lines[end:end] = block
        return "".join(lines)

    block = [
        newline,
        f"[{runc_header}]{newline}",
        f'  runtime_type = "io.containerd.runc.v2"{newline}',
        newline,
        f"[{options_header}]{newline}",
        f"  SystemdCgroup = true{newline}",
    ]
    return "".join(lines + block)


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _unquote(raw: str) -> str:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return raw[1:-1]
    return raw


def set_string(text: str, table: tuple[str, ...], header: str, key: str, value: str) -> str:
    """Return ``text`` with ``key = "value"`` in ``[table]``: an existing key is rewritten only
    when its value differs, a missing key is added under the header, a missing table is
    appended. Every other line is kept byte for byte."""
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += newline
    key_re = re.compile(
        r"^(?P<indent>[ \t]*)" + re.escape(key) + r"[ \t]*=[ \t]*(?P<value>(\"[^\"]*\"|'[^']*'|[^#\s]*))"
    )
    section = _section(lines, table)
    if section is None:
        return "".join([*lines, newline, f"[{header}]{newline}", f"  {key} = {_toml_string(value)}{newline}"])
    start, end = section
    key_indent = None
    for i in range(start + 1, end):
        m = key_re.match(lines[i])
        if m:
            if _unquote(m.group("value")) == value:
                return "".join(lines)
            lines[i] = f"{m.group('indent')}{key} = {_toml_string(value)}{newline}"
            return "".join(lines)
        other = _ANY_KEY_RE.match(lines[i])
        if other and key_indent is None:
            key_indent = other.group("indent")
    header_indent = _TABLE_RE.match(lines[start].rstrip("\r\n")).group("indent")  # type: ignore[union-attr]
    indent = key_indent if key_indent is not None else header_indent + "  "
    lines.insert(start + 1, f"{indent}{key} = {_toml_string(value)}{newline}")
    return "".join(lines)


_IMPORTS_RE = re.compile(r"^[ \t]*imports[ \t]*=")
_STRING_RE = re.compile(r"\"((?:[^\"\\]|\\.)*)\"|'([^']*)'")


def _top_level_end(lines: list[str]) -> int:
    """Index of the first table header (the end of the top-level keys)."""
    tables = _tables(lines)
    return tables[0][0] if tables else len(lines)


def imports_of(text: str) -> list[str] | None:
    """The top-level ``imports`` entries (a one-line or multi-line array), or None without the key."""
    lines = str(text).splitlines(keepends=True)
    for i in range(_top_level_end(lines)):
        if _IMPORTS_RE.match(lines[i]):
            raw, j = lines[i].split("=", 1)[1], i
            while "]" not in raw.split("#", 1)[0] and j + 1 < len(lines):
                j += 1
                raw += lines[j]
            return [a if a else b for a, b in _STRING_RE.findall(raw)]
    return None


def ensure_import(text: str, entry: str) -> str:
    """Return ``text`` whose top-level ``imports`` contains ``entry``: unchanged when it does, the
    array rewritten on one line (every entry kept, ``entry`` last) when it does not, the key added
    after ``version = N`` when there is none."""
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += newline
    current = imports_of(text)
    if current is not None and entry in current:
        return "".join(lines)
    value = "imports = [" + ", ".join(_toml_string(e) for e in [*(current or []), entry]) + "]" + newline
    end = _top_level_end(lines)
    for i in range(end):
        if _IMPORTS_RE.match(lines[i]):
            j = i
            while "]" not in lines[j].split("#", 1)[0] and j + 1 < end:
                j += 1
            lines[i : j + 1] = [value]
            return "".join(lines)
    at = next((i + 1 for i in range(end) if _VERSION_RE.match(lines[i])), 0)
    lines.insert(at, value)
    return "".join(lines)


def runtime_config(text: str, sandbox_image: str = "", runc_binary: str = "", drop_in_glob: str = "") -> str:
    """``SystemdCgroup = true`` for runc, the sandbox image (when given), runc's ``BinaryName``
    (when given: runc from a release archive is not the one on PATH) and ``drop_in_glob`` among
    the imports (when given)."""
    text = containerd_systemd_cgroup(text)
    if drop_in_glob:
        text = ensure_import(text, drop_in_glob)
    version = config_version(text)
    assert version is not None  # containerd_systemd_cgroup refused anything else
    if sandbox_image:
        table, header, key = SANDBOX_KEYS[version]
        text = set_string(text, table, header, key, sandbox_image)
    if runc_binary:
        runc_key, runc_header = RUNC_TABLES[version]
        text = set_string(text, (*runc_key, "options"), f"{runc_header}.options", "BinaryName", runc_binary)
    return text


def sandbox_image(text: str) -> str | None:
    """The sandbox image a config pins, or None (containerd's built-in default)."""
    version = config_version(str(text))
    if version not in SANDBOX_KEYS:
        return None
    table, _, key = SANDBOX_KEYS[version]
    lines = str(text).splitlines(keepends=True)
    section = _section(lines, table)
    if section is None:
        return None
    key_re = re.compile(r"^[ \t]*" + re.escape(key) + r"[ \t]*=[ \t]*(?P<value>(\"[^\"]*\"|'[^']*'|[^#\s]*))")
    for i in range(section[0] + 1, section[1]):
        m = key_re.match(lines[i])
        if m:
            return _unquote(m.group("value"))
    return None


def needs_default(text: str, expected_version: int | str | None = None) -> bool:
    """True when the file should be replaced by ``containerd config default``.

    That is a file without a version 2/3 header (version 1 or empty), or a distribution stub
    without the CRI runc runtime table. Debian 12 ships such a stub (version 2, only the CNI
    section, ``bin_dir = "/usr/lib/cni"``): kept, containerd would look for CNI plugins where
    neither kubernetes-cni nor Flannel put them (/opt/cni/bin). With ``expected_version``
    (3 for containerd 2.0-2.2, 4 for 2.3) a file of another version is replaced too: a version 2
    file left by the distribution's containerd 1.x before gpustack installed containerd 2, or the
    version 3 file of containerd 2.2 when 2.3 replaces it.
    """
    version = config_version(str(text))
    if version not in RUNC_TABLES:
        return True
    if expected_version and version != int(expected_version):
        return True
    return _section(str(text).splitlines(keepends=True), RUNC_TABLES[version][0]) is None


def systemd_cgroup_enabled(text: str) -> bool | None:
    """True/False for runc's SystemdCgroup in ``text``; None when the version is unknown."""
    version = config_version(str(text))
    if version not in RUNC_TABLES:
        return None
    lines = str(text).splitlines(keepends=True)
    section = _section(lines, (*RUNC_TABLES[version][0], "options"))
    if section is None:
        return False
    for i in range(section[0] + 1, section[1]):
        m = _KEY_RE.match(lines[i])
        if m:
            return m.group("value") == "true"
    return False


class FilterModule:
    """containerd configuration filters."""

    def filters(self) -> dict[str, object]:
        return {
            "containerd_systemd_cgroup": containerd_systemd_cgroup,
            "containerd_systemd_cgroup_enabled": systemd_cgroup_enabled,
            "containerd_config_needs_default": needs_default,
            "containerd_runtime_config": runtime_config,
            "containerd_sandbox_image": sandbox_image,
            "containerd_imports": imports_of,
        }
