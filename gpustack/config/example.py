"""The commented example config written by ``gpustack init``."""

from __future__ import annotations

from pathlib import Path

from gpustack.errors import UsageError
from gpustack.paths import resource_file, write_file


def example_yaml() -> str:
    return resource_file("templates", "gpustack.example.yaml").read_text(encoding="utf-8")


def write_example(path: Path, *, force: bool = False) -> Path:
    """Write the example to ``path``; a UsageError (exit 2, nothing written) when the file exists
    (without ``force``), its directory is missing or not writable, or ``path`` is a directory."""
    if path.is_dir():
        raise UsageError(f"{path} is a directory", hint=f"name a file, e.g. {path / 'gpustack.yaml'}")
    if path.exists() and not force:
        raise UsageError(f"{path} exists; pass --force to overwrite it")
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(
            f"cannot write {path}: directory {parent} does not exist", hint=f"create it first (mkdir -p {parent})"
        )
    try:
        write_file(path, example_yaml(), mode=None)  # your file: your umask
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    return path
