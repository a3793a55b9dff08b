"""The rules of the house (docs/architecture.md, docs/decisions.md "The layout"), kept by reading the code:

- no import cycle among gpustack's modules (from the AST of every import, lazy ones included);
- no module over 500 lines (gpustack/, the Python the playbooks ship: library/, module_utils/,
  filter_plugins/, and the test helpers under tests/: every module not named test_*.py, a few capped where
  they stood); at most 8 modules at the package root;
- dependencies point one way: the checks, renderers, runners and config never import the commands,
  the engine or the CLI; the engine never imports a command; a command never imports another;
- one name for a setting from the config to the host: the playbooks read every variable Python
  sends under the name Python sends it (no role default or play variable renames a ``gpustack_*``
  one), every one is read somewhere, and a document Python renders reaches the host unrendered by
  Ansible's Jinja (written with ``copy: content:``, holding no Jinja delimiter).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import gpustack
from gpustack import commands
from gpustack.config.model import Config, Node
from gpustack.render.ansible import extravars, inventory

PACKAGE = Path(gpustack.__file__).parent
REPO = PACKAGE.parent
PLAYBOOKS = REPO / "playbooks"
MAX_LINES = 500
MAX_ROOT_MODULES = 8


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        if "__pycache__" in path.parts or "_data" in path.parts:
            continue
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports(module: str, path: Path) -> set[str]:
    """The gpustack modules ``module`` imports anywhere in its file (a function's lazy import too)."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {_resolve(a.name) for a in node.names if a.name.startswith("gpustack")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if base.startswith("gpustack"):
                for a in node.names:
                    full = f"{base}.{a.name}"
                    found.add(full if full in MODULES else _resolve(base))
    return {m for m in found if m and m != module}


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in GRAPH[v]:
                found.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle() -> None:
    assert _cycles() == []


def test_the_cycle_finder_finds_a_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule above is only as good as the finder: a planted circle must be reported."""
    planted = {**GRAPH, "gpustack.errors": GRAPH["gpustack.errors"] | {"gpustack.console"}}
    planted["gpustack.console"] = GRAPH["gpustack.console"] | {"gpustack.errors"}
    monkeypatch.setitem(globals(), "GRAPH", planted)
    assert ["gpustack.console", "gpustack.errors"] in _cycles()


TESTS = REPO / "tests"
#: test helpers over the limit when the rule reached tests/ (2026-11-27), each capped at its size then: they may
#: shrink, never grow; split one and drop it here. Shared by most tests (and edited by parallel work), so each
#: split is its own change.
TEST_HELPERS_OVER = {
    "tests/fakes/kube_api.py": 1463,
    "tests/fakes/scenarios.py": 776,
    "tests/testbed/hosts.py": 618,
    "tests/testbed/services.py": 643,
}


def _test_helpers() -> Iterator[Path]:
    """The Python under tests/ that is not a test module: fakes, harnesses, fixtures' builders, conftest.py."""
    for path in TESTS.rglob("*.py"):
        if "__pycache__" not in path.parts and not path.name.startswith("test_"):
            yield path


def _python_files() -> Iterator[Path]:
    yield from MODULES.values()
    for sub in ("library", "module_utils", "filter_plugins"):
        yield from (PLAYBOOKS / sub).glob("*.py")
    yield from _test_helpers()


@pytest.mark.parametrize("path", sorted(_python_files()), ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_over_500_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    limit = TEST_HELPERS_OVER.get(str(path.relative_to(REPO)), MAX_LINES)
    assert lines <= limit, f"{path.relative_to(REPO)}: {lines} lines (split it by what its parts do)"


def test_the_size_rule_reaches_test_helpers_and_its_exceptions_still_exceed_it() -> None:
    helpers = {str(p.relative_to(REPO)) for p in _test_helpers()}
    assert {"tests/prometheus/replay_exporter.py", "tests/fakes/kube_api.py", "tests/conftest.py"} <= helpers
    assert not any(Path(h).name.startswith("test_") for h in helpers)
    for name in TEST_HELPERS_OVER:  # an exception that fits the rule again must leave the list
        assert len((REPO / name).read_text(encoding="utf-8").splitlines()) > MAX_LINES, name


def test_few_modules_at_the_package_root() -> None:
    root = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(root) <= MAX_ROOT_MODULES, root


#: packages that sit below the commands and the engine: they never import them (nor the CLI)
LOWER = ("checks", "config", "diag", "diagnose", "health", "monitoring", "render", "report", "runners")


def _in(module: str, *packages: str) -> bool:
    return any(module == f"gpustack.{p}" or module.startswith(f"gpustack.{p}.") for p in packages)


def test_dependencies_point_one_way() -> None:
    wrong: list[str] = []
    for module, targets in sorted(GRAPH.items()):
        for target in sorted(targets):
            if _in(target, "cli") and not _in(module, "cli") and module != "gpustack.__main__":
                wrong.append(f"{module} -> {target}: only the CLI imports the CLI")
            elif _in(module, *LOWER) and _in(target, "commands", "engine", "cluster", "bundle"):
                wrong.append(f"{module} -> {target}: checks, renderers, runners and config sit below the installer")
            elif _in(module, "engine") and _in(target, "commands", "cluster"):
                wrong.append(f"{module} -> {target}: the engine runs any plan and knows no command")
            elif _in(module, "cluster") and _in(target, "commands"):
                wrong.append(f"{module} -> {target}: the cluster layer serves the commands")
            elif _in(module, "commands") and _in(target, "commands") and "gpustack.commands" not in (module, target):
                wrong.append(f"{module} -> {target}: a command never imports another (share through cluster/, engine/)")
    assert not wrong, "\n".join(wrong)


def test_every_command_module_defines_its_plan() -> None:
    modules = {p.stem for p in (PACKAGE / "commands").glob("*.py") if p.stem != "__init__"}
    assert len(commands.SEQUENCES) == len(modules)
    for plan in commands.SEQUENCES.values():
        assert plan.stages and (PLAYBOOKS / plan.playbook).is_file(), plan.command


# --- one name for a setting, from the config to the host ---------------------------------------------

CONFIGS = [
    Config(nodes=[Node(name="cp1", address="10.0.0.2", role="control-plane")]),
    Config.model_validate(
        {
            "nodes": [
                {"name": "cp1", "address": "10.0.0.2", "role": "control-plane"},
                {"name": "cp2", "address": "10.0.0.3", "role": "control-plane"},
                {"name": "cp3", "address": "10.0.0.4", "role": "control-plane"},
                {"name": "w1", "address": "10.0.0.5", "user": "ubuntu"},
            ],
            "cluster": {"virtual_ip": "10.0.0.100"},
            "proxy": {"http": "http://proxy:3128", "https": "http://proxy:3128"},
        }
    ),
]
#: variables the engine itself adds to a run (gpustack/engine/stages.py)
ENGINE_VARS = {"gpustack_stage_hosts", "gpustack_preflight_sources"}


def _sent(cfg: Config) -> dict[str, Any]:
    """Every gpustack_* variable Python sends the playbooks for ``cfg``: extra vars and host vars."""
    sent = dict(extravars(cfg, kubeconfig_dest=Path("/k")))
    for group in inventory(cfg)["all"]["children"].values():
        for hostvars in group["hosts"].values():
            sent.update({k: v for k, v in hostvars.items() if k.startswith("gpustack_")})
    return sent


def _playbook_files() -> list[Path]:
    return sorted(p for p in PLAYBOOKS.rglob("*") if p.is_file() and p.suffix in (".yml", ".yaml", ".j2"))


#: a value that is nothing but another gpustack_* variable, with or without a default
ALIAS = re.compile(r"^\{\{\s*(gpustack_[a-z0-9_]+)\s*(\|\s*default\(.*\))?\s*\}\}$")


def _variable_files() -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, {name: value}) for every place the playbooks define variables."""
    for path in sorted(PLAYBOOKS.glob("roles/*/defaults/*.yml")) + sorted(PLAYBOOKS.glob("roles/*/vars/*.yml")):
        yield str(path.relative_to(PLAYBOOKS)), yaml.safe_load(path.read_text()) or {}
    for path in sorted(PLAYBOOKS.glob("group_vars/**/*.yml")):
        yield str(path.relative_to(PLAYBOOKS)), yaml.safe_load(path.read_text()) or {}
    for path in sorted(PLAYBOOKS.glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            yield f"{path.name} play {play.get('name')}", play.get("vars") or {}
            for role in play.get("roles") or []:
                if isinstance(role, dict):
                    yield f"{path.name} role {role.get('role')}", role.get("vars") or {}


def test_no_playbook_variable_renames_a_gpustack_variable() -> None:
    """Kubespray carries kube_version from the inventory into every role under that one name; a role
    default ``control_plane_x: "{{ gpustack_x }}"`` is a second name two files can disagree on."""
    renamed = [
        f"{where}: {name} is {value.strip()}"
        for where, variables in _variable_files()
        for name, value in variables.items()
        if isinstance(value, str) and ALIAS.match(value.strip())
    ]
    assert not renamed, "read the gpustack_* variable itself:\n" + "\n".join(renamed)


def test_the_alias_rule_sees_an_alias() -> None:
    assert ALIAS.match("{{ gpustack_proxy_env | default({}) }}") and ALIAS.match("{{ gpustack_node_name }}")
    assert not ALIAS.match("{{ gpustack_controller_bin_dir }}/helm")
    assert not ALIAS.match("{{ 3 if gpustack_containerd_source == 'release' else 0 }}")


def test_every_variable_python_sends_is_read_under_its_name() -> None:
    text = "\n".join(p.read_text() for p in _playbook_files())
    sent = set().union(*(_sent(cfg) for cfg in CONFIGS)) | ENGINE_VARS
    sent |= {name for plan in commands.SEQUENCES.values() for name in plan.extravars}
    unread = sorted(v for v in sent if not re.search(rf"\b{v}\b", text))
    assert not unread, f"sent by Python, read by no playbook or role (drop it, or read it): {unread}"


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["single", "ha-proxy"])
def test_what_python_renders_reaches_the_host_unrendered(cfg: Config) -> None:
    """A file is rendered by one engine: the documents Python renders (the kubeadm config, Flannel's
    manifest) hold no Jinja for Ansible to render again, and are written with ``copy: content:``."""
    sent = _sent(cfg)
    jinja = [k for k, v in sent.items() if any(d in s for s in _strings(v) for d in ("{{", "{%", "{#"))]
    assert not jinja, f"Jinja delimiters in what Python sends: {jinja}"
    documents = {k for k, v in sent.items() if isinstance(v, str) and "\n" in v}
    assert documents >= {"gpustack_kubeadm_config", "gpustack_flannel_manifest"}
    for name in documents:
        uses = [
            (path, line.strip())
            for path in _playbook_files()
            for line in path.read_text().splitlines()
            if re.search(rf"\b{name}\b", line)
        ]
        assert uses and all(line == f'content: "{{{{ {name} }}}}"' for _, line in uses), (name, uses)
        assert all(path.suffix != ".j2" for path, _ in uses), name
