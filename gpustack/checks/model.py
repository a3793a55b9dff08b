"""The finding type every check produces."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Status = Literal["pass", "warn", "fail", "skip"]


@dataclass(frozen=True)
class Finding:
    id: str  # stable, e.g. "P06-swap"
    layer: str  # host, runtime, kubernetes, gpu-operator, monitoring, grafana
    status: Status
    summary: str
    host: str | None = None
    evidence: str = ""
    fix: str = ""
    tags: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        """The id without its number: 'P06-swap' -> 'swap'."""
        return self.id.split("-", 1)[1] if "-" in self.id else self.id
