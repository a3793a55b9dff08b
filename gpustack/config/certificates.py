"""The ``certificates`` section: how long kubeadm's certificates live, and when gpustack starts to warn.

One name per setting from config to host: ``validity`` is kubeadm v1beta4 ``ClusterConfiguration``
``certificateValidityPeriod`` (every leaf certificate and kubeconfig kubeadm signs), ``ca_validity`` is
``caCertificateValidityPeriod``; the defaults are kubeadm's own (``cmd/kubeadm/app/constants/constants.go``:
``CertificateValidityPeriod = 365 * 24h``, ``CACertificateValidityPeriod = 10 * 365 * 24h``).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from gpustack.config.fields import DURATION_FORM, StrictModel

CERT_DURATION_RE = re.compile(r"^([0-9]+)(m|h|d|w|y)$")
SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
MIN_SECONDS = 60


def duration_seconds(text: str) -> int:
    """``15d`` -> 1296000 (a year is 365 days, as kubeadm counts it)."""
    m = CERT_DURATION_RE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not {DURATION_FORM.replace('ms, s, ', '')}")
    return int(m.group(1)) * SECONDS[m.group(2)]


def go_duration(text: str) -> str:
    """The duration as Go's ``time.Duration`` prints it (kubeadm's form): ``365d`` -> ``8760h0m0s``."""
    seconds = duration_seconds(text)
    return f"{seconds // 3600}h{seconds % 3600 // 60}m{seconds % 60}s"


class Certificates(StrictModel):
    validity: str = Field(
        default="365d",
        description="lifetime of the certificates and kubeconfigs kubeadm signs (kubeadm certificateValidityPeriod)",
    )
    ca_validity: str = Field(
        default="3650d", description="lifetime of the cluster's CAs (kubeadm caCertificateValidityPeriod)"
    )
    warn_days: Annotated[int, Field(ge=1)] = Field(
        default=90, description="doctor and status warn when a certificate expires within this many days"
    )
    fail_days: Annotated[int, Field(ge=0)] = Field(
        default=30, description="doctor fails when a certificate expires within this many days (or has expired)"
    )

    @field_validator("validity", "ca_validity")
    @classmethod
    def _duration(cls, v: str) -> str:
        if duration_seconds(v) < MIN_SECONDS:
            raise ValueError(f"{v!r} is shorter than a minute")
        return v

    @model_validator(mode="after")
    def _order(self) -> Certificates:
        if duration_seconds(self.validity) > duration_seconds(self.ca_validity):
            raise ValueError(
                f"validity {self.validity} outlives ca_validity {self.ca_validity}: a certificate cannot be valid "
                "after the CA that signed it"
            )
        if self.fail_days >= self.warn_days:
            raise ValueError(f"fail_days ({self.fail_days}) must be below warn_days ({self.warn_days})")
        return self
