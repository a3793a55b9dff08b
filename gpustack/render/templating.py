"""One jinja2 setup (StrictUndefined, block trimming, no autoescape) for every template gpustack
ships: gpustack/templates/ (manifests, kubeadm config) and values/ (Helm values)."""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2

from gpustack.paths import resource_dir


@cache
def environment(directory: str = "templates") -> jinja2.Environment:
    """The environment over one shipped directory (see :func:`gpustack.paths.resource_dir`)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir(directory))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render_template(name: str, **context: Any) -> str:
    return environment().get_template(name).render(**context)
