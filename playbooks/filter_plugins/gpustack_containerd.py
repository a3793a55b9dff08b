"""Ansible filter ``containerd_systemd_cgroup``: set ``SystemdCgroup = true`` for runc.

kubeadm configures the kubelet with the systemd cgroup driver; containerd's runc must use the
same driver or control-plane pods restart in a loop. The edit is section-aware (a
``SystemdCgroup`` key of another runtime, e.g. one nvidia-ctk added, is never touched) and
minimal: every other line is kept byte for byte, so a converged file is returned unchanged.

Supported: config ``version = 2`` (containerd 1.x, ``[plugins."io.containerd.grpc.v1.cri"...]``)
and ``version = 3`` (containerd 2.x, ``[plugins.'io.containerd.cri.v1.runtime'...]``).
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
            f"containerd config version {version!r} is not supported (expected 2 or 3); "
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


def needs_default(text: str) -> bool:
    """True when the file should be replaced by ``containerd config default``.

    That is a file without a version 2/3 header (version 1 or empty), or a distribution stub
    without the CRI runc runtime table. Debian 12 ships such a stub (version 2, only the CNI
    section, ``bin_dir = "/usr/lib/cni"``): kept, containerd would look for CNI plugins where
    neither kubernetes-cni nor Flannel put them (/opt/cni/bin).
    """
    version = config_version(str(text))
    if version not in RUNC_TABLES:
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
        }
