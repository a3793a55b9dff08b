"""The commented example config written by ``gpustack init``."""

from __future__ import annotations

from gpustack.paths import resource_file


def example_yaml() -> str:
    return resource_file("templates", "gpustack.example.yaml").read_text(encoding="utf-8")
