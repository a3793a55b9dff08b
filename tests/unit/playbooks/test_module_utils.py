"""playbooks/module_utils/gpustack_toml.py: the one TOML key splitter, shared by the containerd
filter (controller, loaded by path) and the gpustack_facts module (target, shipped by Ansible)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import ModuleType

from conftest import PLAYBOOKS

TOML_UTILS = PLAYBOOKS / "module_utils" / "gpustack_toml.py"


def test_split_key(toml_utils: ModuleType) -> None:
    assert toml_utils.split_key('plugins."io.containerd.grpc.v1.cri".containerd') == (
        "plugins",
        "io.containerd.grpc.v1.cri",
        "containerd",
    )
    assert toml_utils.split_key("plugins.'io.containerd.cri.v1.runtime'.containerd") == (
        "plugins",
        "io.containerd.cri.v1.runtime",
        "containerd",
    )
    assert toml_utils.split_key(" plugins . 'a.b' ") == ("plugins", "a.b")
    assert toml_utils.split_key("") == ("",)


def test_filter_and_module_share_one_implementation(containerd_filter: ModuleType, runtime_parsers: ModuleType) -> None:
    for consumer in (containerd_filter, runtime_parsers):
        assert Path(consumer.split_key.__code__.co_filename).resolve() == TOML_UTILS.resolve()
    assert not hasattr(runtime_parsers, "_toml_key")


def _ansible_env(**extra: str) -> dict[str, str]:
    return dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="False", **extra)


def test_ansible_loads_the_containerd_filter(tmp_path: Path) -> None:
    """On the controller Ansible skips a filter plugin whose import fails, with only a warning: the
    filter must load its module_utils itself."""
    text = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n'
    (tmp_path / "vars.json").write_text(json.dumps({"conf": "version = 2\n" + text}))
    r = subprocess.run(
        ["ansible", "localhost", "-i", "localhost,", "-c", "local", "-e", f"@{tmp_path / 'vars.json'}",
         "-m", "ansible.builtin.debug", "-a", "msg={{ conf | containerd_systemd_cgroup_enabled }}"],
        capture_output=True, text=True, check=False, timeout=120, cwd=tmp_path,
        env=_ansible_env(ANSIBLE_FILTER_PLUGINS=str(PLAYBOOKS / "filter_plugins")),
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Skipping plugin" not in r.stdout + r.stderr
    assert '"msg": true' in r.stdout


# preflight.yml's module finding its module_utils under ansible-runner: test_playbook_layout.py
# (test_preflight_module_finds_its_module_utils_under_ansible_runner, on the one local preflight run there)
