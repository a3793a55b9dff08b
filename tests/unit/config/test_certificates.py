"""gpustack/config/certificates.py: the ``certificates`` section and what it renders into kubeadm's configuration."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from gpustack.config.certificates import Certificates, duration_seconds, go_duration
from gpustack.config.model import Config
from gpustack.render.kubeadm import render_init_config


def test_durations_in_kubeadms_form() -> None:
    assert go_duration("365d") == "8760h0m0s"  # kubeadm's CertificateValidityPeriod
    assert go_duration("3650d") == "87600h0m0s"  # CACertificateValidityPeriod
    assert go_duration("10m") == "0h10m0s" and go_duration("2h") == "2h0m0s" and go_duration("1y") == "8760h0m0s"
    assert duration_seconds("2w") == 14 * 86400


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"validity": "30s"}, "is not a number and a unit"),
        ({"validity": "1 d"}, "is not a number and a unit"),
        ({"validity": "0m"}, "shorter than a minute"),
        ({"validity": "20y"}, "outlives ca_validity 3650d"),
        ({"warn_days": 30, "fail_days": 30}, "fail_days (30) must be below warn_days (30)"),
        ({"warn_days": 0}, "greater than or equal to 1"),
    ],
)
def test_refused(section: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        Certificates.model_validate(section)
    assert message in str(info.value)


def test_rendered_into_the_cluster_configuration() -> None:
    cfg = Config.model_validate({"nodes": [{"name": "cp1", "address": "10.0.0.1", "role": "control-plane"}],
                                 "certificates": {"validity": "90d", "ca_validity": "5y"}})  # fmt: skip
    docs = list(yaml.safe_load_all(render_init_config(cfg)))
    cluster = next(d for d in docs if d["kind"] == "ClusterConfiguration")
    assert cluster["certificateValidityPeriod"] == "2160h0m0s"
    assert cluster["caCertificateValidityPeriod"] == "43800h0m0s"
    default = Config.model_validate({"nodes": [{"name": "cp1", "address": "10.0.0.1", "role": "control-plane"}]})
    cluster = next(d for d in yaml.safe_load_all(render_init_config(default)) if d["kind"] == "ClusterConfiguration")
    assert (cluster["certificateValidityPeriod"], cluster["caCertificateValidityPeriod"]) == ("8760h0m0s", "87600h0m0s")
