"""``gpustack version``: gpustack's version and the pinned component versions."""

from __future__ import annotations

from gpustack import __version__
from gpustack.cli.options import console_for


def version() -> None:
    """Print gpustack's version and the pinned component versions."""
    from gpustack.config import pins

    console = console_for()
    console.print(f"gpustack {__version__}")
    rows = [
        ["kubernetes", ", ".join(pins.KUBERNETES.values()) + f" (default {pins.KUBERNETES[pins.KUBERNETES_DEFAULT]})"],
        ["flannel", pins.FLANNEL_VERSION],
        ["helm", pins.HELM_VERSION],
    ]
    rows += [[c.name, c.version] for c in pins.CHARTS.values()]
    console.table("pins", ["component", "version"], rows)
