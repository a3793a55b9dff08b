"""``gpustack certs renew``'s host commands with the real kubeadm 1.36.5, etcd and kube-apiserver (issue 27).

A control plane whose certificates real kubeadm signed for 10 minutes is renewed with the command the certs_renew role
runs (its argv read from playbooks/roles/certs_renew/tasks/main.yml, the configuration at the role's path, rendered
by gpustack with ``validity: 2h``), in a root of its own (```--rootfs``: kubeadm's kubeconfig directory is fixed at
/etc/kubernetes). Then:

- the role's served-certificate module (playbooks/module_utils/gpustack_served.py) sees the API server serve the
  renewed certificate (kube-apiserver reloads its serving certificate from the file by itself), and again once the
  control-plane processes are restarted as the kubelet restarts a stopped static pod container (the restart the role
  does for what is read at start only: the client certificates and kubeconfigs);
- the real ``kubeadm certs check-expiration`` facts count every leaf as renewed by this renewal (the rule
  ``gpustack certs renew`` resumes by, gpustack/cluster/renewal.py), and not before it;
- the renewed admin.conf is accepted (the role's readiness command, ``kubectl get --raw /readyz``), the restarted
  controller-manager and scheduler are healthy with their renewed kubeconfigs.
"""

from __future__ import annotations

import importlib.util
import ssl
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from gpustack.cluster.renewal import renewed_since
from gpustack.config.model import Config
from gpustack.render.kubeadm import render_init_config
from gpustack.runners.tls import client_certificate_expiry, served_certificate_expiry
from tests.controlplane import kubeadm_phases as kp
from tests.controlplane.cluster import ControlPlane, free_port, kubectl, running
from tests.realbin.gobuild import binary

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "playbooks/roles/certs_renew"


def module_util(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / f"playbooks/module_utils/{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def config(validity: str) -> Config:
    return Config.model_validate({"nodes": [{"name": "cp1", "address": kp.ADVERTISE, "role": "control-plane"}],
                                  "certificates": {"validity": validity, "ca_validity": "1d"}})  # fmt: skip


def role_renew_argv() -> tuple[list[str], str]:
    """The role's renewal command, its variables resolved from the role's defaults; and the config path it reads."""
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    tasks = yaml.safe_load((ROLE / "tasks/main.yml").read_text())
    (task,) = [t for t in tasks if str(t.get("name", "")).startswith("Renew the certificates")]
    path = defaults["certs_renew_config_path"]
    argv = [path if a == "{{ certs_renew_config_path }}" else a for a in task["ansible.builtin.command"]["argv"]]
    assert argv[:4] == ["kubeadm", "certs", "renew", "all"] and "{{" not in " ".join(argv)
    return argv, path


def check_expiration(root: Path) -> dict[str, Any]:
    done = subprocess.run([str(binary("kubeadm")), "certs", "check-expiration", "-o", "json", "--rootfs", str(root),
                           "--config", "/etc/gpustack/kubeadm-certs.yaml"],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    facts: dict[str, Any] = module_util("gpustack_certs").parse_check_expiration(
        done.returncode, done.stdout, done.stderr
    )
    assert facts["error"] is None, facts
    return facts


def restart_like_the_kubelet(cp: ControlPlane) -> None:
    """``crictl stop`` of the control-plane containers, and the kubelet starting them again: etcd and the API server
    here, the controller-manager and scheduler by the fixture's supervisor (the kubelet's stand-in)."""
    restarts = dict(cp.restarts)
    for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
        proc = cp.processes[name]
        args = [str(a) for a in proc.args]  # type: ignore[union-attr]
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        if name in ("etcd", "kube-apiserver"):
            cp.spawn(name, args)
    cp.wait_healthy("kube-apiserver", f"{cp.url}/readyz", cp.admin_tls())
    deadline = time.monotonic() + 60
    while any(cp.restarts.get(n, 0) <= restarts.get(n, 0) for n in ("kube-controller-manager", "kube-scheduler")):
        assert time.monotonic() < deadline, "the supervisor did not start the controller-manager and scheduler again"
        time.sleep(0.5)
    cp.wait_healthy("kube-controller-manager", f"https://{kp.LOOPBACK}:{cp.ports.controller_manager}/healthz",
                    ssl._create_unverified_context())  # fmt: skip
    cp.wait_healthy("kube-scheduler", f"https://{kp.LOOPBACK}:{cp.ports.scheduler}/healthz",
                    ssl._create_unverified_context())  # fmt: skip


def test_the_roles_renewal_is_served_after_the_restart(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with running(root / "cp", config("10m")) as cp:
        # kubeadm's kubeconfig directory, /etc/kubernetes in the root, is the fixture's (its kubeconfigs and
        # certificates lie in one directory: /cp/pki in the root)
        (root / "etc").mkdir()
        (root / "etc/kubernetes").symlink_to("../cp/pki")
        argv, path = role_renew_argv()
        placed = kp.place(render_init_config(config("2h")), pki=Path("/cp/pki"), ports=cp.ports)
        (root / path.lstrip("/")).parent.mkdir(parents=True)
        (root / path.lstrip("/")).write_text(placed)
        served = module_util("gpustack_served")
        apiserver_crt = str(cp.pki / "apiserver.crt")

        first = served.served_matches(kp.LOOPBACK, cp.ports.apiserver, apiserver_crt)
        assert first["matches"] and first["served"] == first["file"] != ""
        began = datetime.now(timezone.utc)
        assert not renewed_since(check_expiration(root), began, "2h"), "signed at the start, for 10 minutes"

        done = subprocess.run([str(binary("kubeadm")), *argv[1:], "--rootfs", str(root)], capture_output=True,
                              text=True, timeout=120, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr

        facts = check_expiration(root)
        leaves = [c for c in facts["certificates"] if not c["authority"]]
        assert len(leaves) == 11 and all(not c["missing"] for c in leaves)
        assert renewed_since(facts, began, "2h"), "every leaf renewed with certificates.validity, after the start"
        assert not renewed_since(facts, began + timedelta(minutes=10), "2h"), "and not after a later start"
        admin = yaml.safe_load(cp.admin_kubeconfig.read_text())
        client = client_certificate_expiry(admin, admin["users"][0]["name"])
        assert client is not None and client - began > timedelta(minutes=110)

        # kube-apiserver reloads its serving certificate from the file (k8s.io/apiserver dynamiccertificates): served
        # at once. Its etcd, kubelet and front-proxy client certificates and the controller-manager's and scheduler's
        # kubeconfigs are read at start only: the role restarts the pods whatever the served certificate says
        before = served.wait_served(kp.LOOPBACK, cp.ports.apiserver, apiserver_crt, wait=30)
        assert before["matches"] and before["served"] == before["file"] != first["file"], before
        restart_like_the_kubelet(cp)
        after = served.wait_served(kp.LOOPBACK, cp.ports.apiserver, apiserver_crt, wait=60)
        assert after["matches"] and after["served"] == before["file"], after
        expires = served_certificate_expiry(kp.LOOPBACK, cp.ports.apiserver)
        assert expires is not None and timedelta(minutes=110) < expires - began <= timedelta(hours=2, minutes=1)
        # the role's readiness command with the renewed admin.conf
        assert kubectl(cp, "get", "--raw", "/readyz").strip() == "ok"
        # nothing listens on a closed port: the module says so rather than failing
        gone = served.wait_served(kp.LOOPBACK, free_port(), apiserver_crt, wait=0)
        assert not gone["matches"] and gone["served"] == "" and gone["file"] == after["file"]
