"""Shipped files are found one way: gpustack.paths.resource_dir / resource_file."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gpustack
from gpustack.paths import BESIDE, INSIDE, resource_dir, resource_file


@pytest.mark.parametrize("name", BESIDE + INSIDE)
def test_every_shipped_directory_is_found(name: str) -> None:
    assert resource_dir(name).is_dir()


def test_a_file_under_a_shipped_directory() -> None:
    assert resource_file("templates", "monitoring", "gpu-alerts.rules.yaml").is_file()
    assert resource_file("playbooks", "site.yml").is_file()


def test_an_unknown_directory_is_refused() -> None:
    with pytest.raises(ValueError, match="not a directory gpustack ships"):
        resource_dir("etc")


def test_no_module_finds_shipped_files_another_way() -> None:
    """No __file__ arithmetic, importlib.resources or jinja2.PackageLoader outside gpustack/paths.py."""
    pkg = Path(gpustack.__file__).parent
    offenders = []
    for path in pkg.rglob("*.py"):
        if path.name == "paths.py" and path.parent == pkg:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "__file__":
                offenders.append(f"{path.relative_to(pkg)}: __file__")
            elif isinstance(node, ast.Attribute) and (
                node.attr == "PackageLoader"
                or (node.attr == "files" and isinstance(node.value, ast.Name) and node.value.id == "resources")
            ):
                offenders.append(f"{path.relative_to(pkg)}: {node.attr}")
    assert not offenders
