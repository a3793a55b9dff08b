"""One jinja2 environment (StrictUndefined) for every template gpustack ships."""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2


@cache
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("gpustack", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render_template(name: str, **context: Any) -> str:
    return _env().get_template(name).render(**context)
