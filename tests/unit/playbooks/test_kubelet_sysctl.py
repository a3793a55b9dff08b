"""The os_prep role's protectKernelDefaults block (roles/os_prep/tasks/kubelet_sysctl.yml, imported by its main.yml and
run by `gpustack security apply` first), run for real by ansible-playbook on
this machine with Ansible's ansible.posix.sysctl: a kernel parameter already at the kubelet's value is not written
(no ``sysctl -w``, no ``sysctl -p``), only kept in the role's file, and a converged re-run changes nothing; one the
kernel refuses stops the run with a message that names it and ``security.protect_kernel_defaults``.

The parameters are this machine's own, at the values it already has (so nothing on it changes, under any user), and
one that does not exist (what a host that cannot set one answers: the module's failure)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.playbooks.conftest import PLAYBOOKS

TASK = "Set the kernel parameters the kubelet checks (protectKernelDefaults)"
#: two of the six the kubelet checks (kubelet v1.36.5 setupKernelTunables), at this machine's values
KEYS = ("kernel.panic_on_oops", "kernel.keys.root_maxkeys")

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")


def current(key: str) -> str:
    return Path("/proc/sys", *key.split(".")).read_text().strip()


def play(tmp_path: Path, sysctl: dict[str, str]) -> tuple[int, dict[str, Any], str]:
    tasks = yaml.safe_load((PLAYBOOKS / "roles/os_prep/tasks/kubelet_sysctl.yml").read_text())
    block = [t for t in tasks if t.get("name") == TASK]
    assert len(block) == 1 and "rescue" in block[0]
    (tmp_path / "block.yml").write_text(yaml.safe_dump(block))
    playbook = [{"hosts": "localhost", "gather_facts": False,
                 "vars": {"gpustack_protect_kernel_defaults": True,
                          "os_prep_kubelet_sysctl_file": str(tmp_path / "99-gpustack-kubelet.conf"),
                          "os_prep_kubelet_sysctl": sysctl},
                 "tasks": [{"name": "the role's block", "ansible.builtin.include_tasks": str(tmp_path / "block.yml")}]}]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(playbook))
    env = {**os.environ, "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, timeout=180, check=False)  # fmt: skip
    out = json.loads(proc.stdout[proc.stdout.index("{") :])
    return proc.returncode, out["stats"]["localhost"], proc.stdout


def test_values_already_right_are_kept_in_the_file_and_not_written(tmp_path: Path) -> None:
    want = {k: current(k) for k in KEYS}
    rc, stats, output = play(tmp_path, want)
    assert rc == 0 and stats["failures"] == 0, output
    written = (tmp_path / "99-gpustack-kubelet.conf").read_text().splitlines()
    assert sorted(written) == sorted(f"{k}={v}" for k, v in want.items())
    assert {k: current(k) for k in KEYS} == want
    rc, stats, output = play(tmp_path, want)  # converged: nothing changes
    assert rc == 0 and stats["changed"] == 0, output


def test_a_parameter_the_kernel_refuses_stops_the_run_naming_it_and_the_setting(tmp_path: Path) -> None:
    rc, stats, output = play(tmp_path, {KEYS[0]: current(KEYS[0]), "gpustack.no_such_parameter": "1"})
    assert rc != 0 and stats["failures"] == 1 and stats["rescued"] == 1, output
    assert "security.protect_kernel_defaults is on" in output
    assert "setting gpustack.no_such_parameter failed" in output
    assert "security.protect_kernel_defaults: false" in output


def test_the_test_bed_sets_the_roles_values_on_its_machine_where_they_differ(tmp_path: Path) -> None:
    """tests/testbed/kernel_tunables.py (the bed's machine, before any host boots) on a tree standing for /proc/sys."""
    from tests.testbed import kernel_tunables

    # the role's six, as kubelet v1.36.5 setupKernelTunables checks them (k8s.io/component-helpers node/util/sysctl:
    # VMOvercommitMemoryAlways, VMPanicOnOOMInvokeOOMKiller, KernelPanicRebootTimeout, KernelPanicOnOopsAlways,
    # RootMaxKeysSetting, RootMaxBytesSetting)
    assert kernel_tunables.wanted() == {"vm.overcommit_memory": "1", "vm.panic_on_oom": "0", "kernel.panic": "10",
                                        "kernel.panic_on_oops": "1", "kernel.keys.root_maxkeys": "1000000",
                                        "kernel.keys.root_maxbytes": "25000000"}  # fmt: skip
    for key in kernel_tunables.wanted():
        path = tmp_path.joinpath(*key.split("."))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            {"vm.overcommit_memory": "0", "kernel.panic": "0"}.get(key, kernel_tunables.wanted()[key]) + "\n"
        )
    assert kernel_tunables.ensure(tmp_path) == {"vm.overcommit_memory": ("0", "1"), "kernel.panic": ("0", "10")}
    assert (tmp_path / "vm/overcommit_memory").read_text() == "1\n"
    assert kernel_tunables.ensure(tmp_path) == {}
