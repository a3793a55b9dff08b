"""gpustack's modules and module_utils import gpustack's module_utils at module level only.

Under mitogen (the stages' strategy, docs/decisions.md "Mitogen for the stages") only the module_utils a module
imports at its top level are shipped to the host: mitogen scans the module's top-level code for imports, not the
bodies of its functions. An import inside a function works in the sandbox tests (plain Ansible) and fails on a real
host with ``No module named 'ansible.module_utils.gpustack_...'`` -- which the test bed found in the kernel-hold
stage (2026-11-29)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PLAYBOOKS = Path(__file__).resolve().parents[3] / "playbooks"
SOURCES = sorted([*PLAYBOOKS.glob("library/*.py"), *PLAYBOOKS.glob("module_utils/*.py")])


def nested_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    for node in tree.body:  # `if TYPE_CHECKING:` / try-blocks at module level count as module level
        if isinstance(node, (ast.If, ast.Try)):
            top |= {id(n) for n in ast.walk(node)}
    return [f"{path.name}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ansible.module_utils.gpustack")
            and id(node) not in top]  # fmt: skip


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_gpustack_module_utils_are_imported_at_module_level(path: Path) -> None:
    assert nested_imports(path) == []


def test_the_rule_finds_an_import_inside_a_function(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from ansible.module_utils.gpustack_host_parsers import parse_dpkg_status\n")
    assert nested_imports(bad) == ["bad.py:2"]
