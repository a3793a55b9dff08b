"""Certificate expiry with the real kubeadm 1.36.5 and kube-apiserver (issue 27, "day 365").

gpustack's kubeadm configuration sets the validity (``certificates.validity``); the real kubeadm signs with it; what
doctor and status read is judged on what the binaries made:

- H15 from the real ``kubeadm certs check-expiration -o json``, parsed by the facts module's own parser
  (playbooks/module_utils/gpustack_certs.py), for a certificate set made by ``kubeadm init phase certs`` and
  ``kubeconfig`` in a root of its own (``--rootfs``: kubeadm's paths are fixed under /etc/kubernetes);
- K11 from the control plane's real admin.conf, status from the certificate the real API server serves;
- the renewal doctor's fix names (kubeadm's documented procedure) on a control plane: ``kubeadm certs renew`` with the configured
  validity, then the API server restarted serves the new certificate.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from gpustack.checks.certs import RENEW_FIX
from gpustack.config.model import Config
from gpustack.diagnose.checks_certs import admin_kubeconfig_certificate, control_plane_certificates
from gpustack.diagnose.snapshot import Snapshot
from gpustack.render.kubeadm import render_init_config
from gpustack.runners.tls import client_certificate_expiry, served_certificate_expiry
from tests.controlplane import kubeadm_phases as kp
from tests.controlplane.cluster import ControlPlane, running
from tests.realbin.gobuild import binary

REPO = Path(__file__).resolve().parents[2]


def certs_parsers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpustack_certs", REPO / "playbooks/module_utils/gpustack_certs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def config(validity: str, ca_validity: str = "3650d", address: str = "10.0.0.1") -> Config:
    return Config.model_validate({"nodes": [{"name": "cp1", "address": address, "role": "control-plane"}],
                                  "certificates": {"validity": validity, "ca_validity": ca_validity}})  # fmt: skip


def kubeadm(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary("kubeadm")), *args, "--rootfs", str(root), "--config", "/tmp/kubeadm.yaml"],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def snapshot(**kwargs: Any) -> Snapshot:
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return Snapshot(collected_at=now, settings={"certificates": {"warn_days": 90, "fail_days": 30}}, **kwargs)


@pytest.mark.parametrize(("validity", "status", "text"),
                         [("10m", "fail", "minutes"), ("60d", "warn", "days"), ("365d", "pass", "days")])  # fmt: skip
def test_kubeadm_signs_with_the_configured_validity_and_h15_judges_it(
    tmp_path: Path, validity: str, status: str, text: str
) -> None:
    root = tmp_path / "root"
    (root / "etc/kubernetes").mkdir(parents=True)
    (root / "tmp").mkdir()
    (root / "tmp/kubeadm.yaml").write_text(render_init_config(config(validity)))
    for phase in ("certs", "kubeconfig"):
        done = kubeadm(root, "init", "phase", phase, "all")
        assert done.returncode == 0, done.stderr
    checked = kubeadm(root, "certs", "check-expiration", "-o", "json")
    facts = certs_parsers().parse_check_expiration(checked.returncode, checked.stdout, checked.stderr)
    assert facts["error"] is None and len(facts["certificates"]) == 14
    names = {c["name"] for c in facts["certificates"]}
    assert {"admin.conf", "super-admin.conf", "apiserver", "etcd-server", "ca"} <= names
    (found,) = control_plane_certificates(snapshot(hosts={"cp1": {"certificates": {"kubeadm": facts}}}))
    assert found.status == status and text in (found.summary + found.evidence), found
    if status != "pass":
        assert "11 of 11 certificates" in found.summary and found.fix.startswith(RENEW_FIX)


def test_the_api_server_serves_what_kubeadm_signed_and_a_renewal_is_served(tmp_path: Path) -> None:
    with running(tmp_path / "cp", config("10m", "1d", address=kp.ADVERTISE)) as cp:
        now = datetime.now(timezone.utc)
        served = served_certificate_expiry(kp.LOOPBACK, cp.ports.apiserver)
        assert served is not None and timedelta(minutes=8) < served - now <= timedelta(minutes=10, seconds=5)
        admin = yaml.safe_load(cp.admin_kubeconfig.read_text())
        client = client_certificate_expiry(admin, admin["users"][0]["name"])
        assert client is not None and client - now <= timedelta(minutes=10, seconds=5)
        target = {"kubeconfig": [str(cp.admin_kubeconfig)], "gpustack_cluster": True,
                  "client_certificate_expires": client.isoformat()}  # fmt: skip
        (k11,) = admin_kubeconfig_certificate(snapshot(target=target))
        assert k11.status == "fail" and "minutes" in k11.summary

        renewed = renew_and_restart(cp, config("2h", "1d", address=kp.ADVERTISE))
        assert renewed is not None and timedelta(minutes=110) < renewed - now <= timedelta(hours=2, minutes=1)
        assert json.loads(cp_get(cp, "/version"))["gitVersion"] == "v1.36.5", "it serves requests after the restart"


def renew_and_restart(cp: ControlPlane, cfg: Config) -> datetime | None:
    """``kubeadm certs renew apiserver`` with ``cfg``'s validity, then the API server restarted (as the kubelet
    restarts a static pod): the certificate it serves afterwards."""
    placed = cp.workdir / "kubeadm-renew.yaml"
    placed.write_text(kp.place(render_init_config(cfg), pki=cp.pki, ports=cp.ports))
    done = subprocess.run([str(binary("kubeadm")), "certs", "renew", "apiserver", "--config", str(placed)],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    args = list(cp.processes["kube-apiserver"].args)  # type: ignore[arg-type]
    proc = cp.processes["kube-apiserver"]
    proc.terminate()
    proc.wait(timeout=60)
    cp.spawn("kube-apiserver", args)
    cp.wait_healthy("kube-apiserver", f"{cp.url}/readyz", cp.admin_tls())
    return served_certificate_expiry(kp.LOOPBACK, cp.ports.apiserver)


def cp_get(cp: ControlPlane, path: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"{cp.url}{path}", context=cp.admin_tls(), timeout=10) as resp:
        return str(resp.read().decode())
