"""Run site.yml for real in a throw-away sandbox on this machine (no booted hosts).

Everything happens inside ``unshare --mount --net``: overlays over /etc, /var, /usr, /root,
/opt, /home and /srv send every write into the sandbox directory, the network namespace is
empty, and both disappear with the process. The testbed's TEST DOUBLES are installed as
/usr/bin/kubeadm, kubectl and kubelet inside the sandbox; Helm and the Flannel manifest come from
file:// URLs. The control plane is the sandbox itself (connection local); each worker is a
chroot (community.general.chroot) into its own overlay of /.

The playbook runs with the strategy `up` gives its stages: Mitogen's ``mitogen_linear`` (the control plane then
goes through Mitogen's local connection, as `up` on "this machine" does; the chroots keep Ansible's own), or with
``mitogen=False`` Ansible's linear strategy (``ssh.mitogen: false``).

Only the stages that need neither systemd nor the network can run this way: control-plane,
workers, network and helm, and the kubernetes stage's CNI plugins and crictl (tag node-tools,
test_node_tools_converge.py). os, firewall, containerd and the rest of kubernetes need booted hosts
(the nspawn testbed).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from conftest import DOUBLES, PLAYBOOKS

from gpustack.config.model import Config
from gpustack.render.ansible import extravars, inventory
from gpustack.render.encryption_keys import run_extravars
from gpustack.runners.ansible import strategy_env

#: the start of a sandbox script: /etc, /var, /usr and /root under overlays in $GS_SANDBOX (writes land there, the
#: machine's own files are untouched); the role tests that need no test hosts start their scripts with it
OVERLAY_ROOT = r"""
set -eu
S="$GS_SANDBOX"
mount --make-rprivate /
for d in etc var usr root; do
  mkdir -p "$S/ov/$d/u" "$S/ov/$d/w"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$S/ov/$d/u,workdir=$S/ov/$d/w" "/$d"
done
"""

SCRIPT = r"""
set -eu
S="$GS_SANDBOX"
mount --make-rprivate /
for d in etc var usr root opt home srv; do
  [ -d "/$d" ] || continue
  mkdir -p "$S/ov/$d/u" "$S/ov/$d/w"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$S/ov/$d/u,workdir=$S/ov/$d/w" "/$d"
done
ip link set lo up
install_doubles() {
  mkdir -p "$1/usr/share/gpustack-doubles"
  echo "$GS_K8S_VERSION" > "$1/usr/share/gpustack-doubles/version"
  for b in kubeadm kubectl kubelet; do install -m 0755 "$GS_DOUBLES/$b" "$1/usr/bin/$b"; done
}
install_doubles ""
for w in $GS_WORKERS; do
  R="$S/hosts/$w"
  mkdir -p "$R/u" "$R/w" "$R/root"
  mount -t overlay overlay -o "lowerdir=/,upperdir=$R/u,workdir=$R/w" "$R/root"
  for m in proc dev sys; do mount --rbind "/$m" "$R/root/$m"; done
  install_doubles "$R/root"
