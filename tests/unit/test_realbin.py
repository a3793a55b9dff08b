"""The real binaries the tests render and lint with are what tests/realbin promises."""

from __future__ import annotations

import subprocess

from tests.realbin import RealBins, helm_version


def test_helm_is_a_real_helm_4_2(real_bins: RealBins) -> None:
    assert helm_version(real_bins.helm).startswith("v4.2.")


def test_kubectl_is_a_real_kubectl_1_36(real_bins: RealBins) -> None:
    out = subprocess.run(
        [str(real_bins.kubectl), "version", "--client", "-o", "json"], capture_output=True, text=True, check=True
    )
    assert '"minor": "36"' in out.stdout
