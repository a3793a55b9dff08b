"""Shared helpers for the playbook tests: repository paths and loading files by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
PLAYBOOKS = REPO / "playbooks"
FIXTURES = REPO / "tests" / "testbed" / "fixtures"
DOUBLES = REPO / "tests" / "testbed" / "doubles"
#: the environment a sandboxed ansible-playbook of gpustack's roles runs with (the repository's roles, modules and
#: module_utils; the host's own python3, as on a node)
ROLE_ENV = {
    "ANSIBLE_ROLES_PATH": str(PLAYBOOKS / "roles"),
    "ANSIBLE_LIBRARY": str(PLAYBOOKS / "library"),
    "ANSIBLE_MODULE_UTILS": str(PLAYBOOKS / "module_utils"),
    "ANSIBLE_NOCOLOR": "1",
    "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
    "ANSIBLE_LOCALHOST_WARNING": "0",
}


def load_path(name: str, path: Path) -> ModuleType:
    """Import a Python file that is not on sys.path (a plugin, a module, a script)."""
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def containerd_filter() -> ModuleType:
    return load_path("gpustack_containerd_filter", PLAYBOOKS / "filter_plugins" / "gpustack_containerd.py")


@pytest.fixture(scope="session")
def toml_utils() -> ModuleType:
    """playbooks/module_utils/gpustack_toml.py under the name modules import it by, as Ansible ships it."""
    return load_path("ansible.module_utils.gpustack_toml", PLAYBOOKS / "module_utils" / "gpustack_toml.py")


@pytest.fixture(scope="session")
def stage_utils() -> ModuleType:
    """playbooks/module_utils/gpustack_stage.py under the name modules import it by."""
    return load_path("ansible.module_utils.gpustack_stage", PLAYBOOKS / "module_utils" / "gpustack_stage.py")


@pytest.fixture(scope="session")
def host_parsers() -> ModuleType:
    """playbooks/module_utils/gpustack_host_parsers.py (gpustack_facts' /proc, OS, PCI, apt parsers)."""
    return load_path(
        "ansible.module_utils.gpustack_host_parsers", PLAYBOOKS / "module_utils" / "gpustack_host_parsers.py"
    )


@pytest.fixture(scope="session")
def runtime_parsers(toml_utils: ModuleType) -> ModuleType:
    """playbooks/module_utils/gpustack_runtime_parsers.py (containerd, kubelet and iptables parsers)."""
    return load_path(
        "ansible.module_utils.gpustack_runtime_parsers", PLAYBOOKS / "module_utils" / "gpustack_runtime_parsers.py"
    )


@pytest.fixture(scope="session")
def sources_utils() -> ModuleType:
    """playbooks/module_utils/gpustack_sources.py (what the preflight probes, through which proxy)."""
    return load_path("ansible.module_utils.gpustack_sources", PLAYBOOKS / "module_utils" / "gpustack_sources.py")


@pytest.fixture(scope="session")
def certs_utils() -> ModuleType:
    """playbooks/module_utils/gpustack_certs.py (certificate expiry: kubeadm check-expiration, the kubelet's)."""
    return load_path("ansible.module_utils.gpustack_certs", PLAYBOOKS / "module_utils" / "gpustack_certs.py")


@pytest.fixture(scope="session")
def etcd_utils() -> ModuleType:
    """playbooks/module_utils/gpustack_etcd.py (etcd snapshots; doctor's etcd facts)."""
    return load_path("ansible.module_utils.gpustack_etcd", PLAYBOOKS / "module_utils" / "gpustack_etcd.py")


@pytest.fixture(scope="session")
def cis_files_utils() -> ModuleType:
    """playbooks/module_utils/gpustack_cis_files.py (the CIS file checks' modes and owners)."""
    return load_path("ansible.module_utils.gpustack_cis_files", PLAYBOOKS / "module_utils" / "gpustack_cis_files.py")


@pytest.fixture(scope="session")
def facts_module(
    cis_files_utils: ModuleType,
    certs_utils: ModuleType,
    etcd_utils: ModuleType,
    toml_utils: ModuleType,
    stage_utils: ModuleType,
    host_parsers: ModuleType,
    runtime_parsers: ModuleType,
    sources_utils: ModuleType,
) -> ModuleType:
    return load_path("gpustack_facts_module", PLAYBOOKS / "library" / "gpustack_facts.py")
