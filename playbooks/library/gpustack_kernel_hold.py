#!/usr/bin/python
"""gpustack_kernel_hold: the kernel and NVIDIA driver packages ``hosts.hold_kernel`` holds on this host, and which
of gpustack's earlier holds to release (read-only; module_utils/gpustack_kernel_hold.py)."""

from __future__ import annotations

from ansible.module_utils.gpustack_kernel_hold import RECORD, plan, read

DOCUMENTATION = r"""
---
module: gpustack_kernel_hold
short_description: Decide which kernel and NVIDIA driver packages to hold, and which of gpustack's holds to release
description:
  - Reads dpkg's status (/var/lib/dpkg/status), the running kernel and gpustack's record of the holds it made.
  - Returns the packages to hold (the kernel meta packages, the running kernel's image, the NVIDIA driver packages;
    none when C(enabled) is false), the recorded holds to release and the record to write.
  - Changes nothing (C(changed=false)); runs in check mode. The role sets the selections with
    ansible.builtin.dpkg_selections.
options:
  enabled:
    description: gpustack.yaml hosts.hold_kernel.
    type: bool
    required: true
  record:
    description: The JSON list of the holds gpustack made.
    type: str
    default: /etc/gpustack/held-packages.json
author: gpustack
"""

EXAMPLES = r"""
- name: Read the kernel and NVIDIA driver packages to hold
  gpustack_kernel_hold:
    enabled: true
  register: held
"""

RETURN = r"""
hold:
  description: Packages to hold (kernel and driver).
  type: list
  returned: always
release:
  description: Packages gpustack held before that are no longer wanted (set back to install).
  type: list
  returned: always
record:
  description: The holds gpustack made, to record (packages someone else had held are left out).
  type: list
  returned: always
kernel:
  description: The kernel packages among C(hold).
  type: list
  returned: always
driver:
  description: The NVIDIA driver packages among C(hold).
  type: list
  returned: always
"""


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={"enabled": {"type": "bool", "required": True}, "record": {"type": "str", "default": RECORD}},
        supports_check_mode=True,
    )
    try:
        host = read(module.params["record"])
    except OSError as exc:
        module.fail_json(msg=f"cannot read dpkg's status: {exc}")
    module.exit_json(
        changed=False, **plan(host["packages"], host["running"], host["recorded"], module.params["enabled"])
    )


if __name__ == "__main__":
    main()
