#!/usr/bin/python
"""gpustack_patch_state: what `gpustack node patch` would change on a host (read-only; module_utils/gpustack_patch.py)."""

from __future__ import annotations

import os
import tempfile

from ansible.module_utils.gpustack_patch import REBOOT_REQUIRED, collect, unheld_status

DPKG_STATUS = "/var/lib/dpkg/status"

DOCUMENTATION = r"""
---
module: gpustack_patch_state
short_description: Read a host's pending package upgrades, kernels, headers and reboot flag
description:
  - Simulates C(apt-get upgrade --with-new-pkgs) (C(-s), nothing installed) and lists what it would install or
    upgrade; the C(held) packages are reported apart (they stay held).
  - Reads the installed kernels (C(/boot/vmlinuz-*) with C(/lib/modules/*)), whether the newest has its headers
    (C(/lib/modules/<release>/build)) where the host builds kernel modules (NVIDIA GPUs, or headers for the running
    kernel), C(/var/run/reboot-required) and the boot id.
  - Changes nothing (C(changed=false)); runs in check mode.
options:
  held:
    description: Packages gpustack holds (they change only through gpustack up/upgrade).
    type: list
    elements: str
    default: []
  released:
    description: >-
      Held packages the patch releases for its upgrade (gpustack's kernel holds, hosts.hold_kernel): the simulation
      reads a copy of dpkg's status with them not held; the host's own selections are not touched.
    type: list
    elements: str
    default: []
  reboot_required_path:
    description: The flag file packages create when they need a reboot.
    type: str
    default: /var/run/reboot-required
author: gpustack
"""

EXAMPLES = r"""
- name: Read what a patch would change
  gpustack_patch_state:
    held: [kubelet, kubeadm, kubectl]
  register: node_patch_state
"""

RETURN = r"""
patch:
  description: >-
    running_kernel, newest_kernel, builds_modules, pending ([{name, from, to}]), held_pending, headers_missing
    (package names), reboot_required, boot_id, needed.
  type: dict
  returned: always
"""


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "held": {"type": "list", "elements": "str", "default": []},
            "released": {"type": "list", "elements": "str", "default": []},
            "reboot_required_path": {"type": "str", "default": REBOOT_REQUIRED},
        },
        supports_check_mode=True,
    )
    apt_get = module.get_bin_path("apt-get", required=True)
    argv = [apt_get, "-s", "-q", "upgrade", "--with-new-pkgs"]
    tmp = ""
    if module.params["released"]:
        with open(DPKG_STATUS, encoding="utf-8", errors="surrogateescape") as f:
            text = unheld_status(f.read(), module.params["released"])
        fd, tmp = tempfile.mkstemp(prefix="gpustack-dpkg-status-")
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        argv[1:1] = ["-o", f"Dir::State::status={tmp}"]
    try:
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
    finally:
        if tmp:
            os.unlink(tmp)
    if rc != 0:
        module.fail_json(msg=f"apt-get -s upgrade failed ({rc}): {(err or out).strip()[-500:]}")
    state = collect(out, module.params["held"], reboot_required=module.params["reboot_required_path"])
    module.exit_json(changed=False, patch=state)


if __name__ == "__main__":
    main()
