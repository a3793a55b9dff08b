"""kube-vip's kubeconfig on the first control plane (issue 27): super-admin.conf only before kubeadm init ran there,
admin.conf afterwards (the control_plane role's default, rendered as Ansible renders it), and the switch after init
waits for the mirror pod to show admin.conf. The whole bring-up runs in tests/testbed/test_ha.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

ROLE = Path(__file__).resolve().parents[3] / "playbooks/roles/control_plane"


def kubeconfig(first: bool, initialised: bool | None) -> str:
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    env = jinja2.Environment(undefined=jinja2.ChainableUndefined)
    env.filters["bool"] = lambda v: v is True or str(v).lower() in ("true", "yes", "1")
    values: dict[str, Any] = {"control_plane_is_first": first}
    if initialised is not None:  # the stat task ran (kube_vip.yml)
        values["control_plane_kube_vip_initialised"] = {"stat": {"exists": initialised}}
    return env.from_string(defaults["control_plane_kube_vip_kubeconfig"]).render(values).strip()


@pytest.mark.parametrize(
    ("first", "initialised", "expected"),
    [(True, False, "super-admin.conf"), (True, None, "super-admin.conf"), (True, True, "admin.conf"),
     (False, False, "admin.conf"), (False, True, "admin.conf")],
)  # fmt: skip
def test_super_admin_only_on_the_first_node_before_init(first: bool, initialised: bool | None, expected: str) -> None:
    assert kubeconfig(first, initialised) == f"/etc/kubernetes/{expected}"


def test_the_switch_after_init_waits_for_the_mirror_pod() -> None:
    tasks = yaml.safe_load((ROLE / "tasks/kube_vip_admin.yml").read_text())
    template, wait = tasks
    assert template["vars"]["control_plane_kube_vip_kubeconfig"] == "{{ control_plane_admin_conf }}"
    assert template["ansible.builtin.template"]["src"] == "kube-vip.yaml.j2"
    assert "ansible_check_mode" in wait["when"] and wait["changed_when"] is False
    argv = wait["ansible.builtin.command"]["argv"]
    assert argv[argv.index("get") + 1 : argv.index("get") + 3] == ["pod", "kube-vip-{{ gpustack_node_name }}"]
    assert "control_plane_admin_conf ~ ' True'" in wait["until"]
    main = yaml.safe_load((ROLE / "tasks/main.yml").read_text())
    (block,) = [t for t in main if "block" in t]
    names = [t.get("ansible.builtin.import_tasks") for t in block["block"]]
    assert names[-1] == "kube_vip_admin.yml" and names.index("kubeconfig.yml") < names.index("kube_vip_admin.yml")
