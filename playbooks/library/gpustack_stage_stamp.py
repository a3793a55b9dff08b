#!/usr/bin/python
"""gpustack_stage_stamp: record or forget a stage's stamp (see module_utils/gpustack_stage.py)."""

from __future__ import annotations

from ansible.module_utils.gpustack_stage import STAMP_DIR, probe, read_stamp, remove_stamp, write_stamp

DOCUMENTATION = r"""
---
module: gpustack_stage_stamp
short_description: Record (or forget) the converged state of a gpustack stage on a host
description:
  - C(state=present) reads the stage's probes (file sha256s, services, sysctl values, packages,
    check-command exit codes) and writes them with the stage's input digest to
    C(/var/lib/gpustack/stages/<stage>.json) (0600). The preflight compares them on the next run.
  - C(state=absent) removes the stamp, so that a stage that is about to run (and may be
    interrupted) never looks converged.
  - The stamp is gpustack's own bookkeeping, not host configuration, so the module reports
    C(changed=false).
options:
  stage:
    description: Stage id (os, firewall, containerd, ...).
    type: str
    required: true
  state:
    description: present records, absent forgets.
    type: str
    choices: [present, absent]
    default: present
  digest:
    description: The stage's input digest (computed by gpustack for this host).
    type: str
    default: ""
  probes:
    description: The stage's probe spec (files, services, sysctl, packages, commands).
    type: dict
    default: {}
  directory:
    description: Where stamps are kept.
    type: str
    default: /var/lib/gpustack/stages
author: gpustack
"""

EXAMPLES = r"""
- name: Record the stage
  gpustack_stage_stamp:
    stage: os
    digest: "{{ gpustack_stage_digests['os'] }}"
    probes: "{{ gpustack_stage_probes['os'] }}"
"""

RETURN = r"""
stamp:
  description: The stamp written (state=present) or the one removed (state=absent, when there was one).
  type: dict
  returned: always
"""


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "stage": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "digest": {"type": "str", "default": ""},
            "probes": {"type": "dict", "default": {}},
            "directory": {"type": "str", "default": STAMP_DIR},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "absent":
        old = read_stamp(p["stage"], p["directory"]) or {}
        if not module.check_mode:
            remove_stamp(p["stage"], p["directory"])
        module.exit_json(changed=False, stamp=old)
    if module.check_mode:
        module.exit_json(changed=False, stamp={})
    if not p["digest"]:
        module.fail_json(msg="a stamp needs the stage's input digest")
    stamp = write_stamp(p["stage"], p["digest"], probe(p["probes"]), p["directory"])
    module.exit_json(changed=False, stamp=stamp)


if __name__ == "__main__":
    main()
