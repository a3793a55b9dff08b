"""The real binaries the tests render and lint with are what tests/realbin promises."""

from __future__ import annotations

import subprocess

from gpustack.config import pins
from tests.realbin import RealBins, helm_version


def test_helm_is_a_real_helm_of_the_pinned_minor(real_bins: RealBins) -> None:
    minor = ".".join(pins.HELM_VERSION.split(".")[:2])
    assert helm_version(real_bins.helm).startswith(f"v{minor}."), "tests/realbin must run the pinned Helm minor"


def test_kubectl_is_a_real_kubectl_1_36(real_bins: RealBins) -> None:
    out = subprocess.run(
        [str(real_bins.kubectl), "version", "--client", "-o", "json"], capture_output=True, text=True, check=True
    )
    assert '"minor": "36"' in out.stdout
