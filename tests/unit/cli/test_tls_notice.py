"""Issue 31: a kubeconfig with ``insecure-skip-tls-verify: true`` gets one short line on stderr saying that TLS
verification is off for that cluster, once per command, never urllib3's InsecureRequestWarning (urllib3 shows it
on every request, with its source line) -- and stdout stays what the format promises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes import not_kube
from tests.prometheus.cli_cluster import run_cli

API_LAYERS = ("--layer", "kubernetes,gpu-operator,monitoring,grafana")
NOISE = ("InsecureRequestWarning", "warnings.warn(", "Unverified HTTPS request", "urllib3")


@pytest.mark.parametrize(
    ("kind", "command", "args"),
    [("refusing", "verify", ("--output", "json", *API_LAYERS)), ("api-404", "status", ()), ("refusing", "health", ())],
)
def test_tls_verification_off_is_said_once(tmp_path: Path, kind: str, command: str, args: tuple[str, ...]) -> None:
    with not_kube.serving(kind, tls=True) as server:
        kc = server.write_kubeconfig(tmp_path / "kc.yaml")
        proc = run_cli(command, kc, tmp_path, args=args)
        asked = len(server.paths)
    assert asked >= 2, asked  # more than one request: urllib3 would have warned on each
    flat = " ".join(proc.stderr.split())
    assert flat.count("warning: TLS verification is off for cluster 'c'") == 1, proc.stderr
    assert f"({server.url}): its kubeconfig ({kc}) sets insecure-skip-tls-verify" in flat, proc.stderr
    for noise in NOISE:
        assert noise not in proc.stderr + proc.stdout, proc.stderr
    if command == "verify":
        assert json.loads(proc.stdout)["command"] == "verify"  # stdout is the JSON alone


def test_a_verified_cluster_gets_no_tls_line(tmp_path: Path) -> None:
    with not_kube.serving("api-404") as server:  # plain HTTP: no TLS to verify, nothing said about it
        kc = server.write_kubeconfig(tmp_path / "kc.yaml")
        proc = run_cli("status", kc, tmp_path, args=())
    assert proc.returncode == 3 and "TLS verification" not in proc.stderr + proc.stdout, proc.stderr


def test_a_verifying_kubeconfig_gets_no_tls_line(tmp_path: Path) -> None:
    with not_kube.serving("api-404", tls=True) as server:
        kc = server.write_kubeconfig(tmp_path / "kc.yaml")
        kc.write_text(kc.read_text().replace("insecure-skip-tls-verify: true", "insecure-skip-tls-verify: false"))
        proc = run_cli("status", kc, tmp_path, args=())
    # the self-signed certificate is refused, in a few words, and nothing claims verification is off
    assert proc.returncode == 3 and "TLS verification is off" not in proc.stderr + proc.stdout, proc.stderr
    assert "certificate" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
