#!/usr/bin/python
"""gpustack_etcd_snapshot: take a verified etcd snapshot on a control plane (see module_utils/gpustack_etcd.py)."""

from __future__ import annotations

from ansible.module_utils.gpustack_etcd import (
    DATA_DIR,
    SNAPSHOT_DIR,
    SnapshotError,
    crictl_etcdctl,
    etcdctl_argv,
    member_health,
    quorum_problems,
    take_snapshot,
)

DOCUMENTATION = r"""
---
module: gpustack_etcd_snapshot
short_description: Take a verified etcd snapshot on a kubeadm control plane
description:
  - Runs C(etcdctl snapshot save) with kubeadm's etcd client certificate, through the etcdctl of the
    running etcd static pod container (C(crictl exec)) unless C(etcdctl) names one on the host.
  - Checks the sha256 etcd appends to the snapshot (the check C(etcdutl snapshot restore) does) and keeps
    it as C(<directory>/etcd-<node>-<UTC time>.db), 0600 in a 0700 directory, and in C(copy_to) when set;
    only the newest C(keep) snapshots stay in each.
  - Always changed (a new file); nothing in check mode.
options:
  node:
    description: The node name in the file name.
    type: str
    required: true
  directory:
    description: Where the snapshots are kept on the host.
    type: str
    default: /var/lib/gpustack/etcd-snapshots
  keep:
    description: How many snapshots stay in C(directory) (and C(copy_to)).
    type: int
    default: 5
  copy_to:
    description: A second directory (a mounted share) that gets a copy; empty for none.
    type: str
    default: ""
  data_dir:
    description: etcd's data directory, mounted at the same path in its container.
    type: str
    default: /var/lib/etcd
  etcdctl:
    description: An etcdctl on the host; empty to use the etcd container's through crictl.
    type: str
    default: ""
  removing:
    description: >-
      Nodes (C([{name, address}])) whose etcd members are about to be removed (gpustack node remove): before the
      snapshot, etcd's own member health (C(member list), C(endpoint health --cluster)) must leave a majority
      healthy after their removal, else the module fails and nothing is taken or changed.
    type: list
    elements: dict
    default: []
author: gpustack
"""

EXAMPLES = r"""
- name: Take an etcd snapshot
  gpustack_etcd_snapshot:
    node: "{{ gpustack_node_name }}"
    keep: 5
"""

RETURN = r"""
etcd_members:
  description: With C(removing), each etcd member (id in hex, name, hosts, healthy).
  type: list
  returned: always
snapshot:
  description: path, name, size, sha256, copy (the copy's path or empty) and removed (pruned files).
  type: dict
  returned: success
"""


def main() -> None:
    import subprocess

    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "directory": {"type": "str", "default": SNAPSHOT_DIR},
            "keep": {"type": "int", "default": 5},
            "copy_to": {"type": "str", "default": ""},
            "data_dir": {"type": "str", "default": DATA_DIR},
            "etcdctl": {"type": "str", "default": ""},
            "removing": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode and not p["removing"]:
        module.exit_json(changed=False, snapshot={})
    if p["keep"] < 1:
        module.fail_json(msg="keep must be 1 or more")

    def run(argv):  # type: ignore[no-untyped-def]
        rc, out, err = module.run_command(list(argv))
        return rc, out, err

    try:
        etcdctl = [p["etcdctl"]] if p["etcdctl"] else crictl_etcdctl(run, module.get_bin_path("crictl") or "crictl")
        members: list = []
        if p["removing"]:
            rc, listed, err = run(etcdctl_argv(etcdctl, "member", "list", "--write-out=json"))
            if rc != 0:  # a linearizable read: it fails without quorum
                raise SnapshotError(
                    f"etcdctl member list failed (etcd without quorum?): {(err or listed).strip()[-300:]}"
                )
            _, health, _ = run(etcdctl_argv(etcdctl, "endpoint", "health", "--cluster", "--write-out=json"))
            members = member_health(listed, health)
            problems = quorum_problems(members, p["removing"])
            if problems:
                module.fail_json(msg="; ".join(problems), etcd_members=members)
        if module.check_mode:
            module.exit_json(changed=False, snapshot={}, etcd_members=members)
        snap = take_snapshot(run, etcdctl, node=p["node"], data_dir=p["data_dir"], dest_dir=p["directory"],
                             keep=p["keep"], copy_to=p["copy_to"])  # fmt: skip
    except (SnapshotError, OSError, subprocess.SubprocessError) as exc:
        module.fail_json(msg=f"etcd snapshot failed: {exc}")
    module.exit_json(changed=True, snapshot=snap, etcd_members=members)


if __name__ == "__main__":
    main()
