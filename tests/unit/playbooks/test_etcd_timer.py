"""The scheduled etcd snapshots: the systemd units the etcd_snapshot role renders (with Ansible's own templating,
as the role's template tasks do; a template file is trusted, as Ansible trusts one read from the role), checked by the real systemd-analyze, and the settings they carry from etcd.snapshots."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from gpustack.config.model import Config
from gpustack.render.etcd import etcd_vars
from tests.unit.playbooks.conftest import PLAYBOOKS

ROLE = PLAYBOOKS / "roles" / "etcd_snapshot"


def render(name: str, cfg: Config) -> str:
    variables = {**yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()), **etcd_vars(cfg),
                 "gpustack_node_name": "cp1", "inventory_hostname": "cp1", "ansible_managed": "Ansible managed"}  # fmt: skip
    templar = Templar(loader=DataLoader(), variables=variables)
    return str(templar.template(trust_as_template((ROLE / "templates" / f"{name}.j2").read_text())))


def config(**snapshots: object) -> Config:
    return Config.model_validate({"nodes": [{"name": "cp1", "address": "10.0.0.1", "role": "control-plane"}],
                                  "etcd": {"snapshots": snapshots}})  # fmt: skip


def test_the_service_runs_the_snapshot_code_with_the_settings() -> None:
    service = render("gpustack-etcd-snapshot.service", config(keep=7, copy_to="/mnt/etcd"))
    exec_start = next(line for line in service.splitlines() if line.startswith("ExecStart="))
    assert exec_start == ("ExecStart=/usr/bin/python3 /usr/local/lib/gpustack/gpustack_etcd_snapshot.py --node cp1 "
                          "--dir /var/lib/gpustack/etcd-snapshots --keep 7 --copy-to /mnt/etcd")  # fmt: skip
    assert "UMask=0077" in service and "Type=oneshot" in service
    assert "--copy-to" not in render("gpustack-etcd-snapshot.service", config())


def test_the_timer_fires_every_interval() -> None:
    timer = render("gpustack-etcd-snapshot.timer", config(interval="6h"))
    assert "OnUnitActiveSec=21600s" in timer and "OnActiveSec=10min" in timer and "WantedBy=timers.target" in timer
    assert "OnUnitActiveSec=43200s" in render("gpustack-etcd-snapshot.timer", config()), "default: twice a day"


# systemd-analyze comes with systemd on every Debian/Ubuntu machine; under scripts/test.sh's PYTEST_NO_SKIPS a skip
# fails CI, so this marks a developer machine without systemd, not a silenced test
@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_accepts_the_units(tmp_path: Path) -> None:
    cfg = config(copy_to="/mnt/etcd")
    for name in ("gpustack-etcd-snapshot.service", "gpustack-etcd-snapshot.timer"):
        (tmp_path / name).write_text(render(name, cfg))
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / "gpustack-etcd-snapshot.timer"),
                        str(tmp_path / "gpustack-etcd-snapshot.service")],
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    problems = [line for line in r.stderr.splitlines() if "gpustack-etcd-snapshot" in line]
    assert r.returncode == 0 and not problems, r.stderr  # an unknown key is only a warning: read stderr too


def test_up_schedules_them_on_every_control_plane() -> None:
    tasks = yaml.safe_load((PLAYBOOKS / "roles" / "control_plane" / "tasks" / "main.yml").read_text())
    included = [t for t in tasks if "ansible.builtin.include_role" in t]
    assert {"name": "etcd_snapshot", "tasks_from": "timer.yml"} in [t["ansible.builtin.include_role"] for t in included]
