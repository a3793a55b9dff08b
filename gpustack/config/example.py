"""The commented example config written by ``gpustack init``."""

from __future__ import annotations

from importlib import resources


def example_yaml() -> str:
    return resources.files("gpustack").joinpath("templates/gpustack.example.yaml").read_text(encoding="utf-8")
