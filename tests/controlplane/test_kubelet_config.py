"""The kubelet's configuration as the real kubeadm 1.36.5 writes it from gpustack's default kubeadm configuration,
judged by doctor's CIS 4.2.x checks (gpustack/diagnose/checks_security_kubelet.py), and the recording the unit tests
judge (tests/fixtures/kubelet/) held to it.

``kubeadm init phase kubelet-start --dry-run`` with ``KUBEADM_INIT_DRYRUN_DIR`` (kubeadm's switch for running without
root, as tests/controlplane/kubeadm_phases.py uses it) writes ``config.yaml`` and ``kubeadm-flags.env`` into a
directory instead of /var/lib/kubelet; no server is started (well under a second).
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import yaml

from gpustack.config.model import Config
from gpustack.diagnose import cis_kubelet as ck
from gpustack.diagnose import registry
from gpustack.diagnose.snapshot import Snapshot
from gpustack.render.kubeadm import render_init_config
from tests.realbin.gobuild import binary

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kubelet"
#: the recorded node: its name and the address kubeadm passes as --node-ip
NODE, ADDRESS = "cp1", "198.51.100.1"
DROP_IN_ARGS = ["kubelet", "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
                "--kubeconfig=/etc/kubernetes/kubelet.conf", f"--config={ck.CONFIG}"]  # fmt: skip


def kubelet_start(tmp_path: Path) -> tuple[str, str]:
    cfg = Config.model_validate({"nodes": [{"name": NODE, "address": ADDRESS, "role": "control-plane"}]})
    config = tmp_path / "kubeadm-config.yaml"
    config.write_text(render_init_config(cfg))
    out = tmp_path / "kubelet"
    out.mkdir()
    proc = subprocess.run([str(binary("kubeadm")), "init", "phase", "kubelet-start", "--config", str(config), "--dry-run"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "KUBEADM_INIT_DRYRUN_DIR": str(out)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (out / "config.yaml").read_text(), (out / "kubeadm-flags.env").read_text()


def test_the_real_kubeadms_kubelet_config_has_no_cis_failure_and_is_the_recorded_one(tmp_path: Path) -> None:
    config, flags = kubelet_start(tmp_path)
    # the recording the unit tests judge is what kubeadm writes today
    assert config == (FIXTURES / "kubeadm-1.36.5-config.yaml").read_text()
    # kubeadm adds --hostname-override only when the node's name is not the host's (this machine's)
    override = "" if socket.gethostname().lower() == NODE else f"--hostname-override={NODE} "
    assert flags == f'KUBELET_KUBEADM_ARGS="{override}--node-ip={ADDRESS}"\n'
    assert (
        FIXTURES / "kubeadm-1.36.5-flags.env"
    ).read_text() == f'KUBELET_KUBEADM_ARGS="--hostname-override={NODE} --node-ip={ADDRESS}"\n'

    parsed = yaml.safe_load(config)
    assert parsed["podPidsLimit"] == 32768 and parsed["serverTLSBootstrap"] is True
    argv = [*DROP_IN_ARGS, *flags.split('"')[1].split()]
    kubelet = {"source": "process", "argv": argv, "config_path": ck.CONFIG, "config": config}
    snap = Snapshot(hosts={NODE: {"cis_files": {"files": {}, "pki": {}, "kubelet": kubelet}}})
    ids = {r.check_id for r in ck.RULES}
    found = registry.run([s for s in registry.select("doctor", layers=["security"]) if s.id in ids], snap)
    assert not [f for f in found if f.status == "fail"], [f for f in found if f.status == "fail"]
    left = {"S4.2.9-kubelet-tls-cert-file", "S4.2.14-kubelet-seccomp-default"}
    if override:
        left.add("S4.2.7-kubelet-hostname-override")
    assert {f.id for f in found if f.status == "warn"} == left
    assert len([f for f in found if f.status == "pass"]) == len(ids) - len(left)
