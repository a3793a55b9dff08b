"""The pinned Ansible collections (gpustack/config/pins.py), looked up where ``ansible-playbook`` will.

The playbooks use modules of ``ansible.posix`` and ``community.general``, which ansible-core alone
does not ship; ``python -m gpustack.bootstrap collections`` installs them into this interpreter's
site-packages (the launcher scripts/gpustack and scripts/test.sh run it). Without them a run fails
half-way, inside Ansible ("couldn't resolve module/action 'community.general.modprobe'"), after it has
changed hosts. The engine therefore checks them before a run touches any host
(:func:`require_pinned`, called by ``gpustack.engine.run.run``) and refuses the run, exit 2, with the
command to run.

Where ansible-core 2.19 looks (ansible/config/base.yml ``COLLECTIONS_PATHS``,
``COLLECTIONS_SCAN_SYS_PATH``; ansible/utils/collection_loader/_collection_finder.py): the configured
paths (``ANSIBLE_COLLECTIONS_PATH``, else ``collections_path`` of an ansible.cfg, else
``$ANSIBLE_HOME/collections:/usr/share/ansible/collections`` with ``ANSIBLE_HOME`` defaulting to
``~/.ansible``), then every ``sys.path`` entry of the Python running ansible-playbook; a path ending in
``ansible_collections`` counts as its parent; the first root holding ``ansible_collections/<ns>/<name>``
provides the collection. So the check and the run cannot disagree, gpustack hands ansible-playbook the
list it checked (:func:`search_path`) as ``ANSIBLE_COLLECTIONS_PATH`` with sys.path scanning off
(``gpustack.runners.ansible.ansible_env``): an ansible.cfg elsewhere cannot change it. The site
directory bootstrap installs into comes first, so the pinned versions win over another copy in
``~/.ansible/collections``.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpustack import bootstrap
from gpustack.config import pins
from gpustack.errors import ConfigError

#: ansible-core's default for ANSIBLE_HOME, and the system-wide root of its default collections path
DEFAULT_ANSIBLE_HOME = "~/.ansible"
SYSTEM_COLLECTIONS = "/usr/share/ansible/collections"


def _expandvars(path: str, environ: Mapping[str, str]) -> str:
    """``$NAME`` and ``${NAME}`` from ``environ``; unknown names stay as they are (os.path.expandvars)."""
    return re.sub(r"\$(\w+)|\$\{([^}]*)\}", lambda m: environ.get(m.group(1) or m.group(2), m.group(0)), path)


def _root(entry: str, environ: Mapping[str, str], home: str, cwd: str) -> str:
    """One path entry as ansible resolves it (ansible/utils/path.py ``unfrackpath``): variables and
    ``~`` expanded, made absolute against the working directory, normalised; a path ending in
    ``ansible_collections`` taken as its parent (as the collection finder does)."""
    path = _expandvars(entry, environ)
    if path == "~" or path.startswith("~/"):
        path = home + path[1:]
    path = os.path.normpath(os.path.join(cwd, path))
    return os.path.dirname(path) if os.path.basename(path) == "ansible_collections" else path


def search_path(
    environ: Mapping[str, str], *, site: Path, sys_path: Sequence[str], home: str, cwd: str
) -> tuple[Path, ...]:
    """The collection roots a gpustack playbook run searches, in order (pure: no file is read).

    ``site`` first (where bootstrap installs the pins), then ``ANSIBLE_COLLECTIONS_PATH`` or
    ansible-core's default (``$ANSIBLE_HOME/collections`` and /usr/share/ansible/collections), then
    ``sys_path`` (the interpreter's; ansible-playbook runs with it). Duplicates and empty entries
    are dropped."""
    configured = environ.get("ANSIBLE_COLLECTIONS_PATH")
    if configured is None:
        ansible_home = environ.get("ANSIBLE_HOME") or DEFAULT_ANSIBLE_HOME
        configured = f"{ansible_home}/collections:{SYSTEM_COLLECTIONS}"
    entries = [str(site), *configured.split(os.pathsep), *sys_path]
    roots = [_root(e, environ, home, cwd) for e in entries if e]
    return tuple(Path(r) for r in dict.fromkeys(roots))


def default_search_path() -> tuple[Path, ...]:
    """:func:`search_path` for this process: its environment, site-packages and sys.path."""
    return search_path(
        os.environ,
        site=bootstrap.site_dir(),
        # only entries that hold collections (ansible's finder drops the others too)
        sys_path=[p for p in sys.path if p and os.path.isdir(os.path.join(p, "ansible_collections"))],
        home=os.path.expanduser("~"),
        cwd=os.getcwd(),
    )


@dataclass(frozen=True)
class Located:
    """Where a pinned collection was found first (``root`` None: nowhere) and its version there."""

    fqcn: str
    pinned: str
    root: Path | None = None
    version: str | None = None

    @property
    def ok(self) -> bool:
        return self.root is not None and self.version == self.pinned

    def describe(self) -> str:
        if self.root is None:
            return f"{self.fqcn} {self.pinned}: not installed"
        found = f"version {self.version}" if self.version else "a copy without a version (no MANIFEST.json)"
        return f"{self.fqcn} {self.pinned}: {found} in {self.root / 'ansible_collections'}"


def locate(fqcn: str, pinned: str, roots: Sequence[Path]) -> Located:
    """The copy of ``fqcn`` ansible-playbook would load from ``roots`` (the first that holds it)."""
    ns, name = fqcn.split(".")
    for root in roots:
        if (root / "ansible_collections" / ns / name).is_dir():
            return Located(fqcn, pinned, root, bootstrap.installed_version(fqcn, root))
    return Located(fqcn, pinned)


def survey(roots: Sequence[Path], wanted: Mapping[str, str] = pins.ANSIBLE_COLLECTIONS) -> list[Located]:
    return [locate(fqcn, version, roots) for fqcn, version in wanted.items()]


def install_command(python: str = sys.executable) -> str:
    return f"{shlex.quote(python)} -m gpustack.bootstrap collections"


def require_pinned(roots: Sequence[Path] | None = None, *, python: str = sys.executable) -> tuple[Path, ...]:
    """The search path, once every pinned collection is what ansible-playbook will load from it;
    else :class:`ConfigError` (exit 2) naming each problem and the command that installs the pins."""
    roots = default_search_path() if roots is None else tuple(roots)
    bad = [found for found in survey(roots) if not found.ok]
    if bad:
        raise ConfigError(
            "the Ansible collections the playbooks need are missing or at another version: "
            + "; ".join(found.describe() for found in bad)
            + ". Nothing was changed on any host.",
            hint=f"install the pinned versions (a hash-checked download from PyPI), then run the command again:\n"
            f"  {install_command(python)}\n"
            f"(scripts/gpustack, the launcher, does this on its first run)",
        )
    return roots