done
"$@"
"""


def available() -> str | None:
    """None when a sandbox can run here, else the reason it cannot."""
    if os.environ.get("GPUSTACK_SKIP_SANDBOX"):
        return "GPUSTACK_SKIP_SANDBOX is set"
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("unshare", "chroot", "ip", "ansible-playbook"):
        if not shutil.which(tool):
            return f"needs {tool}"
    probe = subprocess.run(
        [
            "unshare",
            "--mount",
            "--net",
            "sh",
            "-c",
            "d=$(mktemp -d) && mkdir $d/u $d/w $d/m && "
            "mount -t overlay overlay -o lowerdir=/etc,upperdir=$d/u,workdir=$d/w $d/m; "
            "rc=$?; umount $d/m 2>/dev/null; rm -rf $d; exit $rc",
        ],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        return "cannot mount overlays in a private mount namespace"
    return None


@dataclass
class Run:
    rc: int
    output: str

    def recap(self) -> dict[str, dict[str, int]]:
        """PLAY RECAP counters per host."""
        out: dict[str, dict[str, int]] = {}
        for m in re.finditer(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", self.output, flags=re.M):
            out[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
        return out


class Sandbox:
    def __init__(self, base: Path, cfg: Config, *, mitogen: bool = True) -> None:
        self.base = base
        self.cfg = cfg
        self.mitogen = mitogen
        self.workers = [n.name for n in cfg.workers]
        base.mkdir(parents=True, exist_ok=True)
        self.kubeconfig_dest = base / "controller" / "kube" / "config"

    # ------------------------------------------------------------------ inputs
    def _helm_tarball(self) -> tuple[Path, str]:
        version = self.cfg.versions.helm
        path = self.base / f"helm-v{version}-linux-amd64.tar.gz"
        data = (DOUBLES / "helm").read_bytes()
        with tarfile.open(path, "w:gz") as tar:
            info = tarfile.TarInfo("linux-amd64/helm")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        return path, hashlib.sha256(path.read_bytes()).hexdigest()

    def write_inputs(self) -> tuple[Path, Path]:
        inv = inventory(self.cfg)
        groups = inv["all"]["children"]
        for host in groups["control_plane"]["hosts"].values():
            host.update(
                ansible_connection="local",
                ansible_become=False,
                ansible_python_interpreter="/usr/bin/python3",
            )
        for name, host in groups["workers"]["hosts"].items():
            for key in ("ansible_port", "ansible_user", "ansible_ssh_private_key_file"):
                host.pop(key, None)
            host.update(
                ansible_connection="community.general.chroot",
                ansible_host=str(self.base / "hosts" / name / "root"),
                ansible_become=False,
                ansible_python_interpreter="/usr/bin/python3",
            )
        ev: dict[str, Any] = extravars(self.cfg, kubeconfig_dest=self.kubeconfig_dest)
        ev.update(run_extravars(self.cfg, self.base / "state"))  # as gpustack/engine/stages.py run_playbook
        tarball, sha = self._helm_tarball()
        ev["gpustack_helm_downloads"] = {"amd64": {"url": tarball.as_uri(), "sha256": sha}}
        inv_path, ev_path = self.base / "inventory.yml", self.base / "extravars.json"
        inv_path.write_text(yaml.safe_dump(inv))
        ev_path.write_text(json.dumps(ev))
        return inv_path, ev_path

    # ------------------------------------------------------------------ run
    def converge(
        self,
        tags: str = "control-plane,workers,network,helm",
        *,
        extra: dict[str, Any] | None = None,
        before: str = "",
        after: str = "",
    ) -> Run:
        """Run site.yml with ``tags``; ``before``/``after`` are shell run in the sandbox around
        it (same namespaces), their output is part of Run.output."""
        inv_path, ev_path = self.write_inputs()
        if extra:
            ev = json.loads(ev_path.read_text())
            ev.update(extra)
            ev_path.write_text(json.dumps(ev))
        env = dict(
            os.environ,
            GS_SANDBOX=str(self.base),
            GS_DOUBLES=str(DOUBLES),
            GS_WORKERS=" ".join(self.workers),
            GS_K8S_VERSION=self.cfg.versions.kubernetes,
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_FORCE_COLOR="0",
            ANSIBLE_RETRY_FILES_ENABLED="0",
        )
        for key in ("ANSIBLE_STRATEGY", "ANSIBLE_STRATEGY_PLUGINS"):  # only the strategy asked for
            env.pop(key, None)
        env.update(strategy_env(mitogen=self.mitogen))
        run_playbook = 'ansible-playbook -i "$1" -e "@$2" "$3" --tags "$4"; rc=$?'
        playbook = f"{before}\n{run_playbook}\n{after}\nexit $rc"
        cmd = [
            "unshare", "--mount", "--net", "--fork", "sh", "-c", SCRIPT, "sandbox",
            "sh", "-c", playbook, "playbook",
            str(inv_path), str(ev_path), str(PLAYBOOKS / "site.yml"), tags,
        ]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
        return Run(proc.returncode, proc.stdout + proc.stderr)

    # ------------------------------------------------------------------ results
    def cp_file(self, path: str) -> Path:
        """A file the control plane wrote (it lives in the overlay's upper directory)."""
        top, rest = path.lstrip("/").split("/", 1)
        return self.base / "ov" / top / "u" / rest

    def worker_file(self, worker: str, path: str) -> Path:
        return self.base / "hosts" / worker / "u" / path.lstrip("/")

    def doubles_log(self, name: str, worker: str | None = None) -> list[list[str]]:
        path = f"/var/log/gpustack-doubles/{name}.log"
        f = self.worker_file(worker, path) if worker else self.cp_file(path)
        if not f.exists():
            return []
        return [json.loads(line) for line in f.read_text().splitlines()]
