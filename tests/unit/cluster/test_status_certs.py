"""``gpustack status``'s certificate rows: this machine's kubeconfig and each API server's served certificate."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import pytest

from gpustack.cluster.status_certs import gather_certificates, print_certificates
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.runners.tls import served_certificate_expiry
from tests.unit.runners.test_tls import tls_server

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.timezone.utc)


def config(address: str = "192.0.2.10") -> Config:
    return Config.model_validate({"nodes": [{"name": "cp1", "address": address, "role": "control-plane"}],
                                  "certificates": {"warn_days": 60, "fail_days": 10}})  # fmt: skip


def test_the_kubeconfig_and_an_unreachable_api_server() -> None:
    target = {"kubeconfig": ["/state/admin.conf"], "client_certificate_expires": "2027-01-10T12:00:00+00:00"}
    rows = gather_certificates(config(), target, now=NOW, timeout=0.2)
    assert rows[0] == {"what": "kubeconfig /state/admin.conf", "expires": "2027-01-10T12:00:00+00:00",
                       "status": "warn", "text": "expires 2027-01-10 12:00 UTC (in 42 days)"}  # fmt: skip
    assert rows[1]["what"] == "API server cp1 (192.0.2.10:6443)" and rows[1]["status"] == "unknown"
    no_cert = gather_certificates(config(), {"kubeconfig": ["/k"], "client_certificate_expires": ""}, now=NOW,
                                  timeout=0.2)  # fmt: skip
    assert [r["what"] for r in no_cert] == ["API server cp1 (192.0.2.10:6443)"]


def test_the_served_certificate_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpustack.cluster.status_certs as sc

    when = NOW + dt.timedelta(days=5)
    asked: list[tuple[str, int]] = []
    with tls_server(tmp_path, when) as port:

        def on_loopback(address: str, api_port: int, *, timeout: float) -> dt.datetime | None:
            asked.append((address, api_port))  # the node's address and 6443; the TLS read itself is real
            return served_certificate_expiry("127.0.0.1", port, timeout=timeout)

        monkeypatch.setattr(sc, "served_certificate_expiry", on_loopback)
        rows = gather_certificates(config(), None, now=NOW, timeout=5)
    assert asked == [("192.0.2.10", 6443)]
    assert rows == [{"what": "API server cp1 (192.0.2.10:6443)", "expires": when.isoformat(), "status": "fail",
                     "text": "expires 2026-12-04 12:00 UTC (in 5 days)"}]  # fmt: skip


def test_printed_literally() -> None:
    buf = io.StringIO()
    print_certificates([{"what": "kubeconfig /tmp/[bold]x[/bold]", "expires": "", "status": "unknown",
                         "text": "not reachable"}], Console(stream=buf, color=False))  # fmt: skip
    assert "/tmp/[bold]x[/bold]" in buf.getvalue() and "unknown" in buf.getvalue()
