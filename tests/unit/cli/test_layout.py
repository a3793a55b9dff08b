"""The CLI's shape: one module per command, registered in app.py, no module importing app back."""

from __future__ import annotations

import ast
from pathlib import Path

import typer.main

import gpustack.cli
from gpustack.cli.app import app
from gpustack.cli.options import CheckArgs

CLI = Path(gpustack.cli.__file__).parent
SHARED = {"__init__", "app", "options", "diagnose"}  # not commands


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_no_module_imports_app_back() -> None:
    for path in CLI.glob("*.py"):
        if path.stem != "app":
            assert "gpustack.cli.app" not in _imports(path), path.name


def test_every_command_module_is_registered_and_every_command_has_a_module() -> None:
    registered = {c.callback.__module__.rsplit(".", 1)[1] for c in app.registered_commands if c.callback}
    # command groups (`gpustack bundle list`): one module holds the group's Typer
    for group in app.registered_groups:
        assert group.typer_instance is not None
        callbacks = [c.callback for c in group.typer_instance.registered_commands if c.callback]
        registered |= {cb.__module__.rsplit(".", 1)[1] for cb in callbacks}
    modules = {p.stem for p in CLI.glob("*.py")} - SHARED
    assert registered == modules


def _options(name: str) -> set[str]:
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    return {p.name for p in command.params}


def test_verify_and_doctor_share_one_definition_of_their_options() -> None:
    shared = set(CheckArgs.__dataclass_fields__)
    assert shared <= _options("verify") and shared <= _options("doctor")
    assert _options("verify") - shared == {"load", "no_workload"}
    assert _options("doctor") - shared == {"fix", "yes", "bundle"}
