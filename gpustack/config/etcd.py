"""The ``etcd`` section: etcd snapshots (docs/configuration.md, docs/lifecycle.md "Day 365").

``snapshots.interval`` and ``snapshots.keep`` drive the ``gpustack-etcd-snapshot`` systemd timer on every control
plane (defaults as RKE2's: twice a day, keep 5); ``snapshots.copy_to`` is an optional second directory on each
control plane (a mounted share) that gets a copy of every snapshot; ``snapshots.local_keep`` is how many snapshots
``gpustack etcd snapshot`` and the snapshots before ``upgrade``, ``node remove`` and ``reset`` keep on this machine.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from gpustack.config.certificates import duration_seconds
from gpustack.config.fields import StrictModel

#: the timer's shortest interval: a snapshot of a large etcd takes a while and every one is kept ``keep`` times
MIN_INTERVAL_SECONDS = 15 * 60


class EtcdSnapshots(StrictModel):
    scheduled: bool = Field(
        default=True, description="a systemd timer on every control plane takes a snapshot every `interval`"
    )
    interval: str = Field(default="12h", description="time between scheduled snapshots (m, h, d or w; 15m or more)")
    keep: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=5, description="snapshots kept on each control plane (and in copy_to); older ones are deleted"
    )
    copy_to: str = Field(
        default="",
        description="a directory on each control plane (e.g. a mounted share) that also gets every scheduled "
        "snapshot; empty: none",
    )
    local_keep: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=10, description="snapshots kept on this machine (<state>/clusters/<name>/etcd-snapshots)"
    )

    @field_validator("interval")
    @classmethod
    def _interval(cls, v: str) -> str:
        if duration_seconds(v) < MIN_INTERVAL_SECONDS:
            raise ValueError(f"{v!r} is shorter than 15 minutes")
        return v

    @field_validator("copy_to")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if v and (not v.startswith("/") or any(c in v for c in "\n\r\0")):
            raise ValueError(f"{v!r}: copy_to must be an absolute path on the control planes")
        return v.rstrip("/") if v != "/" else v

    @property
    def interval_seconds(self) -> int:
        return duration_seconds(self.interval)


class Etcd(StrictModel):
    snapshots: EtcdSnapshots = EtcdSnapshots()
